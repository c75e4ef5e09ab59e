//! The calls and casts to a compute host about itself or one of its
//! guests, besides the builds and the server actions: its consoles
//! (`get_console_output`, `get_serial_console`, `get_vnc_console`), its
//! diagnostics (`get_diagnostics`, `get_instance_diagnostics`), the events
//! other services send about a guest (`external_instance_event`), and the
//! host's uptime (`get_host_uptime`).

/// `get_console_output` (call to `compute.<host>`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ConsoleOutputRequest {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// The last this many lines; 0: all the host keeps.
    #[prost(uint32, tag = "2")]
    pub tail_lines: u32,
}

/// The reply to `get_console_output`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ConsoleOutput {
    /// The console's text (invalid UTF-8 replaced).
    #[prost(string, tag = "1")]
    pub output: String,
}

/// `get_host_uptime` (call to `compute.<host>`): nothing to say.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HostUptimeRequest {}

/// The reply to `get_host_uptime`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HostUptime {
    /// What `uptime` would print on the host (Nova's libvirt driver runs
    /// it; the API answers it as the hypervisor's `uptime`).
    #[prost(string, tag = "1")]
    pub uptime: String,
}

/// `get_serial_console` and `get_vnc_console` (calls to
/// `compute.<host>`): the instance.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct SerialConsoleRequest {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
}

/// The reply to `get_serial_console` and `get_vnc_console`: where the
/// console proxy connects.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct SerialConsole {
    /// Address (an IP) on the compute host.
    #[prost(string, tag = "1")]
    pub host: String,
    /// TCP port.
    #[prost(uint32, tag = "2")]
    pub port: u32,
}

/// `get_diagnostics` and `get_instance_diagnostics` (calls to
/// `compute.<host>`): the instance.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct DiagnosticsRequest {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
}

/// The reply to a diagnostics call: a JSON object (the driver's free-form
/// dict for `get_diagnostics`; Nova's standard fields, those the driver
/// knows, for `get_instance_diagnostics`). A guest that is not running is
/// an `InvalidStateTransition` error whose message is its power state's
/// name.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct DiagnosticsReply {
    /// The diagnostics, JSON.
    #[prost(string, tag = "1")]
    pub json: String,
}

/// One event of `POST /os-server-external-events` (Nova's
/// `InstanceExternalEvent`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ExternalEvent {
    /// The instance.
    #[prost(string, tag = "1")]
    pub instance_uuid: String,
    /// `network-changed`, `network-vif-plugged`, `volume-extended`,
    /// `power-update`, …
    #[prost(string, tag = "2")]
    pub name: String,
    /// `completed`, `failed` or `in-progress`.
    #[prost(string, tag = "3")]
    pub status: String,
    /// The tag (a port, a volume, `POWER_ON` / `POWER_OFF`, …); empty for
    /// none.
    #[prost(string, tag = "4")]
    pub tag: String,
}

/// `external_instance_event` (a cast to `compute.<host>`): the events of
/// one request for instances on that host.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ExternalEvents {
    /// The events, in the request's order.
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<ExternalEvent>,
}
