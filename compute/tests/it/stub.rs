//! A stub conductor: answers registration and node updates on an
//! in-process bus and counts the heartbeats cast to its liveness queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use fabric::bus::Transport;
use fabric::rpc::{self, method, CONDUCTOR_QUEUE};
use prost::Message;

#[derive(Debug, Default)]
pub struct Counts {
    pub registrations: AtomicU64,
    pub heartbeats: AtomicU64,
    /// Heartbeats are counted but never settled (a conductor that hangs).
    pub ignore_heartbeats: AtomicBool,
}

pub async fn stub_conductor(bus: Arc<dyn Transport>) -> Arc<Counts> {
    let counts = Arc::new(Counts::default());
    let mut sub = bus.consume(CONDUCTOR_QUEUE).await.unwrap();
    let mut beats = bus.consume(rpc::CONDUCTOR_LIVENESS_QUEUE).await.unwrap();
    let c = counts.clone();
    tokio::spawn(async move {
        // Unsettled heartbeats are kept (a dropped delivery goes back to
        // the queue and would come round again at once).
        let mut held = Vec::new();
        while let Some(d) = beats.recv().await {
            c.heartbeats.fetch_add(1, Ordering::Relaxed);
            if c.ignore_heartbeats.load(Ordering::Relaxed) {
                held.push(d);
            } else {
                let _ = d.ack().await;
            }
        }
    });
    let c = counts.clone();
    tokio::spawn(async move {
        // A node keeps the uuid it was first registered with, as the
        // conductor's compute_nodes row does.
        let mut nodes = std::collections::HashMap::<String, String>::new();
        while let Some(d) = sub.recv().await {
            let env = d.envelope().clone();
            let payload = match env.method.as_str() {
                method::SERVICE_REGISTER => {
                    c.registrations.fetch_add(1, Ordering::Relaxed);
                    rpc::ServiceRecord {
                        id: 1,
                        ..Default::default()
                    }
                    .encode_to_vec()
                }
                method::COMPUTE_NODE_UPDATE => {
                    let n: rpc::ComputeNodeUpdate = env.decode_message().unwrap();
                    let uuid = nodes
                        .entry(n.hypervisor_hostname.clone())
                        .or_insert(n.uuid)
                        .clone();
                    rpc::ComputeNodeRecord {
                        id: 1,
                        uuid,
                        mapped: false,
                    }
                    .encode_to_vec()
                }
                _ => Vec::new(),
            };
            let _ = d.reply(env.reply(payload)).await;
        }
    });
    counts
}
