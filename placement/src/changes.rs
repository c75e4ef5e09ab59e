//! Keeping the in-memory indexes of several placement processes on one
//! PostgreSQL database coherent with each other.
//!
//! After every committed write a process refreshes its own index and
//! announces what changed with `pg_notify` on [`CHANNEL`]; every process
//! follows the channel with a `LISTEN` connection and re-reads the named
//! providers from the database into its index. The payload only names what
//! changed — the database stays the source of truth, so the order in which
//! notifications arrive does not matter.
//!
//! Notifications can be lost (a process restarts its `LISTEN` connection, a
//! writer dies between commit and announcement), so a follower also rebuilds
//! its whole index when its connection was re-established and every
//! `index_reconcile_secs`. Staleness never costs correctness: claims
//! re-check generations and capacity inside their transaction.
//!
//! SQLite serves one process; nothing is announced there.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;

use crate::db::Db;
use crate::service::Placement;

/// The `LISTEN`/`NOTIFY` channel.
pub const CHANNEL: &str = "placement_index";

/// Keeps each payload under PostgreSQL's 8000-byte limit.
const UUIDS_PER_NOTIFICATION: usize = 150;

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Providers (anything: inventories, traits, aggregates, parents, deletion).
    Providers,
    /// Only the usages and generations of providers (allocation writes).
    Usages,
    /// Resource classes were created, renamed or deleted.
    Classes,
    /// Rebuild everything.
    All,
}

impl Change {
    fn code(self) -> char {
        match self {
            Change::Providers => 'p',
            Change::Usages => 'u',
            Change::Classes => 'c',
            Change::All => 'a',
        }
    }

    fn from_code(c: &str) -> Option<Change> {
        Some(match c {
            "p" => Change::Providers,
            "u" => Change::Usages,
            "c" => Change::Classes,
            "a" => Change::All,
            _ => return None,
        })
    }
}

/// One announcement, as carried in a notification's payload:
/// `<origin> <code> <uuid,uuid,…>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// The announcing process.
    pub origin: String,
    /// What changed.
    pub change: Change,
    /// The providers concerned (empty for classes and all).
    pub uuids: Vec<String>,
}

impl Announcement {
    /// The payloads for `uuids`, chunked under the size limit.
    pub fn payloads(origin: &str, change: Change, uuids: &[String]) -> Vec<String> {
        if uuids.is_empty() {
            return vec![format!("{origin} {} ", change.code())];
        }
        uuids
            .chunks(UUIDS_PER_NOTIFICATION)
            .map(|c| format!("{origin} {} {}", change.code(), c.join(",")))
            .collect()
    }

    /// Parses a payload; `None` for anything malformed.
    pub fn parse(payload: &str) -> Option<Announcement> {
        let mut parts = payload.splitn(3, ' ');
        let origin = parts.next().filter(|o| !o.is_empty())?.to_owned();
        let change = Change::from_code(parts.next()?)?;
        let uuids = parts
            .next()
            .unwrap_or("")
            .split(',')
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        Some(Announcement {
            origin,
            change,
            uuids,
        })
    }
}

