//! `external_instance_event` on a host: the events other services send
//! through `POST /os-server-external-events` for instances on this host
//! (Nova's compute manager `external_instance_event`).
//!
//! Each event goes to the handler of the service it comes from
//! ([`Family`]): the network service's (`network-*`), the volume
//! service's (`volume-*`), the bare-metal service's (`power-update`) and
//! the accelerator service's (`accelerator-request-bound`). This region
//! runs none of those services yet, so every handler only records the
//! event (a log line and [`EXTERNAL_EVENTS`], by name and status); a
//! service that comes plugs its handling in at its family's arm of
//! [`Host::external_event`].

use fabric::bus::Delivery;
use fabric::rpc;
use tracing::{info, warn};

use crate::agent::Host;
use crate::error::chain;

/// Counter of external events received, by name and status.
pub const EXTERNAL_EVENTS: &str = "compute_external_events_total";

/// The service an event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `network-changed`, `network-vif-plugged`, `network-vif-unplugged`,
    /// `network-vif-deleted`.
    Network,
    /// `volume-extended`, `volume-reimaged`.
    Volume,
    /// `power-update` (the tag `POWER_ON` or `POWER_OFF`).
    Power,
    /// `accelerator-request-bound`.
    Accelerator,
    /// A name the API would not have let by.
    Unknown,
}

impl Family {
    /// The family of the event `name`.
    pub fn of(name: &str) -> Family {
        match name {
            n if n.starts_with("network-") => Family::Network,
            n if n.starts_with("volume-") => Family::Volume,
            "power-update" => Family::Power,
            "accelerator-request-bound" => Family::Accelerator,
            _ => Family::Unknown,
        }
    }
}

impl Host {
    /// The `external_instance_event` cast: each event to its family's
    /// handler. Acknowledged whatever the handlers did (an event is a
    /// notice, not a request to retry).
    pub(crate) async fn external_events(&self, d: Delivery) {
        let env = d.envelope().clone();
        match env.decode_message::<rpc::ExternalEvents>() {
            Ok(batch) => {
                for e in &batch.events {
                    self.external_event(e);
                }
                if let Err(e) = d.ack().await {
                    warn!(error = %chain(&e), "could not acknowledge external events");
                }
            }
            Err(e) => {
                warn!(error = %e, "undecodable external events dropped");
                let _ = d.reject().await;
            }
        }
    }

    /// One event: recorded; the services that would act on it are not in
    /// this region yet.
    fn external_event(&self, e: &rpc::ExternalEvent) {
        let family = Family::of(&e.name);
        metrics::counter!(EXTERNAL_EVENTS, "name" => e.name.clone(), "status" => e.status.clone())
            .increment(1);
        match family {
            // Nothing waits for a VIF or a volume here; a network or volume
            // service's handling goes in these arms.
            Family::Network | Family::Volume | Family::Accelerator => {}
            // Nova's `power-update` moves an Ironic instance's vm_state to
            // its node's power; this region's drivers keep their guests'
            // power themselves (the power sync reads it), so it is noted.
            Family::Power => {}
            Family::Unknown => {
                warn!(instance = %e.instance_uuid, name = %e.name, "unknown external event");
                return;
            }
        }
        info!(instance = %e.instance_uuid, host = %self.cfg.host, name = %e.name,
            status = %e.status, tag = %e.tag, ?family, "external event received");
    }
}

#[cfg(test)]
mod tests {
    use super::Family;

    #[test]
    fn events_go_to_the_family_of_their_service() {
        assert_eq!(Family::of("network-vif-plugged"), Family::Network);
        assert_eq!(Family::of("volume-reimaged"), Family::Volume);
        assert_eq!(Family::of("power-update"), Family::Power);
        assert_eq!(Family::of("accelerator-request-bound"), Family::Accelerator);
        assert_eq!(Family::of("x"), Family::Unknown);
    }
}
