//! Validated domain types, converted from the wire messages once, on
//! receipt (`TryFrom`), and the task-state machine of the boot and delete
//! flows.

use chrono::{DateTime, Utc};
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, action, task_state as ts, vm_state as vs, EventPhase};

use crate::error::ConductorError;

fn bad(msg: impl Into<String>) -> ConductorError {
    ConductorError::BadRequest(msg.into())
}

/// Parses an instance uuid field.
pub fn instance_uuid(s: &str) -> Result<InstanceUuid, ConductorError> {
    s.parse()
        .map_err(|e: fabric::ids::InvalidId| bad(e.to_string()))
}

fn time(ms: u64) -> DateTime<Utc> {
    if ms == 0 {
        return Utc::now();
    }
    DateTime::from_timestamp_millis(ms as i64).unwrap_or_else(Utc::now)
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

const VM_STATES: [&str; 7] = [
    vs::BUILDING,
    vs::ACTIVE,
    vs::STOPPED,
    vs::PAUSED,
    vs::SUSPENDED,
    vs::ERROR,
    vs::DELETED,
];
const TASK_STATES: [&str; 17] = [
    ts::SCHEDULING,
    ts::BLOCK_DEVICE_MAPPING,
    ts::NETWORKING,
    ts::SPAWNING,
    ts::DELETING,
    ts::POWERING_OFF,
    ts::POWERING_ON,
    ts::REBOOTING,
    ts::REBOOT_STARTED,
    ts::REBOOTING_HARD,
    ts::REBOOT_STARTED_HARD,
    ts::PAUSING,
    ts::UNPAUSING,
    ts::SUSPENDING,
    ts::RESUMING,
    ts::REBUILDING,
    ts::REBUILD_SPAWNING,
];

fn task_state(s: &str) -> Result<&'static str, ConductorError> {
    TASK_STATES
        .into_iter()
        .find(|t| *t == s)
        .ok_or_else(|| bad(format!("unknown task state {s:?}")))
}

/// Whether the task state may go from `from` to `to` (`None` = NULL).
///
/// The build walks `scheduling | NULL → block_device_mapping → networking →
/// spawning → NULL`; a reschedule goes back to `scheduling` from any build
/// step; anything may become `deleting`, and once `deleting` only a delete
/// may finish it (the instance is marked deleted, not updated). Setting the
/// current value again is allowed (redelivered messages).
///
/// Server actions: the API sets the action's task state (`powering-off`,
/// `rebooting`, …) in the database itself; the compute may then move a
/// reboot to `reboot_started(_hard)` and a rebuild to `rebuild_spawning`,
/// and finishes every action with NULL. The conductor never starts an
/// action's task state on behalf of a compute.
pub fn transition_allowed(from: Option<&str>, to: Option<&str>) -> bool {
    if from == to {
        return true;
    }
    match (from, to) {
        (_, Some(ts::DELETING)) => true,
        (Some(ts::DELETING), _) => false,
        (Some(ts::REBOOTING), Some(ts::REBOOT_STARTED)) => true,
        (Some(ts::REBOOTING_HARD), Some(ts::REBOOT_STARTED_HARD)) => true,
        (Some(ts::REBUILDING), Some(ts::REBUILD_SPAWNING)) => true,
        (None | Some(ts::SCHEDULING), Some(ts::BLOCK_DEVICE_MAPPING)) => true,
        (Some(ts::BLOCK_DEVICE_MAPPING), Some(ts::NETWORKING)) => true,
        (Some(ts::NETWORKING), Some(ts::SPAWNING)) => true,
        (
            None | Some(ts::BLOCK_DEVICE_MAPPING | ts::NETWORKING | ts::SPAWNING),
            Some(ts::SCHEDULING),
        ) => true,
        (_, None) => true,
        _ => false,
    }
}

/// A validated request about one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Targeted<T> {
    /// The instance.
    pub instance: InstanceUuid,
    /// What to do to it.
    pub value: T,
}

/// Start or finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The event starts.
    Start,
    /// The event finishes.
    Finish,
}

/// An instance action event to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The instance.
    pub instance: InstanceUuid,
    /// Action name used if the action must be created.
    pub action: String,
    /// Event name.
    pub event: String,
    /// Host.
    pub host: Option<String>,
    /// Request id of the action.
    pub request_id: String,
    /// Global request id.
    pub global_request_id: Option<String>,
    /// Start or finish.
    pub phase: Phase,
    /// `Success` / `Error` on finish.
    pub result: Option<String>,
    /// Error chain on a failed finish.
    pub traceback: Option<String>,
    /// One-line error on a failed finish (`details`).
    pub details: Option<String>,
    /// When.
    pub at: DateTime<Utc>,
}