/// Announces a change to the other processes (PostgreSQL; a no-op on SQLite).
pub async fn announce(
    db: &Db,
    origin: &str,
    change: Change,
    uuids: &[String],
) -> Result<(), sqlx::Error> {
    let Db::Pg(stash) = db else {
        return Ok(());
    };
    let pool = stash.pool();
    for payload in Announcement::payloads(origin, change, uuids) {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// How long the announcer waits after a change for more to send with it:
/// at most one notification (of each kind) per `LINGER` from a busy
/// process. Every notification is a statement here and wakes every
/// listening backend and process (this one's too); another process's index
/// lags by up to this much more, which can only cost it a claim answered
/// 409 (see the module's notes), never an over-allocation.
const LINGER: Duration = Duration::from_millis(20);

/// Sends this process's announcements from one background task, merging
/// what arrives within [`LINGER`] of each other into as few notifications
/// as the payload limit allows: at a thousand claims a second that is a few
/// hundred `pg_notify` statements instead of one per claim, and none of them
/// on a request's path. `None` on SQLite (nothing to announce).
pub(crate) fn spawn_announcer(
    db: &Db,
    origin: &str,
) -> Option<tokio::sync::mpsc::UnboundedSender<(Change, Vec<String>)>> {
    let Db::Pg(_) = db else {
        return None;
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Change, Vec<String>)>();
    let db = db.clone();
    let origin = origin.to_owned();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            tokio::time::sleep(LINGER).await;
            let mut batch = Batch::default();
            batch.add(first);
            while let Ok(more) = rx.try_recv() {
                batch.add(more);
            }
            for (change, uuids) in batch.into_announcements() {
                if let Err(e) = announce(&db, &origin, change, &uuids).await {
                    tracing::warn!(error = %e, "could not announce an index change to other placement processes");
                }
            }
        }
    });
    Some(tx)
}

/// Announcements merged: a rebuild covers everything, a provider re-read
/// covers a usage re-read of the same provider.
#[derive(Debug, Default)]
struct Batch {
    all: bool,
    classes: bool,
    providers: std::collections::BTreeSet<String>,
    usages: std::collections::BTreeSet<String>,
}

impl Batch {
    fn add(&mut self, (change, uuids): (Change, Vec<String>)) {
        match change {
            Change::All => self.all = true,
            Change::Classes => self.classes = true,
            Change::Providers => self.providers.extend(uuids),
            Change::Usages => self.usages.extend(uuids),
        }
    }

    /// Classes first (a re-read provider may use a new class), then either a
    /// rebuild or the provider and usage re-reads.
    fn into_announcements(self) -> Vec<(Change, Vec<String>)> {
        let mut out = Vec::new();
        if self.classes {
            out.push((Change::Classes, Vec::new()));
        }
        if self.all {
            out.push((Change::All, Vec::new()));
            return out;
        }
        let usages: Vec<String> = self
            .usages
            .into_iter()
            .filter(|u| !self.providers.contains(u))
            .collect();
        if !self.providers.is_empty() {
            out.push((Change::Providers, self.providers.into_iter().collect()));
        }
        if !usages.is_empty() {
            out.push((Change::Usages, usages));
        }
        out
    }
}

/// Applies another process's announcement to this process's index.
async fn apply(placement: &Placement, a: &Announcement) -> crate::error::Result<()> {
    match a.change {
        Change::Providers => placement.refresh_local(&a.uuids).await,
        Change::Usages => placement.refresh_usages_local(&a.uuids).await,
        Change::Classes => placement.reload_classes_local().await,
        Change::All => placement.refresh_all_local().await,
    }
}

async fn rebuild(placement: &Placement, why: &str) {
    let started = std::time::Instant::now();
    let r = async {
        placement.reload_classes_local().await?;
        placement.refresh_all_local().await
    }
    .await;
    match r {
        Ok(()) => tracing::debug!(
            why,
            ms = started.elapsed().as_millis() as u64,
            "index rebuilt"
        ),
        Err(e) => {
            tracing::warn!(why, error = %e, "index rebuild failed; retrying at the next reconcile")
        }
    }
}

