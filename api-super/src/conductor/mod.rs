//! The super-conductor: takes a create from the API (build requests and
//! request specs already in the API database), asks the global scheduler
//! for hosts (claims included), and hands each build to its cell: the
//! instance row in the cell database, the instance mapping pointed at the
//! cell and the build request deleted (one API-DB transaction), then the
//! `build_and_run_instance` cast, with alternates, to `compute.<host>` on the
//! cell's bus. No valid host (or any failure before the cast): the
//! instances are created in cell0 in ERROR with a fault, mapped to cell0,
//! their build requests deleted, and any claim released.
//!
//! A server deleted by its user while being scheduled: its build request is
//! gone when the build lands, so the landing transaction changes nothing;
//! the row just created in the cell is marked deleted and the claim
//! released. Nothing leaks.
//!
//! A build whose super-conductor died before it landed is found and driven
//! again by [`heal`] in another (or the restarted) api-super process.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use cell_mapping::db::{NewCellInstance, NewFault};
use cell_mapping::CellMapping;
use fabric::failpoint;
use fabric::rpc::{self, Alternate, BuildAndRunInstance, FlavorResources, RequestIds};
use prost::Message;

use crate::cells::{CellError, Cells};
use crate::compute_api::db::{BuildInstance, BuildLanded, ComputeDb, RequestSpec};
use crate::scheduler::{Request, ScheduleError, Scheduler, Selection};

pub mod heal;

/// The super-conductor.
#[derive(Debug)]
pub struct SuperConductor {
    db: ComputeDb,
    cells: Cells,
    scheduler: Arc<Scheduler>,
    lease: heal::Lease,
    /// Creates being scheduled in the background, bounded (see
    /// [`Self::reserve_create`]).
    creates: Arc<tokio::sync::Semaphore>,
    max_creates: usize,
}

/// How long a create waits for a place among those being scheduled before
/// it is refused with a 503 (nothing written).
const CREATE_SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Default of [`SuperConductor::new`]'s bound on creates being scheduled.
pub const MAX_PENDING_CREATES: usize = 1024;

/// A create's place among those being scheduled in the background.
#[derive(Debug)]
pub struct CreateSlot {
    _place: tokio::sync::OwnedSemaphorePermit,
}

/// The resources one instance of `spec` needs, as placement names them.
pub fn resources(spec: &RequestSpec) -> crate::scheduler::placement::Resources {
    let f = &spec.flavor;
    let disk = f.root_gb + f.ephemeral_gb + (f.swap + 1023) / 1024;
    let mut r = crate::scheduler::placement::Resources::new();
    r.insert("VCPU".into(), f.vcpus);
    r.insert("MEMORY_MB".into(), f.memory_mb);
    if disk > 0 {
        r.insert("DISK_GB".into(), disk);
    }
    r
}

