//! The Compute API's in-process caches over the API database: what a
//! create reads (flavor, extra specs, quota overrides) for a short time,
//! and where landed servers are. A part of [`super`].

use super::*;

/// The most `(flavor, project, admin)` answers [`CreateReadsCache`] keeps
/// (emptied when full).
pub(super) const CREATE_READS_CACHE_MAX: usize = 1024;

/// [`CreateReadsCache`]'s answers by (flavor id, project, admin), with
/// when each was read.
pub(super) type CreateReadsRows =
    std::collections::HashMap<(String, String, bool), (CreateReads, std::time::Instant)>;

/// What [`ComputeDb::flavor_for_create`] answered (the flavor, its extra
/// specs, the project's quota overrides), kept for a short time
/// ([`ComputeDb::with_create_reads_cache`]; off until set): every server
/// create read them, one of the boot path's statements, and they rarely
/// change. Only flavors found are kept (never a miss). Every write through
/// this handle (or its clones) to flavors, extra specs, flavor access or
/// quotas empties it when it is done, and an answer read while such a
/// write was under way is not kept (the write counter moved), so this
/// process sees its own writes at once; another process's writes (a
/// second `api-super` on the same API database) within the cache time.
#[derive(Debug, Default)]
pub(super) struct CreateReadsCache {
    ttl: std::time::Duration,
    writes: std::sync::atomic::AtomicU64,
    rows: std::sync::Mutex<CreateReadsRows>,
}

/// Empties the create-reads cache when dropped: on every way out of a
/// write to what it keeps.
pub(super) struct ForgetCreateReads<'a>(&'a CreateReadsCache);

impl Drop for ForgetCreateReads<'_> {
    fn drop(&mut self) {
        self.0.forget_all();
    }
}

impl CreateReadsCache {
    pub(super) fn new(ttl: std::time::Duration) -> Self {
        Self {
            ttl,
            ..Default::default()
        }
    }

    pub(super) fn rows(&self) -> std::sync::MutexGuard<'_, CreateReadsRows> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn get(&self, key: &(String, String, bool)) -> Option<CreateReads> {
        if self.ttl.is_zero() {
            return None;
        }
        self.rows()
            .get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(r, _)| r.clone())
    }

    /// The write counter, taken before a read that [`Self::put`] may keep.
    pub(super) fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn put(&self, key: (String, String, bool), reads: &CreateReads, writes_before: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut rows = self.rows();
        if self.writes() != writes_before {
            return;
        }
        if rows.len() >= CREATE_READS_CACHE_MAX {
            rows.clear();
        }
        rows.insert(key, (reads.clone(), std::time::Instant::now()));
    }

    pub(super) fn forget_all(&self) {
        let mut rows = self.rows();
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        rows.clear();
    }

    /// Call before a write to what the cache keeps; hold it to the end.
    pub(super) fn forget_after(&self) -> ForgetCreateReads<'_> {
        ForgetCreateReads(self)
    }
}

/// The most landed mappings a process remembers (emptied when full).
pub const LANDED_CACHE_MAX: usize = 65_536;

/// The cell and project of servers that landed in a cell, as this process
/// saw them (landed here, or read from `instance_mappings`). Neither
/// changes once a build has landed (no server moves between cells), so a
/// server found again needs no API-database read to know where it is; the
/// cell stays the authority on whether it exists. A mapping queued for
/// delete is forgotten here; one deleted elsewhere is found gone in its
/// cell (404, as without the entry), and one whose cell is gone from the
/// cell cache is forgotten and read again.
#[derive(Debug, Default)]
pub(super) struct LandedMappings {
    map: std::sync::Mutex<std::collections::HashMap<Box<str>, Landed>>,
}

