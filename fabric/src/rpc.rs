//! The compute ↔ cell-conductor wire: method names, queue names, the state
//! vocabulary of the boot flow, and the protobuf messages.
//!
//! # Who sends what
//!
//! | method | from → to | kind | request → reply |
//! | --- | --- | --- | --- |
//! | [`method::SERVICE_REGISTER`] | compute → `conductor` | call | [`ServiceRegister`] → [`ServiceRecord`] |
//! | [`method::COMPUTE_NODE_UPDATE`] | compute → `conductor` | call | [`ComputeNodeUpdate`] → [`ComputeNodeRecord`] |
//! | [`method::SERVICE_HEARTBEAT`] | compute → `conductor` | call | [`Heartbeat`] → [`ServiceRecord`] |
//! | [`method::SERVICE_HEARTBEAT`] | compute → [`CONDUCTOR_LIVENESS_QUEUE`] | cast | [`Heartbeat`] |
//! | [`method::INSTANCE_UPDATE`] | compute → `conductor` | call | [`InstanceUpdate`] → [`InstanceRecord`] |
//! | [`method::INSTANCE_UPDATE_STEPS`] | compute → `conductor` | call | [`InstanceSteps`] → [`InstanceRecord`] |
//! | [`method::ACTION_EVENT_START`] | compute → `conductor` | call | [`ActionEvent`] → [`Ack`] |
//! | [`method::ACTION_EVENT_FINISH`] | compute → `conductor` | call | [`ActionEvent`] → [`Ack`] |
//! | [`method::INSTANCE_FAULT`] | compute → `conductor` | call | [`InstanceFault`] → [`Ack`] |
//! | [`method::INSTANCE_DESTROYED`] | compute → `conductor` | call | [`InstanceDestroyed`] → [`InstanceRecord`] |
//! | [`method::RESCHEDULE`] | compute → `conductor` | call | [`Reschedule`] → [`RescheduleResult`] |
//! | [`method::BUILD_AND_RUN_INSTANCE`] | super-conductor or conductor → `compute.<host>` | cast | [`BuildAndRunInstance`] |
//! | [`method::TERMINATE_INSTANCE`] | API → `compute.<host>` | cast | [`TerminateInstance`] |
//! | [`method::STOP_INSTANCE`], [`method::START_INSTANCE`], [`method::REBOOT_INSTANCE`], [`method::PAUSE_INSTANCE`], [`method::UNPAUSE_INSTANCE`], [`method::SUSPEND_INSTANCE`], [`method::RESUME_INSTANCE`], [`method::REBUILD_INSTANCE`] | API → `compute.<host>` | cast | [`InstanceActionRequest`] |
//!
//! Failed calls answer with the envelope's `error` set; the codes are in
//! [`code`].
//!
//! Every cast carries a deadline ([`cast`] takes it): a copy that waited
//! longer in a queue (a dead host's, say) is dropped, never replayed when
//! its consumer comes back. What the cast asked for is then the sender's
//! side to finish (the cell conductor's healing, for a build).
//!
//! # Versioning
//!
//! Field tags are the contract: a tag, once released, is never reused or
//! renumbered; new fields take new tags and old readers skip them. Every
//! request carries no version of its own: a receiver that needs to tell old
//! from new senders looks at which fields are present. A breaking change gets
//! a new method name (`..._v2`), so both can be served during an upgrade.
//!
//! Optional scalars use proto3 `optional`. A nullable *string column* that
//! can be set to NULL uses [`NullableString`]: absent = leave unchanged,
//! present with `value: None` = set NULL.

use std::time::Duration;

use prost::Message;

use crate::bus::{BusError, Transport};

mod build_cast;
mod guest;
mod host_calls;
mod placement_audit;
use crate::wire::Envelope;
pub use build_cast::cast_build;
pub use guest::{GuestData, GuestKey};
pub use host_calls::{
    ConsoleOutput, ConsoleOutputRequest, DiagnosticsReply, DiagnosticsRequest, ExternalEvent,
    ExternalEvents, HostUptime, HostUptimeRequest, SerialConsole, SerialConsoleRequest,
};
pub use placement_audit::{
    finding, AllocationFinding, AllocationReport, HealAllocations, PlacementAudit,
};

/// The queue every cell conductor consumes (competing consumers).
pub const CONDUCTOR_QUEUE: &str = "conductor";

/// The queue of heartbeat casts every cell conductor also consumes. Apart
/// from [`CONDUCTOR_QUEUE`], so that a backlog of work never delays a
/// heartbeat and makes a live host look dead.
pub const CONDUCTOR_LIVENESS_QUEUE: &str = "conductor_liveness";