impl SuperConductor {
    /// A super-conductor.
    pub fn new(db: ComputeDb, cells: Cells, scheduler: Arc<Scheduler>) -> Self {
        Self {
            db,
            cells,
            scheduler,
            lease: heal::Lease::default(),
            creates: Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_CREATES)),
            max_creates: MAX_PENDING_CREATES,
        }
    }

    /// Bounds the creates being scheduled in the background at once to
    /// `max` (at least 1).
    pub fn with_max_pending_creates(mut self, max: usize) -> Self {
        self.max_creates = max.max(1);
        self.creates = Arc::new(tokio::sync::Semaphore::new(self.max_creates));
        self
    }

    /// A place for one more create to be scheduled in the background,
    /// waiting a few seconds for one; `None` when the scheduler stays
    /// full (the API answers 503 and writes nothing). Each create holds
    /// its place until its builds are handed to their cells, so the
    /// background work of creates is bounded.
    pub async fn reserve_create(&self) -> Option<CreateSlot> {
        tokio::time::timeout(CREATE_SLOT_WAIT, self.creates.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|p| CreateSlot { _place: p })
    }

    /// The bound of [`Self::reserve_create`].
    pub fn max_pending_creates(&self) -> usize {
        self.max_creates
    }

    /// Schedules and builds `builds` in the background, holding `slot`
    /// until they are handed on.
    pub fn spawn_create(
        self: &Arc<Self>,
        slot: CreateSlot,
        builds: Vec<(BuildInstance, RequestSpec)>,
    ) {
        let conductor = self.clone();
        tokio::spawn(async move {
            conductor.schedule_and_build(builds).await;
            drop(slot);
        });
    }

    /// This process's build lease (kept by its heartbeat, see [`heal`]).
    pub fn lease(&self) -> &heal::Lease {
        &self.lease
    }

    /// The API database (as this process's builds are written).
    pub fn db(&self) -> &ComputeDb {
        &self.db
    }

    /// The cells.
    pub fn cells(&self) -> &Cells {
        &self.cells
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// Schedules and builds the instances of one create request.
    #[tracing::instrument(skip_all, fields(request_id = %builds.first().map(|b| b.1.request_id.as_str()).unwrap_or("")))]
    pub async fn schedule_and_build(&self, builds: Vec<(BuildInstance, RequestSpec)>) {
        let started = Utc::now();
        let Some((_, spec)) = builds.first() else {
            return;
        };
        let mut req = Request {
            resources: resources(spec),
            availability_zone: spec.availability_zone.clone(),
            force_host: spec.force_host.clone(),
            force_node: spec.force_node.clone(),
            requested_host: spec.requested_host.clone(),
            requested_node: spec.requested_node.clone(),
            image: spec.image_properties.clone(),
            ..Default::default()
        };
        let uuids: Vec<String> = builds.iter().map(|(b, _)| b.uuid.clone()).collect();
        // Flavor extra specs and server group (filters and weighers).
        if let Err(e) = crate::scheduler::request_context::fill(
            &self.db,
            &self.cells,
            (&spec.flavor.flavorid, spec.flavor_extra_specs.as_ref()),
            &uuids,
            spec.in_group,
            &mut req,
        )
        .await
        {
            tracing::error!(error = %e, "cannot read the scheduling context");
            for (b, s) in &builds {
                self.bury(started, b, s, "No valid host was found. ", &e)
                    .await;
            }
            return;
        }
        match self
            .scheduler
            .select(&req, &uuids, &spec.project_id, &spec.user_id)
            .await
        {
            Ok(selections) => {
                for ((b, s), sel) in builds.iter().zip(selections) {
                    let mut landed = self.land(b, s, &sel, started).await;
                    if let Err(LandError::CellDown(why)) = &landed {
                        // Nothing was written in the chosen cell: the build
                        // goes to another one (once), as if that cell's
                        // hosts had not been in the map.
                        if let Some(again) = self.reselect(&req, b, s, &sel, why).await {
                            landed = self.land(b, s, &again, started).await;
                        }
                    }
                    if let Err(e) = landed {
                        // Taken over meanwhile (this process's heartbeat
                        // was late and a healer cleaned up after it):
                        // the claim under this uuid is the new owner's
                        // now, and so is the build. Releasing it would
                        // leave that owner's server without allocation.
                        if self.taken_over(&b.uuid).await {
                            tracing::error!(instance = %b.uuid, error = %e, "build could not be handed to its cell, and another scheduler has taken it over meanwhile: its claim and its build are that one's");
                            continue;
                        }
                        tracing::error!(instance = %b.uuid, error = %e, "build could not be handed to its cell");
                        if let Err(e) = self.scheduler.placement().delete_allocations(&b.uuid).await
                        {
                            tracing::error!(instance = %b.uuid, error = %e, "could not release the claim");
                        }
                        self.bury(
                            started,
                            b,
                            s,
                            "Build of instance failed before reaching a host.",
                            &e.to_string(),
                        )
                        .await;
                    }
                }
            }
            Err(ScheduleError::NoValidHost(report)) => {
                tracing::info!(details = %report.details(), "no valid host");
                for (b, s) in &builds {
                    self.bury(
                        started,
                        b,
                        s,
                        "No valid host was found. ",
                        &report.details(),
                    )
                    .await;
                }
            }
            Err(e) => {
                tracing::error!(error = %chain(&e), "scheduling failed");
                for (b, s) in &builds {
                    self.bury(started, b, s, "No valid host was found. ", &chain(&e))
                        .await;
                }
            }
        }
    }

    /// Schedules `b` again after its chosen cell was found down before
    /// anything was written there: its claim released, the host map read
    /// again (a cell marked down contributes no host). `None` when no
    /// other host can be had (the caller buries the build).
    async fn reselect(
        &self,
        req: &Request,
        b: &BuildInstance,
        spec: &RequestSpec,
        failed: &Selection,
        why: &str,
    ) -> Option<Selection> {
        tracing::warn!(instance = %b.uuid, cell = %failed.host.cell.uuid, reason = %why,
            "the chosen cell is down; scheduling the build again without it");
        if let Err(e) = self.scheduler.placement().delete_allocations(&b.uuid).await {
            tracing::error!(instance = %b.uuid, error = %e, "could not release the claim; not scheduling again");
            return None;
        }
        self.scheduler.host_state().invalidate();
        match self
            .scheduler
            .select(
                req,
                std::slice::from_ref(&b.uuid),
                &spec.project_id,
                &spec.user_id,
            )
            .await
        {
            Ok(mut v) => v.pop(),
            Err(e) => {
                tracing::info!(instance = %b.uuid, error = %e, "no other host for a build whose cell is down");
                None
            }
        }
    }

    /// Creates the instance in the chosen cell, lands the mapping, casts
    /// the build.
    async fn land(
        &self,
        b: &BuildInstance,
        spec: &RequestSpec,
        sel: &Selection,
        started: DateTime<Utc>,
    ) -> Result<(), LandError> {
        let cell = &sel.host.cell;
        // A process whose heartbeat has not been written for half the
        // healing grace may already count as dead to another healer: it
        // writes nothing into a cell, gives the build up (owner cleared)
        // and leaves it to a healer, which releases the claim made for it
        // and schedules it again.
        if let Some(age) = self.lease.stale() {
            if let Some(me) = self.db.owner() {
                tracing::warn!(instance = %b.uuid, heartbeat_age_secs = age.as_secs_f64(),
                    "this scheduler's heartbeat is stale: leaving the build to the healer");
                self.db
                    .release_builds(std::slice::from_ref(&b.uuid), me)
                    .await
                    .map_err(|e| chain(&e))?;
                return Ok(());
            }
        }
        let cdb = match self.cells.db(cell).await {
            Ok(db) => db,
            Err(CellError::Down(d)) => return Err(LandError::CellDown(d.to_string())),
            Err(e) => return Err(chain(&e).into()),
        };
        let row = new_instance(
            b,
            spec,
            Some((&sel.host.host, &sel.host.node)),
            Some(
                b.availability_zone
                    .clone()
                    .unwrap_or_else(|| sel.host.availability_zone.clone()),
            ),
            None,
            started,
        );
        let created = match failpoint::hit(failpoint::BOOT_CELL_ROW) {
            Ok(()) => cdb.create_api_instance(&row).await,
            Err(e) => return Err(LandError::Step(BootStep::CellRow, e.to_string())),
        };
        let row_id = match created {
            Ok(id) => id,
            Err(e) if e.is_duplicate() => {
                // A row of this uuid is in the cell already. Either another
                // process took the build over and wrote it (its business:
                // leave everything to it), or a process this one took the
                // build over from wrote it late, after the take-over's
                // clean-up: that row can never land (landing needs the
                // build), so it goes, unless a compute launched it, and the
                // create is tried once more. If the owner cannot be read,
                // nothing is removed.
                if self.db.build_taken_over(&b.uuid).await.map_err(|o| {
                    format!(
                        "{}; and who owns the build cannot be read: {}",
                        chain(&e),
                        chain(&o)
                    )
                })? {
                    tracing::error!(instance = %b.uuid, cell = %cell.uuid, "build taken over by another scheduler before it landed; leaving it to that one");
                    return Ok(());
                }
                if !cdb
                    .api_purge_unlanded(&b.uuid)
                    .await
                    .map_err(|e| chain(&e))?
                {
                    return Err(chain(&e).into());
                }
                tracing::warn!(instance = %b.uuid, cell = %cell.uuid, "removed a row a previous owner of the build wrote after it lost the build; creating the instance again");
                cdb.create_api_instance(&row).await.map_err(|e| chain(&e))?
            }
            // No connection could be had: nothing was written there.
            Err(e) if e.is_refused() => return Err(LandError::CellDown(chain(&e))),
            Err(e) => return Err(LandError::Step(BootStep::CellRow, chain(&e))),
        };
        let landed = match failpoint::hit(failpoint::BOOT_LAND) {
            Ok(()) => self
                .db
                .finish_build(&b.uuid, cell.id)
                .await
                .map_err(|e| chain(&e)),
            Err(e) => Err(e.to_string()),
        };
        let landed = match landed {
            Ok(l) => l,
            Err(e) => {
                // Undo the cell row: the build was not landed, so it never
                // can be from this row (the caller releases the claim and
                // buries the build in cell0). A row left here would be an
                // instance without a mapping.
                match cdb.api_remove_unlanded_row(&b.uuid, row_id).await {
                    Ok(_) => {}
                    Err(u) => {
                        tracing::error!(instance = %b.uuid, cell = %cell.uuid, error = %chain(&u),
                            "could not remove the row of a build that did not land: the cell holds an instance without a mapping");
                    }
                }
                return Err(LandError::Step(BootStep::Land, e));
            }
        };
        let Some(landed) = landed else {
            if self.db.build_taken_over(&b.uuid).await.unwrap_or(false) {
                // Another process found this one's heartbeat stale and
                // drives the build now: the claim and the instance are
                // its business. The row just created here will never land
                // and goes (by its id: a row the new owner wrote since in
                // this cell is another one).
                tracing::error!(instance = %b.uuid, cell = %cell.uuid, "build taken over by another scheduler before it landed; leaving it to that one");
                match cdb.api_remove_unlanded_row(&b.uuid, row_id).await {
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(instance = %b.uuid, cell = %cell.uuid, error = %chain(&e), "could not remove the row this scheduler wrote for a build it lost");
                    }
                }
                return Ok(());
            }
            tracing::info!(instance = %b.uuid, "server deleted while it was scheduled");
            cdb.api_delete_local(&b.uuid).await.map_err(|e| chain(&e))?;
            self.scheduler
                .placement()
                .delete_allocations(&b.uuid)
                .await
                .map_err(|e| chain(&e))?;
            return Ok(());
        };
        carry_edits(&cdb, b, landed).await;
        // Landed: a later request finds it here without reading the
        // mapping (nor, when its spec shows nothing but a key name, the
        // spec).
        self.db.remember_landed(
            &b.uuid,
            cell.id,
            &b.project_id,
            &b.user_id,
            spec.key_name.as_deref(),
            spec.in_group.filter(|_| !spec.view_fields()),
        );
        let bus = self.cells.bus(cell).await.map_err(|e| chain(&e))?;
        let f = &spec.flavor;
        let build = BuildAndRunInstance {
            instance_uuid: b.uuid.clone(),
            request_id: spec.request_id.clone(),
            global_request_id: spec.global_request_id.clone(),
            flavor: Some(FlavorResources {
                name: f.name.clone(),
                vcpus: f.vcpus,
                memory_mb: f.memory_mb,
                root_gb: f.root_gb,
                ephemeral_gb: f.ephemeral_gb,
                swap_mb: f.swap,
            }),
            image_ref: b.image_ref.clone(),
            node: sel.host.node.clone(),
            alternates: sel
                .alternates
                .iter()
                .map(|a| Alternate {
                    host: a.host.clone(),
                    node: a.node.clone(),
                    provider_uuid: a.provider.clone(),
                })
                .collect(),
            project_id: b.project_id.clone(),
            user_id: b.user_id.clone(),
            attempt: 1,
            guest: Some(guest_data(b)),
        };
        let ids = RequestIds {
            request_id: spec.request_id.clone(),
            global_request_id: spec.global_request_id.clone(),
        };
        // Recorded before the cast, so that the cell conductor's healing
        // can re-drive the build if the host dies or the cast expires
        // unread (a failure here leaves only the build timeout to end it).
        let expires = Utc::now()
            + chrono::Duration::from_std(rpc::BUILD_CAST_TTL).unwrap_or(chrono::Duration::MAX);
        let recorded = match cdb
            .api_record_build_cast(
                &b.uuid,
                &sel.host.host,
                &build.encode_to_vec(),
                &ids.request_id,
                &ids.global_request_id,
                expires,
            )
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(instance = %b.uuid, host = %sel.host.host, error = %chain(&e), "could not record the build cast");
                false
            }
        };
        // The instance is in its cell now, landed: from here the cell
        // owns it. A cast that cannot be sent (tried three times) is
        // recorded as expired, so the cell conductor's healing re-drives
        // the build at its next pass instead of waiting out the cast's
        // lifetime.
        if let Err(e) = rpc::cast_build(
            bus.as_ref(),
            &sel.host.host,
            &build,
            &ids,
            failpoint::BOOT_CAST,
        )
        .await
        {
            tracing::error!(instance = %b.uuid, host = %sel.host.host, error = %e, "could not cast the build; leaving it to the cell's healing");
            let expired = if recorded {
                cdb.api_record_build_cast(
                    &b.uuid,
                    &sel.host.host,
                    &build.encode_to_vec(),
                    &ids.request_id,
                    &ids.global_request_id,
                    Utc::now(),
                )
                .await
                .map_err(|e| chain(&e))
            } else {
                Err("the cast was not recorded".to_owned())
            };
            if let Err(why) = expired {
                tracing::error!(instance = %b.uuid, error = %why, "the unsent build cast is not marked expired: the build timeout ends it");
            }
            return Ok(());
        }
        tracing::info!(instance = %b.uuid, host = %sel.host.host, cell = %cell.uuid, alternates = sel.alternates.len(), "build cast");
        Ok(())
    }

    /// Creates the instance in cell0 in ERROR with a fault and lands its
    /// mapping there.
    async fn bury(
        &self,
        started: DateTime<Utc>,
        b: &BuildInstance,
        spec: &RequestSpec,
        message: &str,
        details: &str,
    ) {
        let Some(cell0) = self.cells.cell0() else {
            tracing::error!(instance = %b.uuid, "no cell0 mapped: the build request stays");
            return;
        };
        // A build another scheduler has taken over is that one's to
        // finish; a row written into cell0 here would stay beside it.
        if self.taken_over(&b.uuid).await {
            tracing::error!(instance = %b.uuid, "build failed here and another scheduler has taken it over meanwhile; leaving it to that one");
            return;
        }
        if let Err(e) = self
            .try_bury(started, &cell0, b, spec, message, details)
            .await
        {
            tracing::error!(instance = %b.uuid, error = %e, "could not record the failed build in cell0");
        }
    }

    /// Whether another scheduler process owns this build now (see
    /// [`heal`]); `false` when that cannot be read (the build is then
    /// treated as this process's, as before the question was asked).
    async fn taken_over(&self, uuid: &str) -> bool {
        match self.db.build_taken_over(uuid).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(instance = %uuid, error = %e, "cannot tell whether another scheduler has taken the build over");
                false
            }
        }
    }

    async fn try_bury(
        &self,
        started: DateTime<Utc>,
        cell0: &CellMapping,
        b: &BuildInstance,
        spec: &RequestSpec,
        message: &str,
        details: &str,
    ) -> Result<(), String> {
        let cdb = self.cells.db(cell0).await.map_err(|e| chain(&e))?;
        let fault = NewFault {
            code: 500,
            message: message.to_owned(),
            details: details.to_owned(),
        };
        cdb.create_api_instance(&new_instance(
            b,
            spec,
            None,
            b.availability_zone.clone(),
            Some(fault),
            started,
        ))
        .await
        .map_err(|e| chain(&e))?;
        match self
            .db
            .finish_build(&b.uuid, cell0.id)
            .await
            .map_err(|e| chain(&e))?
        {
            Some(landed) => carry_edits(&cdb, b, landed).await,
            None => {
                if self.db.build_taken_over(&b.uuid).await.unwrap_or(false) {
                    tracing::error!(instance = %b.uuid, "build taken over by another scheduler before it was buried; leaving it to that one");
                    return Ok(());
                }
                cdb.api_delete_local(&b.uuid).await.map_err(|e| chain(&e))?;
            }
        }
        Ok(())
    }
}

