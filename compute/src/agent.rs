//! The per-host agent: one tokio task per host.
//!
//! On start it consumes `compute.<host>`, registers its service and compute
//! node through the conductor (retrying until the conductor answers), and
//! reports the node's inventory to placement. Before it takes any cast it
//! reconciles the hypervisor's guests with the cell database
//! ([`crate::init_host`], bounded by [`HostConfig::init_timeout`]); only
//! then is it [`HostState::Ready`]. Then it heartbeats every
//! `heartbeat_interval` and runs the casts it receives, each build or
//! terminate in a task of its own:
//!
//! - `build_and_run_instance`: task_state `block_device_mapping` →
//!   `networking` → `spawning` → driver spawn → vm_state `active`, task_state
//!   NULL, power_state running. Each step is one `instance_update` call that
//!   also records the step's action events (request id of the build). On a
//!   spawn failure the agent asks the conductor to reschedule with the
//!   alternates that are left; the conductor decides (alternate, or ERROR
//!   with a fault).
//! - `terminate_instance`: task_state `deleting`, driver destroy, then
//!   `instance_destroyed` (the conductor marks it deleted and removes the
//!   allocations).
//! - the server actions (`stop_instance`, `start_instance`,
//!   `reboot_instance`, `pause_instance`, `unpause_instance`,
//!   `suspend_instance`, `resume_instance`, `rebuild_instance`): the API has
//!   set the action's task state; the agent starts the action's event
//!   (`compute_stop_instance`, …; a reboot moves to `reboot_started`, a
//!   rebuild to `rebuild_spawning` in the same call), runs the driver, then
//!   sets the new vm_state and power_state with task_state NULL and finishes
//!   the event. A failure clears the task state (a failed reboot or rebuild
//!   also sets ERROR, as upstream), records a fault and finishes the event
//!   with `Error` and the error chain as traceback.
//!
//! A cast is acknowledged once handled; redeliveries are harmless because
//! every step states the task state it expects (a build starts only from
//! `scheduling`).
//!
//! Conductor calls without an answer (the broker connection lost by a
//! broker restart or a network blip, or no reply within the call timeout
//! from a loaded conductor) are called again, once the bus has reconnected
//! if it had to, for the methods that are safe to repeat and for at most
//! `call_retry_deadline` ([`crate::conductor`]); every `instance_update`
//! carries an idempotency key so that a repeat of an update that was
//! applied (its reply lost or late) is answered as done: a short broker
//! outage or a slow conductor delays a build, it does not fail it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::bus::{Delivery, Subscription, Transport};
use fabric::failpoint;
use fabric::ids::{InstanceUuid, ProviderUuid};
use fabric::rpc::{
    self, action, code, method, task_state as ts, vm_state as vs, ActionEvent, EventPhase,
    InstanceUpdate, NullableString, RequestIds,
};
use fabric::wire::now_unix_ms;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{error, info, instrument, warn, Instrument};

use crate::actions::ActionPlan;
use crate::conductor::{CallRetry, ConductorClient};
use crate::driver::{Driver, DriverError, SpawnSpec};
use crate::error::{chain, ComputeError};
use crate::init_host;
use crate::metrics;
use crate::placement::{Inventory, Placement};

/// The resources a host offers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostResources {
    /// Physical CPUs.
    pub vcpus: i64,
    /// Memory, MB.
    pub memory_mb: i64,
    /// Local disk, GB.
    pub disk_gb: i64,
    /// VCPU allocation ratio reported to placement.
    pub cpu_allocation_ratio: f64,
    /// MEMORY_MB allocation ratio.
    pub ram_allocation_ratio: f64,
    /// DISK_GB allocation ratio.
    pub disk_allocation_ratio: f64,
}

impl Default for HostResources {
    fn default() -> Self {
        Self {
            vcpus: 16,
            memory_mb: 65536,
            disk_gb: 1000,
            cpu_allocation_ratio: 16.0,
            ram_allocation_ratio: 1.5,
            disk_allocation_ratio: 1.0,
        }
    }
}