/// How long a build cast may wait in a host's queue before it is dropped.
/// The cell conductor's healing re-drives a build whose cast was dropped.
pub const BUILD_CAST_TTL: Duration = Duration::from_secs(60);

/// How long an action or delete cast may wait in a host's queue.
pub const ACTION_CAST_TTL: Duration = Duration::from_secs(60);

/// The queue of the compute agent on `host`.
pub fn compute_queue(host: &str) -> String {
    format!("compute.{host}")
}

/// The `services.binary` of a compute agent (as upstream).
pub const COMPUTE_BINARY: &str = "nova-compute";
/// The `services.binary` of a cell conductor (as upstream).
pub const CONDUCTOR_BINARY: &str = "nova-conductor";
/// The `services.topic` of a compute agent.
pub const COMPUTE_TOPIC: &str = "compute";

/// The service version this code speaks (stored in `services.version`).
pub const SERVICE_VERSION: i64 = 1;

/// Method names (the envelope's `method`).
pub mod method {
    /// Registers (or re-registers) a service row.
    pub const SERVICE_REGISTER: &str = "service_register";
    /// Creates or updates a compute node with its resources.
    pub const COMPUTE_NODE_UPDATE: &str = "compute_node_update";
    /// Bumps `report_count` and `last_seen_up` of a service.
    pub const SERVICE_HEARTBEAT: &str = "service_heartbeat";
    /// Updates fields of an instance, with an expected-task-state check.
    pub const INSTANCE_UPDATE: &str = "instance_update";
    /// Applies several updates of one instance in order, each committed on
    /// its own (steps with no work between them, in one round trip).
    pub const INSTANCE_UPDATE_STEPS: &str = "instance_update_steps";
    /// Finds (and with `delete`, removes or moves) orphaned and misplaced
    /// allocations of the cell ([`super::PlacementAudit`]).
    pub const PLACEMENT_AUDIT: &str = "placement_audit";
    /// Creates missing allocations of the cell's settled instances
    /// ([`super::HealAllocations`]).
    pub const HEAL_ALLOCATIONS: &str = "heal_allocations";
    /// Records the start of an instance action event.
    pub const ACTION_EVENT_START: &str = "instance_action_event_start";
    /// Records the end of an instance action event.
    pub const ACTION_EVENT_FINISH: &str = "instance_action_event_finish";
    /// Records an instance fault.
    pub const INSTANCE_FAULT: &str = "instance_fault_create";
    /// The hypervisor no longer has the instance: mark it deleted.
    pub const INSTANCE_DESTROYED: &str = "instance_destroyed";
    /// A build failed on a host: try an alternate, or set ERROR.
    pub const RESCHEDULE: &str = "reschedule_instance";
    /// The instances of a host, and any of the named ones wherever they
    /// are (deleted too): what a compute reconciles at start-up.
    pub const INSTANCE_GET_ALL_BY_HOST: &str = "instance_get_all_by_host";
    /// Build and start an instance on this host (cast to `compute.<host>`).
    pub const BUILD_AND_RUN_INSTANCE: &str = "build_and_run_instance";
    /// Destroy an instance on this host (cast to `compute.<host>`).
    pub const TERMINATE_INSTANCE: &str = "terminate_instance";
    /// Power the guest off (`os-stop`; cast to `compute.<host>`).
    pub const STOP_INSTANCE: &str = "stop_instance";
    /// Power the guest on (`os-start`).
    pub const START_INSTANCE: &str = "start_instance";
    /// Reboot the guest (soft or hard).
    pub const REBOOT_INSTANCE: &str = "reboot_instance";
    /// Pause the guest.
    pub const PAUSE_INSTANCE: &str = "pause_instance";
    /// Unpause the guest.
    pub const UNPAUSE_INSTANCE: &str = "unpause_instance";
    /// Suspend the guest.
    pub const SUSPEND_INSTANCE: &str = "suspend_instance";
    /// Resume the suspended guest.
    pub const RESUME_INSTANCE: &str = "resume_instance";
    /// Rebuild the guest from an image.
    pub const REBUILD_INSTANCE: &str = "rebuild_instance";
    /// The tail of the guest's console log (a call to `compute.<host>`).
    pub const GET_CONSOLE_OUTPUT: &str = "get_console_output";
    /// Where the guest's serial console listens (a call to `compute.<host>`).
    pub const GET_SERIAL_CONSOLE: &str = "get_serial_console";
    /// Where the guest's VNC server listens (a call to `compute.<host>`;
    /// the request and reply are the serial console's).
    pub const GET_VNC_CONSOLE: &str = "get_vnc_console";
    /// The host's uptime, as the driver reports it (a call to
    /// `compute.<host>`; request [`HostUptimeRequest`], reply
    /// [`HostUptime`]).
    pub const GET_HOST_UPTIME: &str = "get_host_uptime";
    /// The driver's free-form diagnostics of a running guest (a call to
    /// `compute.<host>`; [`super::DiagnosticsRequest`] →
    /// [`super::DiagnosticsReply`]).
    pub const GET_DIAGNOSTICS: &str = "get_diagnostics";
    /// The standard diagnostics of a running guest (Nova's 2.48 form; a
    /// call to `compute.<host>`, as [`GET_DIAGNOSTICS`]).
    pub const GET_INSTANCE_DIAGNOSTICS: &str = "get_instance_diagnostics";
    /// Events from other services for instances on the host (a cast to
    /// `compute.<host>`; [`super::ExternalEvents`]).
    pub const EXTERNAL_INSTANCE_EVENT: &str = "external_instance_event";
}