/// Writes what `PUT /servers/{id}` changed on the build while it was being
/// scheduled (name, description, hostname) into the instance row just
/// written from the build as it was (`b`). Edits made after the landing
/// went to that row directly. Tried three times; a cell that refuses all
/// three is logged with the edits it lost.
async fn carry_edits(cdb: &cell_mapping::CellDb, b: &BuildInstance, landed: BuildLanded) {
    let Some(e) = landed.edited else {
        return;
    };
    // What changed (an edit sets, never unsets, the name, hostname and
    // addresses; the description may be cleared).
    let changed = |new: &Option<String>, old: &Option<String>| new.clone().filter(|_| new != old);
    let edit = cell_mapping::db::InstanceEdit {
        name: (e.display_name != b.display_name).then(|| e.display_name.clone()),
        description: (e.description != b.description).then(|| e.description.clone()),
        hostname: changed(&e.hostname, &b.hostname),
        access_ip_v4: changed(&e.access_ip_v4, &b.access_ip_v4),
        access_ip_v6: changed(&e.access_ip_v6, &b.access_ip_v6),
    };
    if edit.is_empty() {
        return;
    }
    let mut last = String::new();
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(100 << attempt)).await;
        }
        match cdb.api_update(&b.uuid, &edit).await {
            Ok(_) => return,
            Err(err) => last = chain(&err),
        }
    }
    tracing::error!(instance = %b.uuid, edit = ?edit, error = %last,
        "the server was renamed while it was scheduled and its cell did not take the edits");
}

