//! The placement service: the database (source of truth) plus the
//! in-memory index (for candidates and list filters), kept coherent: after
//! every committed write the affected providers are re-read from the
//! database and mirrored into the index, and on PostgreSQL the change is
//! announced to the other placement processes on the same database (see
//! [`crate::changes`]).

use std::collections::HashMap;
use std::sync::RwLock;

use fabric::ids::ProviderUuid;

use crate::api::allocations::{check_writes, INCOMPLETE_CONSUMER};
use crate::changes::{self, Change};
use crate::db::allocations::{ConsumerInfo, ConsumerWrite, UsageState, Written};
use crate::db::Db;
use crate::engine::{AllocationCandidates, CandidatesRequest, Index};
use crate::error::{PlacementError, Result};

/// Standard trait names (os-traits 3.9.0), synced into the database at start.
const STANDARD_TRAITS: &str = include_str!("../data/standard-traits.txt");

/// Whether `name` is one of the standard traits.
pub fn is_standard_trait(name: &str) -> bool {
    STANDARD_TRAITS.lines().any(|l| l == name)
}

/// One placement service instance.
pub struct Placement {
    /// The database.
    pub db: Db,
    index: RwLock<Index>,
    classes: RwLock<HashMap<String, i64>>,
    /// Names this process in change notifications (to skip its own).
    pub(crate) origin: String,
    /// The background announcer (PostgreSQL only).
    announcer: Option<tokio::sync::mpsc::UnboundedSender<(Change, Vec<String>)>>,
}

impl Placement {
    /// Opens (and migrates) the database at `url`, syncs the standard
    /// traits and builds the index.
    pub async fn open(url: &str, max_connections: u32) -> Result<Self> {
        let db = Db::open(url, max_connections).await?;
        let names: Vec<&str> = STANDARD_TRAITS.lines().filter(|l| !l.is_empty()).collect();
        db.sync_traits(&names).await?;
        let classes = db.class_ids().await?;
        let records = db.provider_records(None).await?;
        let index = Index::from_snapshot(records).map_err(|e| {
            PlacementError::Db(sqlx::Error::Protocol(format!(
                "cannot index the placement database: {e}"
            )))
        })?;
        let origin = uuid::Uuid::new_v4().simple().to_string();
        let announcer = changes::spawn_announcer(&db, &origin);
        Ok(Self {
            db,
            index: RwLock::new(index),
            classes: RwLock::new(classes),
            origin,
            announcer,
        })
    }

    /// Runs `f` on the index (read lock; never held across an await).
    pub fn with_index<T>(&self, f: impl FnOnce(&Index) -> T) -> T {
        let guard = self.index.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
    }

    /// Allocation candidates for an already parsed request
    /// (`GET /allocation_candidates`, and the all-in-one region's scheduler
    /// in process): a resource class or trait the request names that does
    /// not exist is a 400, as upstream.
    pub async fn allocation_candidates(
        &self,
        request: &CandidatesRequest,
    ) -> Result<AllocationCandidates> {
        self.check_names(request).await?;
        Ok(self.with_index(|ix| ix.allocation_candidates(request))?)
    }

    /// 400 unless every resource class and trait `request` names exists,
    /// checked in upstream's order: `root_required`, then each group's
    /// classes and traits.
    async fn check_names(&self, request: &CandidatesRequest) -> Result<()> {
        let mut known: Vec<&str> = Vec::new();
        for t in request.root_required.iter().chain(&request.root_forbidden) {
            self.check_trait(&mut known, t).await?;
        }
        for g in &request.groups {
            self.class_ids_for(g.resources.keys(), |n| {
                format!(
                    "Invalid resource class in resources parameter: No such resource class {n}."
                )
            })
            .await?;
            for t in g.required.iter().flatten().chain(&g.forbidden) {
                self.check_trait(&mut known, t).await?;
            }
        }
        Ok(())
    }