/// Error codes in [`crate::wire::RemoteError::code`] answered by the conductor.
pub mod code {
    /// The payload could not be decoded or a field is invalid.
    pub const BAD_REQUEST: &str = "BadRequest";
    /// The method is not served.
    pub const UNKNOWN_METHOD: &str = "UnknownMethod";
    /// The instance (or compute node, service) does not exist or is deleted.
    pub const NOT_FOUND: &str = "NotFound";
    /// The instance's task state is not one the caller expected (e.g. it is
    /// being deleted): the caller should stop what it is doing.
    pub const UNEXPECTED_TASK_STATE: &str = "UnexpectedTaskState";
    /// The requested state change breaks the state machine.
    pub const INVALID_TRANSITION: &str = "InvalidStateTransition";
    /// The feature is not built.
    pub const NOT_IMPLEMENTED: &str = "NotImplemented";
    /// Something failed inside the conductor (details are in its log).
    pub const INTERNAL: &str = "Internal";
    /// The conductor's database cannot be reached, or the statement lost a
    /// lock race and was rolled back: the call may be made again (a method
    /// safe to repeat after a lost answer is safe to repeat after this).
    pub const UNAVAILABLE: &str = "Unavailable";
}

/// `vm_state` values (as upstream).
pub mod vm_state {
    /// Being built.
    pub const BUILDING: &str = "building";
    /// Running (or at least existing) on a host.
    pub const ACTIVE: &str = "active";
    /// Stopped.
    pub const STOPPED: &str = "stopped";
    /// Paused.
    pub const PAUSED: &str = "paused";
    /// Suspended.
    pub const SUSPENDED: &str = "suspended";
    /// Failed; a fault says why.
    pub const ERROR: &str = "error";
    /// Deleted.
    pub const DELETED: &str = "deleted";
}

/// `task_state` values of the boot and delete flows (as upstream).
pub mod task_state {
    /// Waiting for the scheduler (set by the API).
    pub const SCHEDULING: &str = "scheduling";
    /// Preparing block devices on the host.
    pub const BLOCK_DEVICE_MAPPING: &str = "block_device_mapping";
    /// Allocating networks on the host.
    pub const NETWORKING: &str = "networking";
    /// The driver is spawning the guest.
    pub const SPAWNING: &str = "spawning";
    /// Being deleted.
    pub const DELETING: &str = "deleting";
    /// Being stopped (set by the API).
    pub const POWERING_OFF: &str = "powering-off";
    /// Being started (set by the API).
    pub const POWERING_ON: &str = "powering-on";
    /// A soft reboot was asked for (set by the API).
    pub const REBOOTING: &str = "rebooting";
    /// The compute started the soft reboot.
    pub const REBOOT_STARTED: &str = "reboot_started";
    /// A hard reboot was asked for (set by the API).
    pub const REBOOTING_HARD: &str = "rebooting_hard";
    /// The compute started the hard reboot.
    pub const REBOOT_STARTED_HARD: &str = "reboot_started_hard";
    /// Being paused (set by the API).
    pub const PAUSING: &str = "pausing";
    /// Being unpaused (set by the API).
    pub const UNPAUSING: &str = "unpausing";
    /// Being suspended (set by the API).
    pub const SUSPENDING: &str = "suspending";
    /// Being resumed (set by the API).
    pub const RESUMING: &str = "resuming";
    /// A rebuild was asked for (set by the API).
    pub const REBUILDING: &str = "rebuilding";
    /// The compute spawns the rebuilt guest.
    pub const REBUILD_SPAWNING: &str = "rebuild_spawning";
}

/// `power_state` values (as upstream's `nova.compute.power_state`).
pub mod power_state {
    /// Unknown or absent.
    pub const NOSTATE: i32 = 0;
    /// Running.
    pub const RUNNING: i32 = 1;
    /// Paused.
    pub const PAUSED: i32 = 3;
    /// Shut down.
    pub const SHUTDOWN: i32 = 4;
    /// Crashed.
    pub const CRASHED: i32 = 6;
    /// Suspended.
    pub const SUSPENDED: i32 = 7;