/// One host's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// Service host name (`compute.<host>` is its queue).
    pub host: String,
    /// Hypervisor hostname (the node; the placement provider's name).
    pub node: String,
    /// What it offers.
    pub resources: HostResources,
    /// Time between heartbeats.
    pub heartbeat_interval: Duration,
    /// Timeout of each conductor call.
    pub call_timeout: Duration,
    /// How long a conductor call without an answer (connection lost, or no
    /// reply within `call_timeout`) is repeated (the methods safe to
    /// repeat; zero: never). See [`crate::conductor`].
    pub call_retry_deadline: Duration,
    /// Wait before retrying a failed registration.
    pub retry_interval: Duration,
    /// How often the power-state sync looks at every guest, not only
    /// those that changed (Nova's `sync_power_state_interval`).
    pub power_sync_full_interval: Duration,
    /// Bound of the start-up reconciliation ([`crate::init_host`]); the
    /// host becomes ready when it ends or this has passed.
    pub init_timeout: Duration,
}

impl HostConfig {
    /// Defaults for `host` (node named like the host).
    pub fn new(host: &str) -> Self {
        Self {
            host: host.to_owned(),
            node: host.to_owned(),
            resources: HostResources::default(),
            heartbeat_interval: Duration::from_secs(1),
            call_timeout: Duration::from_secs(30),
            call_retry_deadline: CallRetry::default().deadline,
            retry_interval: Duration::from_secs(1),
            init_timeout: Duration::from_secs(120),
            power_sync_full_interval: Duration::from_secs(600),
        }
    }
}

/// Where an agent is.
#[derive(Debug, Clone, PartialEq)]
pub enum HostState {
    /// Registering.
    Starting,
    /// Registered: the compute node's uuid (= placement provider uuid).
    Ready {
        /// The compute node uuid.
        node_uuid: ProviderUuid,
    },
    /// Stopped.
    Stopped,
}