/// The task following other processes' announcements; stops when dropped.
pub struct Follower(tokio::task::JoinHandle<()>);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follows the other processes' announcements on a PostgreSQL database
/// (`None` on SQLite): a `LISTEN` connection of its own, a rebuild after
/// every reconnect, and one every `reconcile` (zero: never). Returns once
/// listening, so no announcement made after this returns is missed.
pub async fn follow(
    placement: Arc<Placement>,
    url: &str,
    reconcile: Duration,
) -> anyhow::Result<Option<Follower>> {
    if !matches!(placement.db, Db::Pg(_)) {
        return Ok(None);
    }
    let mut listener = PgListener::connect(url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the LISTEN connection: {e}"))?;
    listener
        .listen(CHANNEL)
        .await
        .map_err(|e| anyhow::anyhow!("cannot LISTEN on {CHANNEL}: {e}"))?;
    // Changes made between building the index and listening.
    rebuild(&placement, "start").await;
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(if reconcile.is_zero() {
            Duration::from_secs(365 * 24 * 3600)
        } else {
            reconcile
        });
        tick.tick().await;
        let mut failures = 0u32;
        loop {
            tokio::select! {
                _ = tick.tick(), if !reconcile.is_zero() => rebuild(&placement, "reconcile").await,
                msg = listener.try_recv() => match msg {
                    Ok(Some(n)) => {
                        failures = 0;
                        let Some(a) = Announcement::parse(n.payload()) else {
                            tracing::warn!("ignoring a malformed index announcement");
                            continue;
                        };
                        if a.origin == placement.origin {
                            continue;
                        }
                        if let Err(e) = apply(&placement, &a).await {
                            tracing::warn!(error = %e, "applying an index announcement failed; rebuilding");
                            rebuild(&placement, "apply failed").await;
                        }
                    }
                    // The connection was lost, and whatever was announced
                    // meanwhile with it: listen again, then rebuild, so no
                    // change falls between the two.
                    Ok(None) => {
                        let mut attempt = 0u32;
                        while let Err(e) = listener.listen(CHANNEL).await {
                            attempt = attempt.saturating_add(1);
                            let wait = Duration::from_millis(100u64 << attempt.min(6));
                            tracing::warn!(error = %e, retry_ms = wait.as_millis() as u64, "index LISTEN reconnect failed");
                            tokio::time::sleep(wait).await;
                        }
                        rebuild(&placement, "reconnected").await;
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let wait = Duration::from_millis(100u64 << failures.min(6));
                        tracing::warn!(error = %e, retry_ms = wait.as_millis() as u64, "index LISTEN connection failed");
                        tokio::time::sleep(wait).await;
                    }
                },
            }
        }
    });
    Ok(Some(Follower(task)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_merges_announcements() {
        let v = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut b = Batch::default();
        b.add((Change::Usages, v(&["a", "b"])));
        b.add((Change::Providers, v(&["b"])));
        b.add((Change::Usages, v(&["c", "a"])));
        b.add((Change::Classes, Vec::new()));
        assert_eq!(
            b.into_announcements(),
            [
                (Change::Classes, Vec::new()),
                (Change::Providers, v(&["b"])),
                (Change::Usages, v(&["a", "c"])),
            ],
            "a provider re-read covers its usage re-read"
        );
        let mut b = Batch::default();
        b.add((Change::Providers, v(&["a"])));
        b.add((Change::All, Vec::new()));
        assert_eq!(b.into_announcements(), [(Change::All, Vec::new())]);
    }

    #[test]
    fn payloads_round_trip_and_stay_small() {
        let uuids: Vec<String> = (0..400)
            .map(|i| format!("00000000-0000-0000-0000-{i:012}"))
            .collect();
        let payloads = Announcement::payloads("me", Change::Usages, &uuids);
        assert_eq!(payloads.len(), 3);
        let mut back = Vec::new();
        for p in &payloads {
            assert!(p.len() < 8000, "{}", p.len());
            let a = Announcement::parse(p).unwrap();
            assert_eq!((a.origin.as_str(), a.change), ("me", Change::Usages));
            back.extend(a.uuids);
        }
        assert_eq!(back, uuids);
        let all = Announcement::payloads("me", Change::All, &[]);
        assert_eq!(
            Announcement::parse(&all[0]).unwrap(),
            Announcement {
                origin: "me".into(),
                change: Change::All,
                uuids: vec![]
            }
        );
        assert_eq!(Announcement::parse("me x a,b"), None);
        assert_eq!(Announcement::parse(""), None);
    }
}