    /// The state's name, as Nova's `power_state.STATE_MAP` (`pending` for
    /// anything unknown).
    pub fn name(state: i32) -> &'static str {
        match state {
            RUNNING => "running",
            PAUSED => "paused",
            SHUTDOWN => "shutdown",
            CRASHED => "crashed",
            SUSPENDED => "suspended",
            _ => "pending",
        }
    }
}

/// Action and event names written into `instance_actions(_events)`.
pub mod action {
    /// The action of a boot.
    pub const CREATE: &str = "create";
    /// The action of a delete.
    pub const DELETE: &str = "delete";
    /// The whole build on the compute host.
    pub const EV_BUILD: &str = "compute__do_build_and_run_instance";
    /// Build step: block devices.
    pub const EV_BLOCK_DEVICE_MAPPING: &str = "compute_block_device_mapping";
    /// Build step: networks.
    pub const EV_NETWORKING: &str = "compute_networking";
    /// Build step: the driver spawn.
    pub const EV_SPAWN: &str = "compute_spawn";
    /// The conductor's reschedule decision.
    pub const EV_RESCHEDULE: &str = "conductor_reschedule";
    /// Terminate on the compute host.
    pub const EV_TERMINATE: &str = "compute_terminate_instance";
    /// `os-stop`.
    pub const STOP: &str = "stop";
    /// `os-start`.
    pub const START: &str = "start";
    /// `reboot`.
    pub const REBOOT: &str = "reboot";
    /// `lock`.
    pub const LOCK: &str = "lock";
    /// `unlock`.
    pub const UNLOCK: &str = "unlock";
    /// `pause`.
    pub const PAUSE: &str = "pause";
    /// `unpause`.
    pub const UNPAUSE: &str = "unpause";
    /// `suspend`.
    pub const SUSPEND: &str = "suspend";
    /// `resume`.
    pub const RESUME: &str = "resume";
    /// `rebuild`.
    pub const REBUILD: &str = "rebuild";
    /// `os-resetState` (the API writes it; no compute event).
    pub const RESET_STATE: &str = "resetState";
    /// Stop on the compute host.
    pub const EV_STOP: &str = "compute_stop_instance";
    /// Start on the compute host.
    pub const EV_START: &str = "compute_start_instance";
    /// Reboot on the compute host.
    pub const EV_REBOOT: &str = "compute_reboot_instance";
    /// Pause on the compute host.
    pub const EV_PAUSE: &str = "compute_pause_instance";
    /// Unpause on the compute host.
    pub const EV_UNPAUSE: &str = "compute_unpause_instance";
    /// Suspend on the compute host.
    pub const EV_SUSPEND: &str = "compute_suspend_instance";
    /// Resume on the compute host.
    pub const EV_RESUME: &str = "compute_resume_instance";
    /// Rebuild on the compute host.
    pub const EV_REBUILD: &str = "compute_rebuild_instance";
    /// Result of a successful event.
    pub const SUCCESS: &str = "Success";
    /// Result of a failed event.
    pub const ERROR: &str = "Error";
}

/// A string column that may be set to NULL (see the module docs).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct NullableString {
    /// `None` = NULL.
    #[prost(string, optional, tag = "1")]
    pub value: Option<String>,
}

impl NullableString {
    /// Set NULL.
    pub fn null() -> Option<Self> {
        Some(Self { value: None })
    }
    /// Set to `v`.
    pub fn set(v: impl Into<String>) -> Option<Self> {
        Some(Self {
            value: Some(v.into()),
        })
    }
}

/// An empty successful reply.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Ack {}

// ---------------------------------------------------------------- services

/// `service_register`: creates the live service row of `(host, binary)` or
/// updates its topic and version. Idempotent.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ServiceRegister {
    /// Host name.
    #[prost(string, tag = "1")]
    pub host: String,
    /// `nova-compute`, ...
    #[prost(string, tag = "2")]
    pub binary: String,
    /// Topic (`compute`).
    #[prost(string, tag = "3")]
    pub topic: String,
    /// Service version the sender speaks.
    #[prost(int64, tag = "4")]
    pub version: i64,
}

/// `service_heartbeat`: the service on `(host, binary)` is up.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Heartbeat {
    /// Host name.
    #[prost(string, tag = "1")]
    pub host: String,
    /// `nova-compute`, ...
    #[prost(string, tag = "2")]
    pub binary: String,
}

