//! The server actions on a host (stop, start, reboot, pause, unpause,
//! suspend, resume, rebuild): which driver operation each runs and which
//! task and vm states it moves through ([`ActionPlan`]), and the run of
//! one action ([`Host::run_action`]); see [`crate::agent`]'s docs.

use fabric::ids::InstanceUuid;
use fabric::rpc::{
    self, action, method, task_state as ts, vm_state as vs, EventPhase, InstanceUpdate,
    NullableString, RequestIds,
};
use fabric::wire::now_unix_ms;
use tracing::{error, info, instrument, warn};

use crate::agent::{event, superseded, Host};
use fabric::bus::Delivery;
use fabric::rpc::code;

use crate::driver::{DriverError, GuestOp};
use crate::error::chain;
use crate::metrics;

/// How the agent runs one server action.
pub(crate) struct ActionPlan {
    /// The action's name (`stop`, …).
    action: &'static str,
    /// The compute event (`compute_stop_instance`, …).
    event: &'static str,
    /// The task state the API set.
    task: &'static str,
    /// The task state the compute moves to before the driver call, if any.
    started: Option<&'static str>,
    /// The driver operation.
    op: GuestOp,
    /// vm_state on success.
    done: &'static str,
    /// Whether a failure sets ERROR (reboot and rebuild, as upstream).
    error_on_failure: bool,
    /// Power the guest off after the operation (rebuild of a stopped server).
    then_power_off: bool,
}

impl ActionPlan {
    pub(crate) fn of(method_name: &str, r: &rpc::InstanceActionRequest) -> Option<ActionPlan> {
        let simple = |action, event, task, op, done| ActionPlan {
            action,
            event,
            task,
            started: None,
            op,
            done,
            error_on_failure: false,
            then_power_off: false,
        };
        Some(match method_name {
            method::STOP_INSTANCE => simple(
                action::STOP,
                action::EV_STOP,
                ts::POWERING_OFF,
                GuestOp::PowerOff,
                vs::STOPPED,
            ),
            method::START_INSTANCE => simple(
                action::START,
                action::EV_START,
                ts::POWERING_ON,
                GuestOp::PowerOn,
                vs::ACTIVE,
            ),
            method::PAUSE_INSTANCE => simple(
                action::PAUSE,
                action::EV_PAUSE,
                ts::PAUSING,
                GuestOp::Pause,
                vs::PAUSED,
            ),
            method::UNPAUSE_INSTANCE => simple(
                action::UNPAUSE,
                action::EV_UNPAUSE,
                ts::UNPAUSING,
                GuestOp::Unpause,
                vs::ACTIVE,
            ),
            method::SUSPEND_INSTANCE => simple(
                action::SUSPEND,
                action::EV_SUSPEND,
                ts::SUSPENDING,
                GuestOp::Suspend,
                vs::SUSPENDED,
            ),
            method::RESUME_INSTANCE => simple(
                action::RESUME,
                action::EV_RESUME,
                ts::RESUMING,
                GuestOp::Resume,
                vs::ACTIVE,
            ),
            method::REBOOT_INSTANCE => {
                let hard = r.reboot_type.eq_ignore_ascii_case("HARD");
                ActionPlan {
                    action: action::REBOOT,
                    event: action::EV_REBOOT,
                    task: if hard {
                        ts::REBOOTING_HARD
                    } else {
                        ts::REBOOTING
                    },
                    started: Some(if hard {
                        ts::REBOOT_STARTED_HARD
                    } else {
                        ts::REBOOT_STARTED
                    }),
                    op: GuestOp::Reboot { hard },
                    done: vs::ACTIVE,
                    error_on_failure: true,
                    then_power_off: false,
                }
            }
            method::REBUILD_INSTANCE => {
                let stopped = r.original_vm_state == vs::STOPPED;
                ActionPlan {
                    action: action::REBUILD,
                    event: action::EV_REBUILD,
                    task: ts::REBUILDING,
                    started: Some(ts::REBUILD_SPAWNING),
                    op: GuestOp::Rebuild {
                        image_ref: r.image_ref.clone(),
                    },
                    done: if stopped { vs::STOPPED } else { vs::ACTIVE },
                    error_on_failure: true,
                    then_power_off: stopped,
                }
            }
            _ => return None,
        })
    }
}