impl TryFrom<rpc::ActionEvent> for Event {
    type Error = ConductorError;
    fn try_from(e: rpc::ActionEvent) -> Result<Self, ConductorError> {
        let instance = instance_uuid(&e.instance_uuid)?;
        if e.event.is_empty() {
            return Err(bad("action event without a name"));
        }
        if e.request_id.is_empty() {
            return Err(bad("action event without a request id"));
        }
        let phase = match EventPhase::try_from(e.phase).unwrap_or(EventPhase::Unspecified) {
            EventPhase::Finish => Phase::Finish,
            EventPhase::Start | EventPhase::Unspecified => Phase::Start,
        };
        let result = non_empty(e.result);
        if phase == Phase::Finish && result.is_none() {
            return Err(bad("finished action event without a result"));
        }
        Ok(Event {
            instance,
            action: non_empty(e.action).unwrap_or_else(|| action::CREATE.to_owned()),
            event: e.event,
            host: non_empty(e.host),
            request_id: e.request_id,
            global_request_id: non_empty(e.global_request_id),
            phase,
            result,
            traceback: non_empty(e.traceback),
            details: non_empty(e.details),
            at: time(e.at_unix_ms),
        })
    }
}

/// A validated instance update (`Some(None)` = set NULL).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceChange {
    /// New vm_state.
    pub vm_state: Option<String>,
    /// New task_state.
    pub task_state: Option<Option<String>>,
    /// Expected current task states (`None` entries = NULL); empty = no check.
    pub expected: Vec<Option<String>>,
    /// Expected current host; `None` = no check.
    pub expected_host: Option<String>,
    /// New power_state.
    pub power_state: Option<i64>,
    /// New host.
    pub host: Option<Option<String>>,
    /// New node.
    pub node: Option<Option<String>>,
    /// New launched_at.
    pub launched_at: Option<DateTime<Utc>>,
    /// New launched_on.
    pub launched_on: Option<String>,
    /// New progress.
    pub progress: Option<i64>,
    /// Events recorded in the same transaction.
    pub events: Vec<Event>,
    /// Idempotency key: a repeat of the last applied update is answered
    /// with the current row (see [`rpc::InstanceUpdate::update_id`]).
    pub update_id: Option<String>,
    /// The task state the row's current one must be allowed to go to, when
    /// not [`task_state`](Self::task_state): the first step's of steps
    /// folded into this change (see [`fold_steps`], which checked the
    /// transitions between the steps).
    pub first_task_state: Option<Option<String>>,
}

impl InstanceChange {
    /// The task state the transition from the row's current one is checked
    /// against (`None`: the change leaves the task state alone).
    pub fn transition_to(&self) -> Option<&Option<String>> {
        self.first_task_state.as_ref().or(self.task_state.as_ref())
    }

    /// Whether the change may move the task state from `from`: as
    /// [`transition_allowed`], and also, from `deleting`, the end of a
    /// delete that failed on its host (vm_state ERROR, no task, asked only
    /// from `deleting`), so the server is not held in `deleting`.
    pub fn allowed_from(&self, from: Option<&str>) -> bool {
        match self.transition_to() {
            None => true,
            Some(to) => {
                transition_allowed(from, to.as_deref())
                    || (from == Some(ts::DELETING)
                        && to.is_none()
                        && self.vm_state.as_deref() == Some(vs::ERROR)
                        && self.expected == [Some(ts::DELETING.to_owned())])
            }
        }
    }
}