/// The cell row a scheduler process writes for build `b`: on `host`
/// (`(host, node)`) in `availability_zone`, or in ERROR with `error`
/// (cell0), its create action scheduled from `scheduled_from`.
pub fn new_instance(
    b: &BuildInstance,
    spec: &RequestSpec,
    host: Option<(&str, &str)>,
    availability_zone: Option<String>,
    error: Option<NewFault>,
    scheduled_from: DateTime<Utc>,
) -> NewCellInstance {
    NewCellInstance {
        uuid: b.uuid.clone(),
        project_id: b.project_id.clone(),
        user_id: b.user_id.clone(),
        display_name: Some(b.display_name.clone()),
        flavor: b.flavor.clone(),
        image_ref: b.image_ref.clone(),
        host: host.map(|h| h.0.to_owned()),
        node: host.map(|h| h.1.to_owned()),
        availability_zone,
        created_at: b.created_at,
        request_id: spec.request_id.clone(),
        global_request_id: spec.global_request_id.clone(),
        reservation_id: b.reservation_id.clone(),
        launch_index: b.launch_index,
        error,
        scheduled_from: Some(scheduled_from),
        metadata: b.metadata.clone(),
        user_data: b.user_data.clone(),
        description: b.description.clone(),
        hostname: b.hostname.clone(),
        tags: b.tags.clone(),
        key_name: b.key_name.clone(),
        key_data: b.key_data.as_ref().map(|k| k.1.clone()),
        config_drive: b.config_drive,
        access_ip_v4: b.access_ip_v4.clone(),
        access_ip_v6: b.access_ip_v6.clone(),
        trusted_certs: b.trusted_certs.clone(),
    }
}