/// The most of a console log a call returns (Nova's `MAX_CONSOLE_BYTES`).
pub const MAX_CONSOLE_BYTES: usize = 100 * 1024;

/// The last `lines` lines of `text` (all of it for 0).
pub fn tail_lines(text: &str, lines: u32) -> &str {
    if lines == 0 {
        return text;
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(lines as usize - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

/// A driver's failure as the reply of a console call: `NotFound` (no such
/// guest here), `NotImplemented` (the driver has no such console),
/// `InvalidStateTransition` (the guest is not running), else `Internal`.
pub(crate) fn console_error(
    env: &fabric::wire::Envelope,
    e: DriverError,
) -> fabric::wire::Envelope {
    let c = match e {
        DriverError::NotFound(_) => code::NOT_FOUND,
        DriverError::Unavailable(_) => code::NOT_IMPLEMENTED,
        DriverError::NotRunning(_) => code::INVALID_TRANSITION,
        _ => code::INTERNAL,
    };
    env.error_reply(c, e.to_string())
}

impl Host {
    /// `get_serial_console` (`vnc`: `get_vnc_console`): a call; answers
    /// where the console listens.
    pub(crate) async fn console_addr(&self, d: Delivery, vnc: bool) {
        let env = d.envelope().clone();
        let reply = match env.decode_message::<rpc::SerialConsoleRequest>() {
            Err(e) => env.error_reply(code::BAD_REQUEST, format!("undecodable request: {e}")),
            Ok(r) => match r.instance_uuid.parse::<InstanceUuid>() {
                Err(_) => env.error_reply(code::BAD_REQUEST, "not an instance uuid"),
                Ok(uuid) => match if vnc {
                    self.driver.vnc_console(uuid).await
                } else {
                    self.driver.serial_console(uuid).await
                } {
                    Ok(addr) => env.reply(prost::Message::encode_to_vec(&rpc::SerialConsole {
                        host: addr.ip().to_string(),
                        port: u32::from(addr.port()),
                    })),
                    Err(e) => console_error(&env, e),
                },
            },
        };
        if let Err(e) = d.reply(reply).await {
            warn!(error = %chain(&e), vnc, "could not answer a console call");
        }
    }

    /// `get_console_output`: a call; answers the log's tail, or an error
    /// whose code says why (`NotFound`: no such guest here;
    /// `NotImplemented`: the driver keeps no console log).
    pub(crate) async fn console_output(&self, d: Delivery) {
        let env = d.envelope().clone();
        let reply = match env.decode_message::<rpc::ConsoleOutputRequest>() {
            Err(e) => env.error_reply(code::BAD_REQUEST, format!("undecodable request: {e}")),
            Ok(r) => match r.instance_uuid.parse::<InstanceUuid>() {
                Err(_) => env.error_reply(code::BAD_REQUEST, "not an instance uuid"),
                Ok(uuid) => match self.driver.console_output(uuid, MAX_CONSOLE_BYTES).await {
                    Ok(bytes) => {
                        let text = String::from_utf8_lossy(&bytes);
                        let msg = rpc::ConsoleOutput {
                            output: tail_lines(&text, r.tail_lines).to_owned(),
                        };
                        env.reply(prost::Message::encode_to_vec(&msg))
                    }
                    Err(e) => console_error(&env, e),
                },
            },
        };
        if let Err(e) = d.reply(reply).await {
            warn!(error = %chain(&e), "could not answer get_console_output");
        }
    }

    /// `get_host_uptime`: a call; answers what the driver reports
    /// (`NotImplemented` when it reports none, as Nova's fake driver).
    pub(crate) async fn host_uptime(&self, d: Delivery) {
        let env = d.envelope().clone();
        let reply = match self.driver.host_uptime().await {
            Ok(uptime) => env.reply(prost::Message::encode_to_vec(&rpc::HostUptime { uptime })),
            Err(e) => console_error(&env, e),
        };
        if let Err(e) = d.reply(reply).await {
            warn!(error = %chain(&e), "could not answer get_host_uptime");
        }
    }

    /// One server action (see the module docs).
    #[instrument(skip_all, fields(instance = %r.instance_uuid, action = plan.action,
        request_id = %r.request_id, global_request_id = %r.global_request_id))]
    pub(crate) async fn run_action(&self, plan: ActionPlan, r: rpc::InstanceActionRequest) {
        let ids = RequestIds {
            request_id: r.request_id.clone(),
            global_request_id: r.global_request_id.clone(),
        };
        let Ok(instance) = r.instance_uuid.parse::<InstanceUuid>() else {
            error!("action for an invalid instance uuid dropped");
            return;
        };
        let host = &self.cfg.host;
        let ev = |phase, failure: Option<&str>| {
            event(
                &r.instance_uuid,
                plan.action,
                plan.event,
                host,
                &ids,
                phase,
                failure,
            )
        };
        // 1. The event starts (a reboot or rebuild moves on a step), if the
        //    task state is still the one the API set.
        let first = InstanceUpdate {
            instance_uuid: r.instance_uuid.clone(),
            task_state: plan.started.map(|t| NullableString {
                value: Some(t.to_owned()),
            }),
            expected_task_states: vec![plan.task.to_owned()],
            events: vec![ev(EventPhase::Start, None)],
            ..Default::default()
        };
        if let Err(e) = self.conductor.update_instance(&first, &ids).await {
            if superseded(&e) {
                info!(error = %chain(&e), "action superseded (deleted or moved on); dropped");
            } else {
                error!(error = %chain(&e), "could not start the action");
            }
            metrics::action(plan.action, "aborted");
            return;
        }
        let now = plan.started.unwrap_or(plan.task);
        // 2. The driver.
        let mut result = self.driver.perform(instance, &plan.op).await;
        if result.is_ok() && plan.then_power_off {
            result = self.driver.perform(instance, &GuestOp::PowerOff).await;
        }
        // 3. The outcome.
        let power = self.driver.power_state(instance);
        let mut u = InstanceUpdate {
            instance_uuid: r.instance_uuid.clone(),
            task_state: NullableString::null(),
            expected_task_states: vec![now.to_owned()],
            power_state: Some(power),
            ..Default::default()
        };
        match result {
            Ok(()) => {
                u.vm_state = Some(plan.done.to_owned());
                if matches!(plan.op, GuestOp::Rebuild { .. }) {
                    u.launched_at_unix_ms = Some(now_unix_ms());
                }
                u.events.push(ev(EventPhase::Finish, None));
                match self.conductor.update_instance(&u, &ids).await {
                    Ok(_) => {
                        metrics::action(plan.action, "done");
                        info!(vm_state = plan.done, "action done");
                    }
                    Err(e) => {
                        warn!(error = %chain(&e), "could not report the finished action");
                        metrics::action(plan.action, "aborted");
                    }
                }
            }
            Err(e) => {
                let why = chain(&e);
                warn!(error = %why, "action failed");
                if plan.error_on_failure {
                    u.vm_state = Some(vs::ERROR.to_owned());
                }
                u.events.push(ev(EventPhase::Finish, Some(&why)));
                let fault = rpc::InstanceFault {
                    instance_uuid: r.instance_uuid.clone(),
                    code: 500,
                    message: e.to_string(),
                    details: why.clone(),
                    host: host.clone(),
                };
                if let Err(ue) = self.conductor.fail_instance(&u, &fault, &ids).await {
                    warn!(error = %chain(&ue), "could not report the failed action");
                }
                metrics::action(plan.action, "failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tail_lines;

    #[test]
    fn tails_count_lines_from_the_end() {
        assert_eq!(tail_lines("a\nb\nc\n", 0), "a\nb\nc\n");
        assert_eq!(tail_lines("a\nb\nc\n", 1), "c\n");
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(tail_lines("a\nb\nc\n", 9), "a\nb\nc\n");
        assert_eq!(tail_lines("", 3), "");
    }
}