/// A landed server as this process knows it.
#[derive(Debug)]
pub(super) struct Landed {
    cell_id: i64,
    project: Box<str>,
    /// The server's user (`None`: its mapping does not say), the target of
    /// `user_id` policy rules.
    user: Option<Box<str>>,
    /// What a show needs beside the cell's row, when it cannot change:
    /// the key pair name of a server that landed here outside any server
    /// group (a server joins a group only when it is created, and no API
    /// changes its key name). `None`: not known here (read from the
    /// mapping, or in a group, whose deletion ends the membership), the
    /// show reads it. Below 2.98 only: the image's properties shown from
    /// 2.98 change with a rebuild, so those shows read the spec.
    shown: Option<Option<Box<str>>>,
}

impl LandedMappings {
    pub(super) fn get(&self, uuid: &str) -> Option<(i64, String, Option<String>)> {
        let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        m.get(uuid).map(|l| {
            (
                l.cell_id,
                l.project.to_string(),
                l.user.as_deref().map(str::to_owned),
            )
        })
    }

    /// The key name (`Some(None)`: none) of a server remembered with it.
    pub(super) fn shown(&self, uuid: &str) -> Option<Option<String>> {
        let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        m.get(uuid)?
            .shown
            .as_ref()
            .map(|k| k.as_deref().map(str::to_owned))
    }

    /// Remembers a landing; `shown` as in [`Landed::shown`] (`None` keeps
    /// what an entry of the same cell and project already knew).
    pub(super) fn put(
        &self,
        uuid: &str,
        cell_id: i64,
        project: &str,
        user: Option<&str>,
        shown: Option<Option<&str>>,
    ) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= LANDED_CACHE_MAX && !m.contains_key(uuid) {
            m.clear();
        }
        let kept = match (shown, m.get(uuid)) {
            (Some(k), _) => Some(k.map(Box::from)),
            (None, Some(old)) if old.cell_id == cell_id && *old.project == *project => {
                old.shown.clone()
            }
            (None, _) => None,
        };
        m.insert(
            uuid.into(),
            Landed {
                cell_id,
                project: project.into(),
                user: user.map(Box::from),
                shown: kept,
            },
        );
    }

    pub(super) fn forget(&self, uuid: &str) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uuid);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::{LandedMappings, LANDED_CACHE_MAX};

    #[test]
    pub(super) fn landed_mappings_are_remembered_forgotten_and_bounded() {
        let l = LandedMappings::default();
        assert_eq!(l.get("a"), None);
        l.put("a", 3, "p1", Some("u"), None);
        assert_eq!(l.get("a"), Some((3, "p1".to_owned(), Some("u".to_owned()))));
        assert_eq!(l.shown("a"), None);
        // A key name remembered at landing is kept when the mapping is
        // read again (same cell and project), dropped when they differ.
        l.put("a", 3, "p1", Some("u"), Some(Some("k")));
        l.put("a", 3, "p1", Some("u"), None);
        assert_eq!(l.shown("a"), Some(Some("k".to_owned())));
        l.put("a", 4, "p1", Some("u"), None);
        assert_eq!(l.shown("a"), None);
        l.put("a", 3, "p1", Some("u"), Some(None));
        assert_eq!(l.shown("a"), Some(None));
        l.forget("a");
        assert_eq!(l.get("a"), None);
        for i in 0..LANDED_CACHE_MAX {
            l.put(&i.to_string(), 1, "p", Some("u"), None);
        }
        assert_eq!(l.len(), LANDED_CACHE_MAX);
        // Updating a remembered one keeps the rest.
        l.put("0", 2, "p", Some("u"), None);
        assert_eq!(l.len(), LANDED_CACHE_MAX);
        assert_eq!(l.get("0"), Some((2, "p".to_owned(), Some("u".to_owned()))));
        // One more than the most: emptied, then the new one remembered.
        l.put("new", 1, "p", Some("u"), None);
        assert_eq!(l.len(), 1);
        assert_eq!(
            l.get("new"),
            Some((1, "p".to_owned(), Some("u".to_owned())))
        );
        assert_eq!(l.get("0"), None);
    }
}
