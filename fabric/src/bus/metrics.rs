//! Metric names and label values of the message bus, in one place.
//!
//! Labels come from small closed sets only: the transport kind, the queue
//! kind (`compute`, `conductor`, ...; never the full queue name, which holds
//! a host name) and the operation.

/// Counter: messages handed to the broker (cast, call, reply, fan-out).
/// Labels: `transport`, `op`, `kind`.
pub const PUBLISHED: &str = "fabric_bus_published_total";
/// Counter: messages handed to a consumer. Labels: `transport`, `kind`.
pub const CONSUMED: &str = "fabric_bus_consumed_total";
/// Counter: messages dropped on the consumer side because their deadline
/// had passed. Labels: `transport`, `kind`.
pub const EXPIRED: &str = "fabric_bus_expired_total";
/// Counter: calls that ended without a reply. Labels: `transport`, `reason`
/// (`timeout`, `disconnected`, `closed`, `other`).
pub const CALL_FAILED: &str = "fabric_bus_call_failed_total";
/// Counter: broker connections (re-)established after a loss. Label: `transport`.
pub const RECONNECTS: &str = "fabric_bus_reconnects_total";

/// What a queue or topic is for, derived from its name's first dot-separated
/// part; used as the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// `compute.<host>` and `compute`.
    Compute,
    /// `conductor` and `conductor.*`.
    Conductor,
    /// `scheduler` and `scheduler.*`.
    Scheduler,
    /// A caller's reply queue.
    Reply,
    /// Anything else.
    Other,
}

impl QueueKind {
    /// The kind of the queue or topic called `name`.
    pub fn of(name: &str) -> Self {
        match name.split('.').next().unwrap_or_default() {
            "compute" => Self::Compute,
            "conductor" => Self::Conductor,
            "scheduler" => Self::Scheduler,
            "reply" => Self::Reply,
            _ => Self::Other,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Conductor => "conductor",
            Self::Scheduler => "scheduler",
            Self::Reply => "reply",
            Self::Other => "other",
        }
    }
}

/// Which operation published a message (the `op` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Cast,
    Call,
    Reply,
    Fanout,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Cast => "cast",
            Op::Call => "call",
            Op::Reply => "reply",
            Op::Fanout => "fanout",
        }
    }
}

pub(crate) fn published(transport: &'static str, op: Op, name: &str) {
    metrics::counter!(PUBLISHED, "transport" => transport, "op" => op.as_str(), "kind" => QueueKind::of(name).as_str())
        .increment(1);
}

pub(crate) fn consumed(transport: &'static str, name: &str) {
    metrics::counter!(CONSUMED, "transport" => transport, "kind" => QueueKind::of(name).as_str())
        .increment(1);
}

pub(crate) fn expired(transport: &'static str, name: &str) {
    metrics::counter!(EXPIRED, "transport" => transport, "kind" => QueueKind::of(name).as_str())
        .increment(1);
}

pub(crate) fn call_failed(transport: &'static str, err: &super::BusError) {
    let reason = match err {
        super::BusError::Timeout(_) => "timeout",
        super::BusError::Disconnected => "disconnected",
        super::BusError::Unavailable(_) => "unavailable",
        super::BusError::Closed => "closed",
        super::BusError::Remote { .. } => return,
        _ => "other",
    };
    metrics::counter!(CALL_FAILED, "transport" => transport, "reason" => reason).increment(1);
}

pub(crate) fn reconnected(transport: &'static str) {
    metrics::counter!(RECONNECTS, "transport" => transport).increment(1);
}

#[cfg(test)]
mod tests {
    use super::QueueKind;

    #[test]
    fn kinds() {
        assert_eq!(QueueKind::of("compute.host-1"), QueueKind::Compute);
        assert_eq!(QueueKind::of("conductor"), QueueKind::Conductor);
        assert_eq!(QueueKind::of("whatever"), QueueKind::Other);
    }
}