/// A service row, as answered to registration and heartbeats.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ServiceRecord {
    /// `services.id`.
    #[prost(int64, tag = "1")]
    pub id: i64,
    /// `services.uuid`.
    #[prost(string, tag = "2")]
    pub uuid: String,
    /// Disabled by an operator.
    #[prost(bool, tag = "3")]
    pub disabled: bool,
    /// Forced down by an operator.
    #[prost(bool, tag = "4")]
    pub forced_down: bool,
    /// `report_count` after this report.
    #[prost(int64, tag = "5")]
    pub report_count: i64,
}

// ----------------------------------------------------------- compute nodes

/// `compute_node_update`: creates the live compute node of
/// `(host, hypervisor_hostname)` (with `uuid` when new) or updates its
/// resources. `mapped` is never touched. Idempotent.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ComputeNodeUpdate {
    /// Proposed uuid for a new node; an existing node keeps its own (the
    /// reply says which one is in force).
    #[prost(string, tag = "1")]
    pub uuid: String,
    /// Service host.
    #[prost(string, tag = "2")]
    pub host: String,
    /// Hypervisor hostname (the node; the placement provider's name).
    #[prost(string, tag = "3")]
    pub hypervisor_hostname: String,
    /// `fake`, `QEMU`, ...
    #[prost(string, tag = "4")]
    pub hypervisor_type: String,
    /// Hypervisor version.
    #[prost(int64, tag = "5")]
    pub hypervisor_version: i64,
    /// Physical CPUs.
    #[prost(int64, tag = "6")]
    pub vcpus: i64,
    /// Memory.
    #[prost(int64, tag = "7")]
    pub memory_mb: i64,
    /// Local disk.
    #[prost(int64, tag = "8")]
    pub local_gb: i64,
    /// CPUs used by instances.
    #[prost(int64, tag = "9")]
    pub vcpus_used: i64,
    /// Memory used by instances.
    #[prost(int64, tag = "10")]
    pub memory_mb_used: i64,
    /// Disk used by instances.
    #[prost(int64, tag = "11")]
    pub local_gb_used: i64,
    /// Instances on the node.
    #[prost(int64, tag = "12")]
    pub running_vms: i64,
    /// CPU allocation ratio.
    #[prost(double, tag = "13")]
    pub cpu_allocation_ratio: f64,
    /// RAM allocation ratio.
    #[prost(double, tag = "14")]
    pub ram_allocation_ratio: f64,
    /// Disk allocation ratio.
    #[prost(double, tag = "15")]
    pub disk_allocation_ratio: f64,
    /// Host IP address (may be empty).
    #[prost(string, tag = "16")]
    pub host_ip: String,
    /// The guests the hypervisor can run, as Nova's
    /// `compute_nodes.supported_instances`: a JSON list of
    /// `[architecture, hypervisor type, vm mode]` triples (empty: unknown).
    #[prost(string, tag = "17")]
    pub supported_instances: String,
}

/// The compute node in force after an update.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ComputeNodeRecord {
    /// `compute_nodes.id`.
    #[prost(int64, tag = "1")]
    pub id: i64,
    /// `compute_nodes.uuid` (the placement resource provider's uuid).
    #[prost(string, tag = "2")]
    pub uuid: String,
    /// Whether host discovery has mapped it.
    #[prost(bool, tag = "3")]
    pub mapped: bool,
}

// --------------------------------------------------------------- instances

/// `instance_update`: sets the fields that are present. When
/// `expected_task_states` is not empty the update applies only if the
/// current task state is one of them (`""` stands for NULL), otherwise it
/// fails with [`code::UNEXPECTED_TASK_STATE`]. `events` are recorded in the
/// same transaction (one round trip per build step).
/// `update_id` makes it safe to repeat (see the field).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstanceUpdate {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// New `vm_state`.
    #[prost(string, optional, tag = "2")]
    pub vm_state: Option<String>,
    /// New `task_state` (may be NULL).
    #[prost(message, optional, tag = "3")]
    pub task_state: Option<NullableString>,
    /// Task states the sender expects (empty = no check; `""` = NULL).
    #[prost(string, repeated, tag = "4")]
    pub expected_task_states: Vec<String>,
    /// New `power_state`.
    #[prost(int32, optional, tag = "5")]
    pub power_state: Option<i32>,
    /// New `host` (may be NULL).
    #[prost(message, optional, tag = "6")]
    pub host: Option<NullableString>,
    /// New `node` (may be NULL).
    #[prost(message, optional, tag = "7")]
    pub node: Option<NullableString>,
    /// New `launched_at`, milliseconds since the Unix epoch.
    #[prost(uint64, optional, tag = "8")]
    pub launched_at_unix_ms: Option<u64>,
    /// New `launched_on` (the host that first built it).
    #[prost(string, optional, tag = "9")]
    pub launched_on: Option<String>,
    /// New `progress` (percent).
    #[prost(int64, optional, tag = "10")]
    pub progress: Option<i64>,
    /// Action events recorded with the update.
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<ActionEvent>,
    /// Idempotency key of this update (a UUID the sender picks once and
    /// sends again with every repeat of the same update; empty = none).
    /// When the instance's last applied update carried this key, the
    /// conductor answers the current row without applying anything or
    /// checking the expected task states again: the repeat of an update
    /// whose reply was lost with the broker connection succeeds once.
    #[prost(string, tag = "12")]
    pub update_id: String,
    /// The host the sender expects the instance on (`None` = no check):
    /// otherwise the update fails with [`code::UNEXPECTED_TASK_STATE`]. A
    /// compute that gives up on a build sets ERROR only while the instance
    /// is still its own, not after the conductor moved it to an alternate.
    #[prost(string, optional, tag = "13")]
    pub expected_host: Option<String>,
}