/// A running agent.
#[derive(Debug)]
pub struct HostHandle {
    host: String,
    state: watch::Receiver<HostState>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl HostHandle {
    /// The host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Waits until the agent is registered; returns its compute node uuid.
    pub async fn ready(&self) -> Result<ProviderUuid, ComputeError> {
        let mut rx = self.state.clone();
        let state = rx
            .wait_for(|s| !matches!(s, HostState::Starting))
            .await
            .map_err(|_| ComputeError::Stopped(self.host.clone()))?
            .clone();
        match state {
            HostState::Ready { node_uuid } => Ok(node_uuid),
            _ => Err(ComputeError::Stopped(self.host.clone())),
        }
    }

    /// Stops the agent (builds in flight are abandoned; their casts, not
    /// acknowledged, go back to the queue).
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// What every task of one host shares.
#[derive(Debug)]
pub(crate) struct Host {
    pub(crate) cfg: HostConfig,
    pub(crate) driver: Arc<dyn Driver>,
    pub(crate) placement: Arc<dyn Placement>,
    pub(crate) conductor: ConductorClient,
}

/// Starts the agent of one host on its cell's `bus`. Returns at once; see
/// [`HostHandle::ready`].
pub fn start_host(
    cfg: HostConfig,
    bus: Arc<dyn Transport>,
    driver: Arc<dyn Driver>,
    placement: Arc<dyn Placement>,
) -> HostHandle {
    let (state_tx, state) = watch::channel(HostState::Starting);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let host = cfg.host.clone();
    let conductor = ConductorClient::new(bus, cfg.call_timeout)
        .with_retry(CallRetry::for_up_to(cfg.call_retry_deadline));
    let h = Arc::new(Host {
        cfg,
        driver,
        placement,
        conductor,
    });
    let span = tracing::info_span!("compute", host = %host);
    let task = tokio::spawn(run(h, state_tx, shutdown_rx).instrument(span));
    HostHandle {
        host,
        state,
        shutdown,
        task,
    }
}

async fn run(h: Arc<Host>, state: watch::Sender<HostState>, mut shutdown: watch::Receiver<bool>) {
    let queue = rpc::compute_queue(&h.cfg.host);
    let started = tokio::select! {
        r = register(&h, &queue) => Some(r),
        _ = stopped(&mut shutdown) => None,
    };
    let Some((mut sub, node_uuid, mut reported)) = started else {
        state.send_replace(HostState::Stopped);
        return;
    };
    // Before any cast is taken (they wait in the subscription): finish or
    // undo what the last run of this host left (Nova's `init_host`).
    let mut done = init_host::Summary::default();
    let reconciled = tokio::select! {
        r = tokio::time::timeout(h.cfg.init_timeout, init_host::reconcile_into(
            &h.cfg.host, h.driver.as_ref(), &h.conductor, &mut done)) => Some(r),
        _ = stopped(&mut shutdown) => None,
    };
    match reconciled {
        None => {
            state.send_replace(HostState::Stopped);
            return;
        }
        Some(Ok(Ok(()))) => info!(summary = %done, "start-up reconciliation done"),
        Some(Ok(Err(e))) => {
            error!(error = %chain(&e), "start-up reconciliation could not list the guests or the instances; skipped")
        }
        Some(Err(_)) => error!(
            timeout = ?h.cfg.init_timeout,
            done = %done,
            "start-up reconciliation timed out; the host starts with what was done"
        ),
    }
    state.send_replace(HostState::Ready { node_uuid });
    metrics::host_ready(1.0);
    // Heartbeats in their own task: a call waiting on a conductor that
    // does not answer (up to the call timeout) holds up neither the casts
    // nor the shutdown, which drops the call where it waits.
    let beats = tokio::spawn({
        let h = h.clone();
        async move {
            let mut beat = tokio::time::interval(h.cfg.heartbeat_interval);
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            beat.tick().await;
            loop {
                beat.tick().await;
                // A heartbeat that could not reach a conductor within two
                // intervals says nothing true any more.
                let ok = h
                    .conductor
                    .heartbeat(
                        &rpc::Heartbeat {
                            host: h.cfg.host.clone(),
                            binary: rpc::COMPUTE_BINARY.to_owned(),
                        },
                        h.cfg.heartbeat_interval * 2,
                    )
                    .await;
                if let Err(e) = &ok {
                    warn!(error = %chain(e), "heartbeat failed");
                }
                metrics::heartbeat(ok.is_ok());
                if !reported {
                    reported = h.report_inventory(node_uuid).await;
                }
            }
        }
        .in_current_span()
    });
    let sync = h.driver.power_sync_interval().map(|every| {
        tokio::spawn(
            crate::power_sync::run(
                h.cfg.host.clone(),
                h.driver.clone(),
                h.conductor.clone(),
                every,
                h.cfg.power_sync_full_interval,
            )
            .in_current_span(),
        )
    });
    let mut work = JoinSet::new();
    loop {
        tokio::select! {
            d = sub.recv() => match d {
                Some(d) => {
                    let h = h.clone();
                    work.spawn(async move { h.handle(d).await });
                }
                None => break,
            },
            Some(_) = work.join_next(), if !work.is_empty() => {}
            _ = stopped(&mut shutdown) => break,
        }
    }
    beats.abort();
    if let Some(s) = sync {
        s.abort();
    }
    work.shutdown().await;
    metrics::host_ready(-1.0);
    state.send_replace(HostState::Stopped);
}

/// Consumes the host's queue, registers service and node (retrying until the
/// conductor answers), reports inventory once (retried at heartbeats).
async fn register(h: &Host, queue: &str) -> (Subscription, ProviderUuid, bool) {
    let proposed = ProviderUuid::new_random();
    loop {
        match h.try_register(queue, proposed).await {
            Ok((sub, node_uuid)) => {
                let reported = h.report_inventory(node_uuid).await;
                info!(node_uuid = %node_uuid, "compute registered");
                return (sub, node_uuid, reported);
            }
            Err(e) => {
                warn!(error = %chain(&e), "registration failed; retrying");
                tokio::time::sleep(h.cfg.retry_interval).await;
            }
        }
    }
}

pub(crate) fn event(
    instance: &str,
    action_name: &str,
    event_name: &str,
    host: &str,
    ids: &RequestIds,
    phase: EventPhase,
    failure: Option<&str>,
) -> ActionEvent {
    ActionEvent {
        instance_uuid: instance.to_owned(),
        action: action_name.to_owned(),
        event: event_name.to_owned(),
        host: host.to_owned(),
        request_id: ids.request_id.clone(),
        global_request_id: ids.global_request_id.clone(),
        phase: phase as i32,
        result: match (phase, failure) {
            (EventPhase::Finish, None) => action::SUCCESS.to_owned(),
            (EventPhase::Finish, Some(_)) => action::ERROR.to_owned(),
            _ => String::new(),
        },
        traceback: failure.unwrap_or_default().to_owned(),
        at_unix_ms: now_unix_ms(),
        details: failure
            .and_then(|f| f.lines().next())
            .unwrap_or_default()
            .to_owned(),
    }
}

/// Whether a conductor refusal means "this instance no longer wants it"
/// (deleted, or its task state moved on): stop quietly.
pub(crate) fn superseded(e: &ComputeError) -> bool {
    matches!(
        e.remote_code(),
        Some(code::UNEXPECTED_TASK_STATE) | Some(code::NOT_FOUND)
    )
}

impl Host {
    /// What the host offers: read from the hypervisor where the driver can
    /// (libvirt), else the configured `[resources]`; the allocation ratios
    /// always come from the configuration.
    fn resources(&self) -> HostResources {
        let mut r = self.cfg.resources;
        if let Some(inv) = self.driver.host_inventory() {
            r.vcpus = inv.vcpus;
            r.memory_mb = inv.memory_mb;
            r.disk_gb = inv.disk_gb;
        }
        r
    }

    async fn try_register(
        &self,
        queue: &str,
        proposed: ProviderUuid,
    ) -> Result<(Subscription, ProviderUuid), ComputeError> {
        let sub = self.conductor.bus().consume(queue).await?;
        self.conductor
            .register_service(&rpc::ServiceRegister {
                host: self.cfg.host.clone(),
                binary: rpc::COMPUTE_BINARY.to_owned(),
                topic: rpc::COMPUTE_TOPIC.to_owned(),
                version: rpc::SERVICE_VERSION,
            })
            .await?;
        let r = &self.resources();
        let running = self.driver.list().map_or(0, |g| g.len()) as i64;
        let node = self
            .conductor
            .update_compute_node(&rpc::ComputeNodeUpdate {
                uuid: proposed.to_string(),
                host: self.cfg.host.clone(),
                hypervisor_hostname: self.cfg.node.clone(),
                hypervisor_type: self.driver.hypervisor_type().to_owned(),
                hypervisor_version: self.driver.hypervisor_version(),
                supported_instances: serde_json::to_string(&self.driver.supported_instances())
                    .unwrap_or_default(),
                vcpus: r.vcpus,
                memory_mb: r.memory_mb,
                local_gb: r.disk_gb,
                running_vms: running,
                cpu_allocation_ratio: r.cpu_allocation_ratio,
                ram_allocation_ratio: r.ram_allocation_ratio,
                disk_allocation_ratio: r.disk_allocation_ratio,
                ..Default::default()
            })
            .await?;
        let node_uuid = node.uuid.parse().unwrap_or(proposed);
        Ok((sub, node_uuid))
    }

    /// Reports the node's provider and inventory; false (logged) on failure.
    async fn report_inventory(&self, node_uuid: ProviderUuid) -> bool {
        let r = &self.resources();
        let inv = Inventory {
            vcpus: r.vcpus,
            memory_mb: r.memory_mb,
            disk_gb: r.disk_gb,
            cpu_allocation_ratio: r.cpu_allocation_ratio,
            ram_allocation_ratio: r.ram_allocation_ratio,
            disk_allocation_ratio: r.disk_allocation_ratio,
        };
        let res = async {
            self.placement
                .ensure_provider(node_uuid, &self.cfg.node)
                .await?;
            self.placement.set_inventory(node_uuid, &inv).await?;
            if let Some(t) = self.driver.traits() {
                self.placement
                    .merge_traits(node_uuid, &t.present, &t.absent)
                    .await?;
            }
            Ok::<(), crate::placement::PlacementError>(())
        }
        .await;
        match res {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %chain(&e), "could not report inventory to placement; will retry");
                false
            }
        }
    }