/// Steps of one instance (a batch from its compute, in order) as one change
/// leading to the same row: the first step's expectations, each field as
/// the last step setting it left it, every step's events in order, the last
/// step's key. `None` when the batch is not of that shape: fewer than two
/// steps, a step without a key or a task state, a later step not expecting
/// the task state the step before set or not allowed to follow it, or
/// expecting a host no earlier step named. Applied at once, the steps are
/// checked as the separate updates would have been in turn, with no other
/// change between them; only the states between the steps are never
/// committed (no work lies between such steps; their events still record
/// each).
pub fn fold_steps(steps: &[InstanceChange]) -> Option<InstanceChange> {
    let (first, rest) = steps.split_first()?;
    if rest.is_empty() {
        return None;
    }
    first.update_id.as_ref()?;
    let first_state = first.task_state.clone()?;
    let mut out = first.clone();
    for s in rest {
        s.update_id.as_ref()?;
        let to = s.task_state.as_ref()?;
        let state = out.task_state.clone().flatten();
        if !s.expected.contains(&state) || !transition_allowed(state.as_deref(), to.as_deref()) {
            return None;
        }
        if let Some(want) = &s.expected_host {
            let host = out.host.clone().or(first.expected_host.clone().map(Some));
            if host != Some(Some(want.clone())) {
                return None;
            }
        }
        macro_rules! later {
            ($($f:ident),*) => {$( if s.$f.is_some() { out.$f = s.$f.clone(); } )*};
        }
        later!(
            task_state,
            vm_state,
            power_state,
            host,
            node,
            launched_at,
            launched_on,
            progress
        );
        out.events.extend(s.events.iter().cloned());
        out.update_id = s.update_id.clone();
    }
    out.first_task_state = Some(first_state);
    Some(out)
}

/// Longest accepted `update_id` (the column is `VARCHAR(36)`: a UUID).
pub const UPDATE_ID_MAX: usize = 36;