/// The most steps one [`InstanceSteps`] may carry.
pub const MAX_INSTANCE_STEPS: usize = 8;

/// `instance_update_steps`: [`InstanceUpdate`]s of one instance applied in
/// order, each checked as its own update would be (expected task state,
/// host, the state machine), stopping at the first one refused; the answer
/// is the row after the last step. A compute sends the build steps that
/// have no work between them (block_device_mapping, networking, spawning)
/// this way: one round trip instead of three. Steps that follow one
/// another (each expects the task state the one before set, and carries an
/// `update_id`) are committed together as one change with every step's
/// events: the states between them are never committed, since nothing
/// happens between them. Otherwise, or when that change is refused, each
/// step is committed on its own.
///
/// Safe to repeat when every step carries its own `update_id`: the
/// conductor remembers the last applied key, so a repeat of a batch whose
/// first k steps were applied (the reply lost) finds step k's key on the
/// row, skips steps 1..=k and applies the rest.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstanceSteps {
    /// The updates, in order (1..=[`MAX_INSTANCE_STEPS`], one instance).
    #[prost(message, repeated, tag = "1")]
    pub steps: Vec<InstanceUpdate>,
}

/// An instance as the conductor sees it after a change.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct InstanceRecord {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// `vm_state`.
    #[prost(string, tag = "2")]
    pub vm_state: String,
    /// `task_state` (`None` = NULL).
    #[prost(string, optional, tag = "3")]
    pub task_state: Option<String>,
    /// `power_state`.
    #[prost(int32, tag = "4")]
    pub power_state: i32,
    /// `host`.
    #[prost(string, optional, tag = "5")]
    pub host: Option<String>,
    /// `node`.
    #[prost(string, optional, tag = "6")]
    pub node: Option<String>,
    /// Soft-deleted.
    #[prost(bool, tag = "7")]
    pub deleted: bool,
}

/// Whether an [`ActionEvent`] starts or finishes an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum EventPhase {
    /// Unset (treated as `Start`).
    Unspecified = 0,
    /// The event starts now.
    Start = 1,
    /// The event finishes now (with a result).
    Finish = 2,
}

/// `instance_action_event_start` / `_finish`, or one of
/// [`InstanceUpdate::events`]. The action is found by
/// `(instance_uuid, request_id)` and created (named `action`) if missing.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ActionEvent {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// The action's name if it must be created (`create`, `delete`).
    #[prost(string, tag = "2")]
    pub action: String,
    /// The event's name (`compute__do_build_and_run_instance`, ...).
    #[prost(string, tag = "3")]
    pub event: String,
    /// The host the event happens on.
    #[prost(string, tag = "4")]
    pub host: String,
    /// Request id of the action (the API request that started it).
    #[prost(string, tag = "5")]
    pub request_id: String,
    /// Global request id.
    #[prost(string, tag = "6")]
    pub global_request_id: String,
    /// Start or finish (see [`EventPhase`]).
    #[prost(enumeration = "EventPhase", tag = "7")]
    pub phase: i32,
    /// On finish: `Success` or `Error`.
    #[prost(string, tag = "8")]
    pub result: String,
    /// On a failed finish: the error chain.
    #[prost(string, tag = "9")]
    pub traceback: String,
    /// When, milliseconds since the Unix epoch (0 = the conductor's now).
    #[prost(uint64, tag = "10")]
    pub at_unix_ms: u64,
    /// On a failed finish: the one-line error shown to admins as the
    /// event's `details` (compute API 2.84).
    #[prost(string, tag = "11")]
    pub details: String,
}

/// `instance_fault_create`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct InstanceFault {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// HTTP-like code (500 for failures on a host).
    #[prost(int64, tag = "2")]
    pub code: i64,
    /// Short message (truncated to 255 characters).
    #[prost(string, tag = "3")]
    pub message: String,
    /// Details (error chain).
    #[prost(string, tag = "4")]
    pub details: String,
    /// The host the fault happened on.
    #[prost(string, tag = "5")]
    pub host: String,
}