    async fn handle(&self, d: Delivery) {
        let env = d.envelope().clone();
        // A cast can expire while it waits for a worker here: its sender
        // has moved on (a build is re-driven by the cell conductor).
        if env.is_expired() {
            info!(method = %env.method, request_id = %env.request_id, "dropping a cast that expired before it was handled");
            if let Err(e) = d.reject().await {
                warn!(error = %chain(&e), "could not drop the expired cast");
            }
            return;
        }
        let outcome = match env.method.as_str() {
            method::BUILD_AND_RUN_INSTANCE => {
                match env.decode_message::<rpc::BuildAndRunInstance>() {
                    Ok(mut b) => {
                        if b.request_id.is_empty() {
                            b.request_id = env.request_id.clone();
                            b.global_request_id = env.global_request_id.clone();
                        }
                        self.build(b).await;
                        Ok(())
                    }
                    Err(source) => Err(source),
                }
            }
            method::TERMINATE_INSTANCE => match env.decode_message::<rpc::TerminateInstance>() {
                Ok(mut t) => {
                    if t.request_id.is_empty() {
                        t.request_id = env.request_id.clone();
                        t.global_request_id = env.global_request_id.clone();
                    }
                    self.terminate(t).await;
                    Ok(())
                }
                Err(source) => Err(source),
            },
            method::STOP_INSTANCE
            | method::START_INSTANCE
            | method::REBOOT_INSTANCE
            | method::PAUSE_INSTANCE
            | method::UNPAUSE_INSTANCE
            | method::SUSPEND_INSTANCE
            | method::RESUME_INSTANCE
            | method::REBUILD_INSTANCE => {
                match env.decode_message::<rpc::InstanceActionRequest>() {
                    Ok(mut r) => {
                        if r.request_id.is_empty() {
                            r.request_id = env.request_id.clone();
                            r.global_request_id = env.global_request_id.clone();
                        }
                        if let Some(plan) = ActionPlan::of(&env.method, &r) {
                            self.run_action(plan, r).await;
                        }
                        Ok(())
                    }
                    Err(source) => Err(source),
                }
            }
            method::GET_CONSOLE_OUTPUT => {
                self.console_output(d).await;
                return;
            }
            method::GET_SERIAL_CONSOLE => {
                self.console_addr(d, false).await;
                return;
            }
            method::GET_VNC_CONSOLE => {
                self.console_addr(d, true).await;
                return;
            }
            method::GET_HOST_UPTIME => {
                self.host_uptime(d).await;
                return;
            }
            method::GET_DIAGNOSTICS => {
                self.diagnostics(d, false).await;
                return;
            }
            method::GET_INSTANCE_DIAGNOSTICS => {
                self.diagnostics(d, true).await;
                return;
            }
            method::EXTERNAL_INSTANCE_EVENT => {
                self.external_events(d).await;
                return;
            }
            other => {
                warn!(method = %other.chars().take(64).collect::<String>(), "unknown method; dropped");
                let _ = d.reject().await;
                return;
            }
        };
        match outcome {
            Ok(()) => {
                if let Err(e) = d.ack().await {
                    warn!(error = %chain(&e), "could not acknowledge");
                }
            }
            Err(source) => {
                let e = ComputeError::Decode {
                    method: env.method.clone(),
                    source,
                };
                error!(error = %chain(&e), "poison message dropped");
                let _ = d.reject().await;
            }
        }
    }