impl TryFrom<rpc::InstanceUpdate> for Targeted<InstanceChange> {
    type Error = ConductorError;
    fn try_from(u: rpc::InstanceUpdate) -> Result<Self, ConductorError> {
        let instance = instance_uuid(&u.instance_uuid)?;
        if let Some(v) = &u.vm_state {
            if !VM_STATES.contains(&v.as_str()) || v == vs::DELETED {
                return Err(bad(format!("vm_state {v:?} cannot be set by an update")));
            }
        }
        let task = match u.task_state {
            None => None,
            Some(rpc::NullableString { value: None }) => Some(None),
            Some(rpc::NullableString { value: Some(v) }) => Some(Some(task_state(&v)?.to_owned())),
        };
        let expected = u
            .expected_task_states
            .iter()
            .map(|s| {
                if s.is_empty() {
                    Ok(None)
                } else {
                    task_state(s).map(|t| Some(t.to_owned()))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let events = u
            .events
            .into_iter()
            .map(Event::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        if events.iter().any(|e| e.instance != instance) {
            return Err(bad("an event of the update names another instance"));
        }
        if u.update_id.len() > UPDATE_ID_MAX {
            return Err(bad(format!(
                "update_id longer than {UPDATE_ID_MAX} characters"
            )));
        }
        Ok(Targeted {
            instance,
            value: InstanceChange {
                vm_state: u.vm_state,
                task_state: task,
                expected,
                expected_host: u.expected_host,
                power_state: u.power_state.map(i64::from),
                host: u.host.map(|h| h.value),
                node: u.node.map(|n| n.value),
                launched_at: u.launched_at_unix_ms.map(time),
                launched_on: u.launched_on,
                progress: u.progress,
                events,
                update_id: non_empty(u.update_id),
                first_task_state: None,
            },
        })
    }
}

/// A fault to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// Code (500 for host failures).
    pub code: i64,
    /// Message (≤ 255 characters).
    pub message: String,
    /// Details.
    pub details: Option<String>,
    /// Host.
    pub host: Option<String>,
}

impl TryFrom<rpc::InstanceFault> for Targeted<Fault> {
    type Error = ConductorError;
    fn try_from(f: rpc::InstanceFault) -> Result<Self, ConductorError> {
        Ok(Targeted {
            instance: instance_uuid(&f.instance_uuid)?,
            value: Fault {
                code: if f.code == 0 { 500 } else { f.code },
                message: crate::db::truncate(&f.message, 255),
                details: non_empty(f.details),
                host: non_empty(f.host),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(from: &str, to: &str, key: Option<&str>) -> InstanceChange {
        InstanceChange {
            task_state: Some(Some(to.into())),
            expected: vec![Some(from.into())],
            update_id: key.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn steps_that_follow_one_another_fold_into_one_change() {
        let mut bdm = step(ts::SCHEDULING, ts::BLOCK_DEVICE_MAPPING, Some("k1"));
        bdm.vm_state = Some("building".into());
        bdm.host = Some(Some("h1".into()));
        let net = step(ts::BLOCK_DEVICE_MAPPING, ts::NETWORKING, Some("k2"));
        let mut spawn = step(ts::NETWORKING, ts::SPAWNING, Some("k3"));
        spawn.expected_host = Some("h1".into());
        spawn.progress = Some(5);
        let f = fold_steps(&[bdm.clone(), net.clone(), spawn.clone()]).expect("folds");
        assert_eq!(f.expected, bdm.expected);
        assert_eq!(f.expected_host, None);
        assert_eq!(f.task_state, Some(Some(ts::SPAWNING.into())));
        assert_eq!(
            f.transition_to(),
            Some(&Some(ts::BLOCK_DEVICE_MAPPING.into()))
        );
        assert_eq!(f.vm_state.as_deref(), Some("building"));
        assert_eq!(f.host, Some(Some("h1".into())));
        assert_eq!(f.progress, Some(5));
        assert_eq!(f.update_id.as_deref(), Some("k3"));

        // One step, a gap, a step without a key, an unknown host: no fold.
        assert_eq!(fold_steps(&[bdm.clone()]), None);
        assert_eq!(fold_steps(&[bdm.clone(), spawn.clone()]), None);
        let keyless = step(ts::BLOCK_DEVICE_MAPPING, ts::NETWORKING, None);
        assert_eq!(fold_steps(&[bdm.clone(), keyless]), None);
        let mut elsewhere = net.clone();
        elsewhere.expected_host = Some("h2".into());
        assert_eq!(fold_steps(&[bdm.clone(), elsewhere]), None);
        // A step the state machine does not allow after the one before.
        let back = step(ts::BLOCK_DEVICE_MAPPING, ts::REBUILDING, Some("k2"));
        assert_eq!(fold_steps(&[bdm, back]), None);
    }

    #[test]
    fn build_walk_is_allowed_and_shortcuts_are_not() {
        let walk = [
            Some(ts::SCHEDULING),
            Some(ts::BLOCK_DEVICE_MAPPING),
            Some(ts::NETWORKING),
            Some(ts::SPAWNING),
            None,
        ];
        for w in walk.windows(2) {
            assert!(transition_allowed(w[0], w[1]), "{w:?}");
        }
        assert!(!transition_allowed(
            Some(ts::SCHEDULING),
            Some(ts::SPAWNING)
        ));
        assert!(!transition_allowed(Some(ts::DELETING), Some(ts::SPAWNING)));
        assert!(!transition_allowed(Some(ts::DELETING), None));
        assert!(transition_allowed(Some(ts::SPAWNING), Some(ts::SCHEDULING)));
        assert!(transition_allowed(Some(ts::SPAWNING), Some(ts::DELETING)));
    }

    #[test]
    fn only_a_failed_delete_leaves_deleting() {
        let failed = InstanceChange {
            vm_state: Some(vs::ERROR.to_owned()),
            task_state: Some(None),
            expected: vec![Some(ts::DELETING.to_owned())],
            ..Default::default()
        };
        assert!(failed.allowed_from(Some(ts::DELETING)));
        // Not without ERROR, nor when other task states are expected too.
        let mut quiet = failed.clone();
        quiet.vm_state = Some(vs::ACTIVE.to_owned());
        assert!(!quiet.allowed_from(Some(ts::DELETING)));
        let mut loose = failed.clone();
        loose.expected.push(None);
        assert!(!loose.allowed_from(Some(ts::DELETING)));
        let mut onward = failed;
        onward.task_state = Some(Some(ts::SPAWNING.to_owned()));
        assert!(!onward.allowed_from(Some(ts::DELETING)));
    }

    #[test]
    fn action_walks_are_allowed_and_cannot_be_started_by_a_compute() {
        for (a, b) in [
            (ts::REBOOTING, ts::REBOOT_STARTED),
            (ts::REBOOTING_HARD, ts::REBOOT_STARTED_HARD),
            (ts::REBUILDING, ts::REBUILD_SPAWNING),
        ] {
            assert!(transition_allowed(Some(a), Some(b)));
            assert!(transition_allowed(Some(b), None));
            assert!(!transition_allowed(Some(b), Some(a)));
        }
        for t in [ts::POWERING_OFF, ts::PAUSING, ts::REBUILDING, ts::REBOOTING] {
            assert!(transition_allowed(Some(t), None));
            assert!(!transition_allowed(None, Some(t)), "{t}");
        }
        assert!(!transition_allowed(
            Some(ts::DELETING),
            Some(ts::REBOOT_STARTED)
        ));
        assert!(!transition_allowed(
            Some(ts::PAUSING),
            Some(ts::REBUILD_SPAWNING)
        ));
    }
}