/// `instance_destroyed`: the compute destroyed the guest; the conductor
/// marks the instance deleted and removes its allocations.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct InstanceDestroyed {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// The host that destroyed it.
    #[prost(string, tag = "2")]
    pub host: String,
    /// Request id of the delete action.
    #[prost(string, tag = "3")]
    pub request_id: String,
}

/// `instance_get_all_by_host`: the live instances whose `host` is `host`,
/// and every instance among `uuids` (the guests the hypervisor reports),
/// deleted or on another host included. Nova's `_init_instance` list and
/// its look-up of the driver's guests, in one call.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct InstanceListByHost {
    /// The host.
    #[prost(string, tag = "1")]
    pub host: String,
    /// Instances to answer wherever they are (at most
    /// [`MAX_LISTED_UUIDS`]).
    #[prost(string, repeated, tag = "2")]
    pub uuids: Vec<String>,
}

/// The most uuids one [`InstanceListByHost`] may name.
pub const MAX_LISTED_UUIDS: usize = 10_000;

/// Instances (the answer to [`InstanceListByHost`]).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct InstanceList {
    /// The instances, each once.
    #[prost(message, repeated, tag = "1")]
    pub instances: Vec<InstanceRecord>,
}

// -------------------------------------------------------------- build flow

/// The resources of a flavor (what the placement claim holds).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct FlavorResources {
    /// Flavor name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// VCPU.
    #[prost(int64, tag = "2")]
    pub vcpus: i64,
    /// MEMORY_MB.
    #[prost(int64, tag = "3")]
    pub memory_mb: i64,
    /// Root disk (DISK_GB, with ephemeral and swap).
    #[prost(int64, tag = "4")]
    pub root_gb: i64,
    /// Ephemeral disk.
    #[prost(int64, tag = "5")]
    pub ephemeral_gb: i64,
    /// Swap, MB.
    #[prost(int64, tag = "6")]
    pub swap_mb: i64,
}

impl FlavorResources {
    /// DISK_GB claimed for this flavor (root + ephemeral + swap rounded up).
    pub fn disk_gb(&self) -> i64 {
        self.root_gb + self.ephemeral_gb + (self.swap_mb + 1023) / 1024
    }
}

/// A host the scheduler kept as an alternate (same cell as the chosen one).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Alternate {
    /// Service host.
    #[prost(string, tag = "1")]
    pub host: String,
    /// Node (hypervisor hostname).
    #[prost(string, tag = "2")]
    pub node: String,
    /// Placement resource provider (= compute node uuid).
    #[prost(string, tag = "3")]
    pub provider_uuid: String,
}

/// `build_and_run_instance` (cast to `compute.<host>`). The instance row
/// exists in the cell database with `vm_state building`, `task_state
/// scheduling`, and the claim is held in placement on this host's provider.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct BuildAndRunInstance {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// Request id of the `create` action (the API request).
    #[prost(string, tag = "2")]
    pub request_id: String,
    /// Global request id.
    #[prost(string, tag = "3")]
    pub global_request_id: String,
    /// Flavor resources.
    #[prost(message, optional, tag = "4")]
    pub flavor: Option<FlavorResources>,
    /// Image reference.
    #[prost(string, tag = "5")]
    pub image_ref: String,
    /// Node to build on (hypervisor hostname; empty = the host's only node).
    #[prost(string, tag = "6")]
    pub node: String,
    /// Alternates left, in the scheduler's order of preference.
    #[prost(message, repeated, tag = "7")]
    pub alternates: Vec<Alternate>,
    /// Project of the instance (for placement consumers).
    #[prost(string, tag = "8")]
    pub project_id: String,
    /// User of the instance.
    #[prost(string, tag = "9")]
    pub user_id: String,
    /// 1 for the first host, +1 per reschedule.
    #[prost(uint32, tag = "10")]
    pub attempt: u32,
    /// What the guest is told of itself (config drive).
    #[prost(message, optional, tag = "11")]
    pub guest: Option<GuestData>,
}

/// `terminate_instance` (cast to `compute.<host>`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TerminateInstance {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// Request id of the `delete` action.
    #[prost(string, tag = "2")]
    pub request_id: String,
    /// Global request id.
    #[prost(string, tag = "3")]
    pub global_request_id: String,
}

