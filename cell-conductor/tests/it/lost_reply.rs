//! A spawn failure whose reschedule went through but whose reply was lost
//! (the broker connection dropped after the conductor answered): the
//! compute falls back to setting ERROR only while the instance is still on
//! its host, so the build goes on on the alternate and ends ACTIVE there,
//! without a fault. Before, the fallback set ERROR over the rescheduled
//! build.

use std::sync::Arc;
use std::time::Duration;

use fabric::bus::{BusError, Subscription, Transport, TransportKind};
use fabric::rpc::{method, vm_state as vs};
use fabric::wire::Envelope;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::common::Cell;

/// The bus as the computes see it: every `reschedule_instance` call is
/// delivered and answered, and the answer lost on the way back.
#[derive(Debug)]
struct LosesRescheduleReplies(Arc<dyn Transport>);

impl Transport for LosesRescheduleReplies {
    fn kind(&self) -> TransportKind {
        self.0.kind()
    }

    fn cast<'a>(&'a self, queue: &'a str, env: Envelope) -> BoxFuture<'a, fabric::bus::Result<()>> {
        self.0.cast(queue, env)
    }

    fn call<'a>(
        &'a self,
        queue: &'a str,
        env: Envelope,
        timeout: Duration,
    ) -> BoxFuture<'a, fabric::bus::Result<Envelope>> {
        async move {
            let lose = env.method == method::RESCHEDULE;
            let reply = self.0.call(queue, env, timeout).await;
            if lose && reply.is_ok() {
                return Err(BusError::Disconnected);
            }
            reply
        }
        .boxed()
    }

    fn fanout<'a>(
        &'a self,
        topic: &'a str,
        env: Envelope,
    ) -> BoxFuture<'a, fabric::bus::Result<()>> {
        self.0.fanout(topic, env)
    }

    fn consume<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, fabric::bus::Result<Subscription>> {
        self.0.consume(queue)
    }

    fn subscribe<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, fabric::bus::Result<Subscription>> {
        self.0.subscribe(topic)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.0.close()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_reschedule_reply_keeps_the_rescheduled_build() {
    let (db, bus) = crate::embedded::backends("lost_reschedule_reply");
    let lossy: Arc<dyn Transport> = Arc::new(LosesRescheduleReplies(bus.clone()));
    let hv = compute::driver::fake::FakeHypervisor::automatic(Duration::ZERO);
    hv.fail_spawns("host1", "injected spawn failure");
    let cell = Cell::start_with(&db.url, bus, lossy, hv, 2).await;
    let (uuid, _) = cell.boot("host1", &["host2"]).await;
    cell.wait_for(uuid, "ACTIVE or ERROR", |r| {
        matches!(r.vm_state.as_deref(), Some(vs::ACTIVE | vs::ERROR))
    })
    .await;
    // Give a wrong fallback time to land after the build finished.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let row = cell.instance(uuid).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE), "{row:?}");
    assert_eq!(row.host.as_deref(), Some("host2"), "{row:?}");
    assert_eq!(row.task_state, None, "{row:?}");
    let faults = cell.db.faults(uuid).await.unwrap();
    assert!(
        faults.is_empty(),
        "no fault for a build that succeeded: {faults:?}"
    );
    assert_eq!(
        cell.placement.allocation(uuid).map(|(p, _)| p),
        Some(cell.provider("host2")),
        "the claim moved with the build"
    );
    cell.stop().await;
}