/// What the guest is told of itself ([`fabric::rpc::GuestData`]).
fn guest_data(b: &BuildInstance) -> fabric::rpc::GuestData {
    fabric::rpc::GuestData {
        name: b.display_name.clone(),
        hostname: b.hostname.clone().unwrap_or_default(),
        availability_zone: b.availability_zone.clone().unwrap_or_default(),
        launch_index: b.launch_index,
        metadata: b.metadata.iter().cloned().collect(),
        user_data: b.user_data.clone().unwrap_or_default(),
        key: b
            .key_name
            .as_ref()
            .zip(b.key_data.as_ref())
            .map(|(name, (kind, pk))| fabric::rpc::GuestKey {
                name: name.clone(),
                kind: kind.clone(),
                public_key: pk.clone(),
            }),
        config_drive: b.config_drive,
    }
}

/// An error and its causes on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// The super-conductor's steps of a boot (the compute's spawn follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootStep {
    /// The instance row in the chosen cell's database.
    CellRow,
    /// The instance mapping pointed at the cell, the build request gone.
    Land,
}

impl std::fmt::Display for BootStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CellRow => "the instance row in its cell (super-conductor)",
            Self::Land => "the landing in the API database (super-conductor)",
        })
    }
}

/// Why a build could not be landed in its cell.
#[derive(Debug)]
enum LandError {
    /// The cell is down and nothing was written in it: the build may go
    /// to another cell.
    CellDown(String),
    /// A step failed; what it wrote is undone.
    Step(BootStep, String),
    /// Anything else (the cell may hold a row of it).
    Other(String),
}

impl From<String> for LandError {
    fn from(s: String) -> Self {
        Self::Other(s)
    }
}

impl std::fmt::Display for LandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CellDown(s) | Self::Other(s) => f.write_str(s),
            Self::Step(step, s) => write!(f, "{step} failed: {s}"),
        }
    }
}