/// `stop_instance`, `start_instance`, `reboot_instance`, `pause_instance`,
/// `unpause_instance`, `suspend_instance`, `resume_instance`,
/// `rebuild_instance` (cast to `compute.<host>`). The API has set the
/// action's task state (`powering-off`, …) and recorded the action (named
/// as upstream: `stop`, `start`, …) under `request_id`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct InstanceActionRequest {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// Request id of the action.
    #[prost(string, tag = "2")]
    pub request_id: String,
    /// Global request id.
    #[prost(string, tag = "3")]
    pub global_request_id: String,
    /// `reboot_instance`: `SOFT` or `HARD`.
    #[prost(string, tag = "4")]
    pub reboot_type: String,
    /// `rebuild_instance`: the image to rebuild from.
    #[prost(string, tag = "5")]
    pub image_ref: String,
    /// `rebuild_instance`: the vm_state before the rebuild (a stopped
    /// instance is stopped again after it, as upstream).
    #[prost(string, tag = "6")]
    pub original_vm_state: String,
}

/// `reschedule_instance`: the build failed on `failed_host`. The conductor
/// tries the alternates in order (moving the placement claim) and casts the
/// build to the first that takes it, or sets ERROR with a fault.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Reschedule {
    /// The failed build, with the alternates that are left.
    #[prost(message, optional, tag = "1")]
    pub build: Option<BuildAndRunInstance>,
    /// The host the build failed on.
    #[prost(string, tag = "2")]
    pub failed_host: String,
    /// The node the build failed on.
    #[prost(string, tag = "3")]
    pub failed_node: String,
    /// The error, one line.
    #[prost(string, tag = "4")]
    pub error: String,
    /// The error chain.
    #[prost(string, tag = "5")]
    pub traceback: String,
}

/// What the conductor decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RescheduleOutcome {
    /// Unset.
    Unspecified = 0,
    /// Cast to an alternate host.
    Rescheduled = 1,
    /// No alternate took it: the instance is in ERROR with a fault.
    Failed = 2,
}

/// The reply to [`Reschedule`].
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RescheduleResult {
    /// See [`RescheduleOutcome`].
    #[prost(enumeration = "RescheduleOutcome", tag = "1")]
    pub outcome: i32,
    /// The new host when rescheduled.
    #[prost(string, tag = "2")]
    pub host: String,
}

// ------------------------------------------------------------------ helpers

/// Why a typed call failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The bus failed, or the remote side answered an error
    /// ([`BusError::Remote`] carries its code).
    #[error("call failed")]
    Bus(#[from] BusError),
    /// The reply could not be decoded.
    #[error("could not decode the reply")]
    Decode(#[source] prost::DecodeError),
}

impl RpcError {
    /// The remote error code, when the remote side answered an error.
    pub fn remote_code(&self) -> Option<&str> {
        match self {
            RpcError::Bus(BusError::Remote { code, .. }) => Some(code),
            _ => None,
        }
    }
}

/// Request ids carried by every envelope of one flow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestIds {
    /// Request id (`req-<uuid>`).
    pub request_id: String,
    /// Global request id.
    pub global_request_id: String,
}

/// Calls `method` on `queue` with `req`, decoding the reply as `Resp`.
pub async fn call<Req: Message, Resp: Message + Default>(
    bus: &dyn Transport,
    queue: &str,
    method: &str,
    req: &Req,
    ids: &RequestIds,
    timeout: Duration,
) -> Result<Resp, RpcError> {
    let env = Envelope::new(method)
        .with_request_ids(&ids.request_id, &ids.global_request_id)
        .with_message(req);
    let reply = bus.call(queue, env, timeout).await?;
    reply.decode_message().map_err(RpcError::Decode)
}

/// Casts `method` with `msg` to `queue`; a copy still queued after `ttl`
/// is dropped (never delivered).
pub async fn cast<Req: Message>(
    bus: &dyn Transport,
    queue: &str,
    method: &str,
    msg: &Req,
    ids: &RequestIds,
    ttl: Duration,
) -> Result<(), BusError> {
    let env = Envelope::new(method)
        .with_request_ids(&ids.request_id, &ids.global_request_id)
        .with_message(msg)
        .with_timeout(ttl);
    bus.cast(queue, env).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_distinguishes_absent_null_and_value() {
        let mut u = InstanceUpdate {
            instance_uuid: "u".into(),
            ..Default::default()
        };
        let back = InstanceUpdate::decode(u.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.task_state, None);
        u.task_state = NullableString::null();
        let back = InstanceUpdate::decode(u.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.task_state, Some(NullableString { value: None }));
        u.task_state = NullableString::set("spawning");
        let back = InstanceUpdate::decode(u.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.task_state.unwrap().value.as_deref(), Some("spawning"));
    }

    #[test]
    fn disk_includes_ephemeral_and_swap() {
        let f = FlavorResources {
            root_gb: 10,
            ephemeral_gb: 5,
            swap_mb: 512,
            ..Default::default()
        };
        assert_eq!(f.disk_gb(), 16);
    }
}