    /// 400 "No such trait(s)" unless `name` exists; `known` holds the
    /// names already found.
    async fn check_trait<'a>(&self, known: &mut Vec<&'a str>, name: &'a str) -> Result<()> {
        if known.contains(&name) {
            return Ok(());
        }
        if !self.db.trait_exists(name).await? {
            return Err(PlacementError::bad_request(format!(
                "No such trait(s): {name}."
            )));
        }
        known.push(name);
        Ok(())
    }

    /// Checks the amounts and classes of every write, then writes them all
    /// in one transaction and mirrors the touched providers into the index
    /// (`PUT /allocations/{consumer}`, `POST /allocations`, and the
    /// all-in-one region's scheduler in process).
    pub async fn write_consumers(&self, writes: &[ConsumerWrite]) -> Result<()> {
        let classes = check_writes(writes)?;
        let ids = self
            .class_ids_for(classes.iter(), |c| {
                format!("Unable to allocate inventory for consumer: No such resource class {c}.")
            })
            .await?;
        let written = self.db.write_allocations(writes, &ids).await?;
        self.after_allocation_write(written).await
    }

    /// Removes every allocation of `consumer` (`DELETE
    /// /allocations/{consumer}`); `false` when it has none.
    pub async fn delete_consumer_allocations(&self, consumer: &str) -> Result<bool> {
        let a = self.db.consumer_allocations(consumer).await?;
        if a.allocations.is_empty() {
            return Ok(false);
        }
        let c = a.consumer.unwrap_or(ConsumerInfo {
            project_id: INCOMPLETE_CONSUMER.to_owned(),
            user_id: INCOMPLETE_CONSUMER.to_owned(),
            generation: 0,
            consumer_type: None,
        });
        let w = ConsumerWrite {
            consumer: consumer.to_owned(),
            allocations: Default::default(),
            project_id: c.project_id,
            user_id: c.user_id,
            expected_generation: None,
            consumer_type: None,
        };
        let written = self.db.write_allocations(&[w], &Default::default()).await?;
        self.after_allocation_write(written).await?;
        Ok(true)
    }

    /// Re-reads the given providers from the database into the index;
    /// providers gone from the database leave the index. Other processes
    /// are told to do the same.
    pub async fn refresh(&self, uuids: &[String]) -> Result<()> {
        self.refresh_local(uuids).await?;
        self.announce(Change::Providers, uuids);
        Ok(())
    }

    /// [`Self::refresh`] without telling other processes.
    pub(crate) async fn refresh_local(&self, uuids: &[String]) -> Result<()> {
        let records = self.db.provider_records(Some(uuids)).await?;
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        let present: Vec<String> = records.iter().map(|r| r.uuid.to_string()).collect();
        for rec in records {
            if let Err(e) = index.upsert_provider(rec) {
                tracing::warn!(error = %e, "index refresh failed; rebuilding on next full refresh");
            }
        }
        for u in uuids.iter().filter(|u| !present.contains(u)) {
            if let Ok(p) = u.parse::<ProviderUuid>() {
                let _ = index.remove_provider(&p);
            }
        }
        Ok(())
    }

    /// After an allocation write: re-reads only generation and usage of the
    /// touched providers (one query) into the index. A provider the index
    /// does not hold yet (created by another process) is read in full.
    /// Other processes are told to do the same.
    pub async fn refresh_usages(&self, uuids: &[String]) -> Result<()> {
        self.refresh_usages_local(uuids).await?;
        self.announce(Change::Usages, uuids);
        Ok(())
    }

    /// [`Self::refresh_usages`] without telling other processes.
    pub(crate) async fn refresh_usages_local(&self, uuids: &[String]) -> Result<()> {
        let states = self.db.usage_states(uuids).await?;
        self.apply_usages(states).await
    }

    /// After this process's allocation write: the providers that received
    /// resources take the generation and usage the write's transaction read
    /// (no second read); only providers that merely lost allocations are
    /// re-read. Other processes are told.
    pub async fn after_allocation_write(&self, written: Written) -> Result<()> {
        let rest: Vec<String> = written
            .touched
            .iter()
            .filter(|u| !written.states.iter().any(|s| &s.uuid == *u))
            .cloned()
            .collect();
        self.apply_usages(written.states).await?;
        if !rest.is_empty() {
            self.refresh_usages_local(&rest).await?;
        }
        self.announce(Change::Usages, &written.touched);
        Ok(())
    }

    /// Mirrors generations and usages into the index. A state older than
    /// the index's (a lower generation: two writes' refreshes can land out
    /// of order) is skipped; a provider the index does not hold yet is read
    /// in full.
    async fn apply_usages(&self, states: Vec<UsageState>) -> Result<()> {
        let mut missing = Vec::new();
        {
            let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
            for st in states {
                let Ok(uuid) = st.uuid.parse::<ProviderUuid>() else {
                    continue;
                };
                match index.provider(&uuid) {
                    Some(mut rec) => {
                        let generation = u32::try_from(st.generation).unwrap_or(u32::MAX);
                        if generation < rec.generation {
                            continue;
                        }
                        rec.usages = st.usages;
                        rec.generation = generation;
                        if let Err(e) = index.upsert_provider(rec) {
                            tracing::warn!(error = %e, "index usage refresh failed");
                        }
                    }
                    None => missing.push(st.uuid),
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            self.refresh_local(&missing).await
        }
    }

    /// Rebuilds the whole index from the database; other processes too.
    pub async fn refresh_all(&self) -> Result<()> {
        self.refresh_all_local().await?;
        self.announce(Change::All, &[]);
        Ok(())
    }

    /// [`Self::refresh_all`] without telling other processes.
    pub(crate) async fn refresh_all_local(&self) -> Result<()> {
        let records = self.db.provider_records(None).await?;
        let fresh = Index::from_snapshot(records).map_err(|e| {
            PlacementError::Db(sqlx::Error::Protocol(format!(
                "cannot index the placement database: {e}"
            )))
        })?;
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// Ids of the given resource classes; any unknown one is a 400 with
    /// `unknown` formatting the message.
    pub async fn class_ids_for<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String> + Clone,
        unknown: impl Fn(&str) -> String,
    ) -> Result<HashMap<String, i64>> {
        let lookup = |map: &HashMap<String, i64>| -> Option<HashMap<String, i64>> {
            names
                .clone()
                .into_iter()
                .map(|n| map.get(n).map(|id| (n.clone(), *id)))
                .collect()
        };
        if let Some(found) = lookup(&self.classes.read().unwrap_or_else(|p| p.into_inner())) {
            return Ok(found);
        }
        // Another request (or process) may have created it: reload once.
        let fresh = self.db.class_ids().await?;
        let found = lookup(&fresh);
        *self.classes.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        match found {
            Some(f) => Ok(f),
            None => {
                let missing = names
                    .into_iter()
                    .find(|n| !fresh.contains_key(*n))
                    .cloned()
                    .unwrap_or_default();
                Err(PlacementError::bad_request(unknown(&missing)))
            }
        }
    }

    /// Forgets the class cache (after a class was created, renamed or
    /// deleted); other processes too.
    pub async fn reload_classes(&self) -> Result<()> {
        self.reload_classes_local().await?;
        self.announce(Change::Classes, &[]);
        Ok(())
    }

    /// [`Self::reload_classes`] without telling other processes.
    pub(crate) async fn reload_classes_local(&self) -> Result<()> {
        let fresh = self.db.class_ids().await?;
        *self.classes.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// Tells the other processes on this database (PostgreSQL only) what
    /// changed, through the background announcer (which merges what comes
    /// within a few milliseconds). A lost announcement costs staleness until
    /// the next reconcile, never correctness: writes re-check generations
    /// and capacity in the database.
    fn announce(&self, change: Change, uuids: &[String]) {
        if let Some(tx) = &self.announcer {
            // The announcer lives as long as the runtime; a send fails only
            // while it shuts down.
            let _ = tx.send((change, uuids.to_vec()));
        }
    }
}