    /// One step of the build: `u` for the build's instance, finishing and
    /// starting the step events with it.
    fn step(
        &self,
        b: &rpc::BuildAndRunInstance,
        ids: &RequestIds,
        mut u: InstanceUpdate,
        finish: Option<&str>,
        start: &[&str],
    ) -> InstanceUpdate {
        let host = &self.cfg.host;
        u.instance_uuid = b.instance_uuid.clone();
        let phases = finish
            .map(|ev| (ev, EventPhase::Finish))
            .into_iter()
            .chain(start.iter().map(|ev| (*ev, EventPhase::Start)));
        for (ev, phase) in phases {
            u.events.push(event(
                &b.instance_uuid,
                action::CREATE,
                ev,
                host,
                ids,
                phase,
                None,
            ));
        }
        u
    }

    #[instrument(skip_all, fields(instance = %b.instance_uuid, request_id = %b.request_id,
        global_request_id = %b.global_request_id, attempt = b.attempt))]
    async fn build(&self, b: rpc::BuildAndRunInstance) {
        let ids = RequestIds {
            request_id: b.request_id.clone(),
            global_request_id: b.global_request_id.clone(),
        };
        let Ok(instance) = b.instance_uuid.parse::<InstanceUuid>() else {
            error!("build for an invalid instance uuid dropped");
            return;
        };
        let total = Instant::now();
        let node = if b.node.is_empty() {
            self.cfg.node.clone()
        } else {
            b.node.clone()
        };
        // 1. block_device_mapping (claims the instance for this host).
        //    Only from `scheduling` (set by the API, and by the conductor on
        //    a reschedule): a build cast redelivered after the instance went
        //    on (ACTIVE or ERROR, task state NULL) is refused, not rebuilt.
        // 2. networking. 3. spawning.
        // No work lies between these steps here (block devices are the
        // image's local disk, there is no network service), so they go in
        // one call: the conductor checks each in turn and, as they follow
        // one another, commits them as one change with all their events.
        let t = Instant::now();
        let bdm = InstanceUpdate {
            vm_state: Some(vs::BUILDING.to_owned()),
            task_state: NullableString::set(ts::BLOCK_DEVICE_MAPPING),
            expected_task_states: vec![ts::SCHEDULING.to_owned()],
            // Fenced on this host: a build the conductor moved to an
            // alternate meanwhile (this host was seen dead) is refused
            // here, not taken back.
            expected_host: Some(self.cfg.host.clone()),
            host: NullableString::set(self.cfg.host.clone()),
            node: NullableString::set(node),
            ..Default::default()
        };
        let networking = InstanceUpdate {
            task_state: NullableString::set(ts::NETWORKING),
            expected_task_states: vec![ts::BLOCK_DEVICE_MAPPING.to_owned()],
            ..Default::default()
        };
        let spawning = InstanceUpdate {
            task_state: NullableString::set(ts::SPAWNING),
            expected_task_states: vec![ts::NETWORKING.to_owned()],
            ..Default::default()
        };
        let steps = vec![
            self.step(
                &b,
                &ids,
                bdm,
                None,
                &[action::EV_BUILD, action::EV_BLOCK_DEVICE_MAPPING],
            ),
            self.step(
                &b,
                &ids,
                networking,
                Some(action::EV_BLOCK_DEVICE_MAPPING),
                &[action::EV_NETWORKING],
            ),
            self.step(
                &b,
                &ids,
                spawning,
                Some(action::EV_NETWORKING),
                &[action::EV_SPAWN],
            ),
        ];
        if let Err(e) = self.conductor.update_instance_steps(steps, &ids).await {
            return self.abandon(&e, false, instance, &ids).await;
        }
        metrics::phase("prepare", t.elapsed());
        let t = Instant::now();
        let spec = SpawnSpec {
            instance,
            flavor: b.flavor.clone().unwrap_or_default(),
            image_ref: b.image_ref.clone(),
            project_id: b.project_id.clone(),
            guest: b.guest.clone(),
        };
        let spawned = match failpoint::hit(failpoint::BOOT_SPAWN) {
            Ok(()) => self.driver.spawn(&spec).await,
            Err(e) => Err(DriverError::SpawnFailed(e.to_string())),
        };
        if let Err(e) = spawned {
            metrics::phase("spawning", t.elapsed());
            return self.spawn_failed(&b, &ids, instance, &e.into()).await;
        }
        metrics::phase("spawning", t.elapsed());
        // 4. ACTIVE.
        let u = InstanceUpdate {
            vm_state: Some(vs::ACTIVE.to_owned()),
            task_state: NullableString::null(),
            expected_task_states: vec![ts::SPAWNING.to_owned()],
            power_state: Some(self.driver.power_state(instance)),
            launched_at_unix_ms: Some(now_unix_ms()),
            launched_on: Some(self.cfg.host.clone()),
            progress: Some(100),
            ..Default::default()
        };
        let mut u = u;
        u.events.push(event(
            &b.instance_uuid,
            action::CREATE,
            action::EV_BUILD,
            &self.cfg.host,
            &ids,
            EventPhase::Finish,
            None,
        ));
        let u = self.step(&b, &ids, u, Some(action::EV_SPAWN), &[]);
        if let Err(e) = self.conductor.update_instance(&u, &ids).await {
            return self.abandon(&e, true, instance, &ids).await;
        }
        metrics::phase("total", total.elapsed());
        metrics::build("active");
        info!("instance active");
    }

    /// A build step was refused or could not be reported: stop (destroying
    /// the guest if it was spawned).
    async fn abandon(
        &self,
        e: &ComputeError,
        spawned: bool,
        instance: InstanceUuid,
        ids: &RequestIds,
    ) {
        if spawned {
            if let Err(d) = self.driver.destroy(instance).await {
                warn!(error = %chain(&d), "could not destroy the abandoned guest");
            }
        }
        if superseded(e) {
            info!(error = %chain(e), "build superseded (deleted or moved on); stopped");
            metrics::build("aborted");
            return;
        }
        // The build cannot go on: never leave the server in BUILD. Put it in
        // ERROR with a fault naming this host, retrying a few times while
        // the conductor is busy or briefly away.
        error!(error = %chain(e), "build could not be reported; setting ERROR");
        metrics::build("failed");
        let host = &self.cfg.host;
        let fault = rpc::InstanceFault {
            instance_uuid: instance.to_string(),
            code: 500,
            message: format!(
                "Build of instance {instance} failed on host {host}: {}",
                chain(e)
            ),
            details: chain(e),
            host: host.clone(),
        };
        let u = InstanceUpdate {
            instance_uuid: instance.to_string(),
            vm_state: Some(vs::ERROR.to_owned()),
            task_state: NullableString::null(),
            ..Default::default()
        };
        for attempt in 1..=5u64 {
            match self.conductor.fail_instance(&u, &fault, ids).await {
                Ok(_) => return,
                Err(err) if superseded(&err) => return,
                Err(err) => {
                    warn!(attempt, error = %chain(&err), "could not set ERROR yet");
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
            }
        }
        error!("could not set ERROR; the instance stays in its last task state until healed");
    }

    /// The driver failed: clean up, record the failed events, and ask the
    /// conductor to reschedule (it sets ERROR when no alternate is left).
    async fn spawn_failed(
        &self,
        b: &rpc::BuildAndRunInstance,
        ids: &RequestIds,
        instance: InstanceUuid,
        e: &ComputeError,
    ) {
        let why = chain(e);
        warn!(error = %why, "spawn failed");
        if let Err(d) = self.driver.destroy(instance).await {
            warn!(error = %chain(&d), "could not clean up after the failed spawn");
        }
        let host = &self.cfg.host;
        let u = InstanceUpdate {
            instance_uuid: b.instance_uuid.clone(),
            events: [action::EV_SPAWN, action::EV_BUILD]
                .into_iter()
                .map(|ev| {
                    event(
                        &b.instance_uuid,
                        action::CREATE,
                        ev,
                        host,
                        ids,
                        EventPhase::Finish,
                        Some(&why),
                    )
                })
                .collect(),
            ..Default::default()
        };
        if let Err(e) = self.conductor.update_instance(&u, ids).await {
            if superseded(&e) {
                return self.abandon(&e, false, instance, ids).await;
            }
            warn!(error = %chain(&e), "could not record the failed events");
        }
        let req = rpc::Reschedule {
            build: Some(b.clone()),
            failed_host: host.clone(),
            failed_node: if b.node.is_empty() {
                self.cfg.node.clone()
            } else {
                b.node.clone()
            },
            error: why.clone(),
            traceback: why.clone(),
        };
        match self.conductor.reschedule(&req, ids).await {
            Ok(r) if r.outcome == rpc::RescheduleOutcome::Rescheduled as i32 => {
                info!(to = %r.host, "build rescheduled");
                metrics::build("rescheduled");
            }
            Ok(_) => {
                info!("no alternate left: the conductor set ERROR");
                metrics::build("failed");
            }
            Err(e) if superseded(&e) => self.abandon(&e, false, instance, ids).await,
            Err(re) => {
                // No answer: the conductor may have failed, or rescheduled
                // and lost its reply with the broker connection. Put the
                // instance in ERROR ourselves only while it is still on this
                // host (a rescheduled one is on its alternate's), then the
                // fault naming this host and the error.
                error!(error = %chain(&re), "reschedule failed; setting ERROR");
                let u = InstanceUpdate {
                    instance_uuid: b.instance_uuid.clone(),
                    vm_state: Some(vs::ERROR.to_owned()),
                    task_state: NullableString::null(),
                    expected_host: Some(host.clone()),
                    ..Default::default()
                };
                let fault = rpc::InstanceFault {
                    instance_uuid: b.instance_uuid.clone(),
                    code: 500,
                    message: format!("Build of instance {instance} failed on host {host}: {why}"),
                    details: format!("{why}\nreschedule failed: {}", chain(&re)),
                    host: host.clone(),
                };
                match self.conductor.fail_instance(&u, &fault, ids).await {
                    Ok(_) => metrics::build("failed"),
                    Err(e) if superseded(&e) => {
                        info!(error = %chain(&e),
                            "the reschedule went through after all (the instance left this host): not setting ERROR");
                        metrics::build("rescheduled");
                    }
                    Err(e) => {
                        error!(error = %chain(&e), "could not set ERROR");
                        metrics::build("failed");
                    }
                }
            }
        }
    }
}

/// Resolves once `rx` says stop (or its sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
