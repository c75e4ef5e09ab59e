//! `get_diagnostics` and `get_instance_diagnostics` on a host (Nova's
//! compute manager): the guest must be running (else an
//! `InvalidStateTransition` error naming its power state, the API's 409),
//! then the driver answers (a driver without diagnostics: `NotImplemented`,
//! the API's 501). Also the values of Nova's fake driver.

use fabric::bus::Delivery;
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, code, power_state};
use serde_json::{json, Value};
use tracing::warn;

use crate::actions::console_error;
use crate::agent::Host;
use crate::error::chain;

impl Host {
    /// A diagnostics call (`standard`: `get_instance_diagnostics`).
    pub(crate) async fn diagnostics(&self, d: Delivery, standard: bool) {
        let env = d.envelope().clone();
        let reply = match env.decode_message::<rpc::DiagnosticsRequest>() {
            Err(e) => env.error_reply(code::BAD_REQUEST, format!("undecodable request: {e}")),
            Ok(r) => match r.instance_uuid.parse::<InstanceUuid>() {
                Err(_) => env.error_reply(code::BAD_REQUEST, "not an instance uuid"),
                Ok(uuid) => match self.driver.power_state(uuid) {
                    power_state::RUNNING => match self.driver.diagnostics(uuid, standard).await {
                        Ok(v) => env.reply(prost::Message::encode_to_vec(&rpc::DiagnosticsReply {
                            json: v.to_string(),
                        })),
                        Err(e) => console_error(&env, e),
                    },
                    other => env.error_reply(code::INVALID_TRANSITION, power_state::name(other)),
                },
            },
        };
        if let Err(e) = d.reply(reply).await {
            warn!(error = %chain(&e), standard, "could not answer a diagnostics call");
        }
    }
}

/// Nova's fake driver's `get_diagnostics`.
pub fn fake_diagnostics() -> Value {
    json!({
        "cpu0_time": 17300000000_i64,
        "memory": 524288,
        "vda_errors": -1,
        "vda_read": 262144,
        "vda_read_req": 112,
        "vda_write": 5778432,
        "vda_write_req": 488,
        "vnet1_rx": 2070139,
        "vnet1_rx_drop": 0,
        "vnet1_rx_errors": 0,
        "vnet1_rx_packets": 26701,
        "vnet1_tx": 140208,
        "vnet1_tx_drop": 0,
        "vnet1_tx_errors": 0,
        "vnet1_tx_packets": 662,
    })
}

/// Nova's fake driver's `get_instance_diagnostics`, in the 2.48 form.
pub fn fake_instance_diagnostics() -> Value {
    json!({
        "state": "running",
        "driver": "libvirt",
        "hypervisor": "kvm",
        "hypervisor_os": "ubuntu",
        "uptime": 46664,
        "config_drive": true,
        "num_cpus": 1,
        "num_nics": 1,
        "num_disks": 1,
        "cpu_details": [{"id": 0, "time": 17300000000_i64, "utilisation": 15}],
        "nic_details": [{
            "mac_address": "01:23:45:67:89:ab",
            "rx_octets": 2070139,
            "rx_errors": 100,
            "rx_drop": 200,
            "rx_packets": 26701,
            "rx_rate": 300,
            "tx_octets": 140208,
            "tx_errors": 400,
            "tx_drop": 500,
            "tx_packets": 662,
            "tx_rate": 600,
        }],
        "disk_details": [{
            "read_bytes": 262144,
            "read_requests": 112,
            "write_bytes": 5778432,
            "write_requests": 488,
            "errors_count": 1,
        }],
        "memory_details": {"maximum": 524288, "used": 0},
    })
}
