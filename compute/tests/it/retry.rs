//! The conductor client over real RabbitMQ: a call that loses the broker
//! connection while in flight is repeated once the bus is back, under the
//! same `update_id`; a refusal and a timeout on a live connection are not
//! repeated. A stub conductor on a connection of its own answers (skipped
//! without RabbitMQ unless REQUIRE_REAL_BACKENDS=1).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use compute::conductor::{CallRetry, ConductorClient};
use fabric::bus::{self, BusError, BusOptions, Transport};
use fabric::rpc::{self, code, method, RequestIds, RpcError, CONDUCTOR_QUEUE};
use prost::Message;
use tokio::sync::Notify;

/// What the stub does with the instance updates it receives, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Answer with the instance.
    Apply,
    /// Take it and never answer.
    Silent,
    /// Refuse it (unexpected task state).
    Refuse,
}

struct Stub {
    bus: Arc<dyn Transport>,
    seen: Arc<Mutex<Vec<rpc::InstanceUpdate>>>,
    received: Arc<Notify>,
}

async fn stub(url: &str, script: Vec<Answer>) -> Stub {
    let bus = bus::connect_with(url, options("stub-conductor"))
        .await
        .expect("connect the stub");
    let mut sub = bus.consume(CONDUCTOR_QUEUE).await.unwrap();
    let seen: Arc<Mutex<Vec<rpc::InstanceUpdate>>> = Arc::default();
    let received = Arc::new(Notify::new());
    let (s, r) = (seen.clone(), received.clone());
    tokio::spawn(async move {
        while let Some(d) = sub.recv().await {
            let env = d.envelope().clone();
            assert_eq!(env.method, method::INSTANCE_UPDATE);
            let u: rpc::InstanceUpdate = env.decode_message().unwrap();
            let n = {
                let mut s = s.lock().unwrap();
                s.push(u.clone());
                s.len()
            };
            r.notify_one();
            match script.get(n - 1).copied().unwrap_or(Answer::Apply) {
                Answer::Apply => {
                    let rec = rpc::InstanceRecord {
                        instance_uuid: u.instance_uuid,
                        vm_state: "active".into(),
                        ..Default::default()
                    };
                    let _ = d.reply(env.reply(rec.encode_to_vec())).await;
                }
                Answer::Silent => {
                    let _ = d.ack().await;
                }
                Answer::Refuse => {
                    let _ = d
                        .reply(env.error_reply(code::UNEXPECTED_TASK_STATE, "moved on"))
                        .await;
                }
            }
        }
    });
    Stub {
        bus,
        seen,
        received,
    }
}

fn options(name: &str) -> BusOptions {
    BusOptions {
        connection_name: name.to_owned(),
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_secs(1),
        ..BusOptions::default()
    }
}

fn update() -> rpc::InstanceUpdate {
    rpc::InstanceUpdate {
        instance_uuid: uuid::Uuid::new_v4().to_string(),
        task_state: rpc::NullableString::set(rpc::task_state::NETWORKING),
        expected_task_states: vec![rpc::task_state::BLOCK_DEVICE_MAPPING.to_owned()],
        ..Default::default()
    }
}

async fn client(url: &str, name: &str, timeout: Duration) -> (Arc<dyn Transport>, ConductorClient) {
    let bus = bus::connect_with(url, options(name))
        .await
        .expect("connect the client");
    let c = ConductorClient::new(bus.clone(), timeout)
        .with_retry(CallRetry::for_up_to(Duration::from_secs(30)));
    (bus, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_call_that_loses_its_connection_is_repeated_with_the_same_update_id() {
    let Some(url) = testkit::rabbitmq("compute_retry_lost") else {
        return;
    };
    let vhost = testkit::vhost_of(&url);
    let stub = stub(&url, vec![Answer::Silent, Answer::Apply]).await;
    let (bus, c) = client(&url, "compute-retry-lost", Duration::from_secs(20)).await;
    let call = tokio::spawn(async move {
        let started = Instant::now();
        let res = c.update_instance(&update(), &RequestIds::default()).await;
        (res, started.elapsed())
    });
    // The stub holds the first attempt: drop the client's connection.
    tokio::time::timeout(Duration::from_secs(10), stub.received.notified())
        .await
        .expect("the call reached the stub");
    let closed = tokio::task::spawn_blocking(move || {
        testkit::close_named_connections(&vhost, "compute-retry-lost")
    })
    .await
    .unwrap();
    assert_eq!(closed, 1, "the client's connection was closed");
    let (res, elapsed) = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the repeated call ends")
        .unwrap();
    let rec = res.expect("the call succeeds once the connection is back");
    assert_eq!(rec.vm_state, "active");
    // Far less than the 20 s call timeout: the loss was noticed at once.
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    let seen = stub.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "one repeat: {seen:?}");
    assert!(!seen[0].update_id.is_empty(), "the update carries a key");
    assert_eq!(
        seen[0].update_id, seen[1].update_id,
        "the repeat has the same key"
    );
    assert_eq!(seen[0].instance_uuid, seen[1].instance_uuid);
    bus.close().await;
    stub.bus.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_refusal_is_not_repeated() {
    let Some(url) = testkit::rabbitmq("compute_retry_refusal") else {
        return;
    };
    let stub = stub(&url, vec![Answer::Refuse]).await;
    let (bus, c) = client(&url, "compute-retry-refusal", Duration::from_secs(10)).await;
    let err = c
        .update_instance(&update(), &RequestIds::default())
        .await
        .expect_err("refused");
    assert_eq!(
        err.remote_code(),
        Some(code::UNEXPECTED_TASK_STATE),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stub.seen.lock().unwrap().len(), 1, "asked once");
    bus.close().await;
    stub.bus.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_timeout_on_a_live_connection_is_not_repeated() {
    let Some(url) = testkit::rabbitmq("compute_retry_timeout") else {
        return;
    };
    let stub = stub(&url, vec![Answer::Silent, Answer::Apply]).await;
    let (bus, c) = client(&url, "compute-retry-timeout", Duration::from_secs(1)).await;
    let err = c
        .update_instance(&update(), &RequestIds::default())
        .await
        .expect_err("no answer");
    match &err {
        compute::ComputeError::Conductor {
            source: RpcError::Bus(BusError::Timeout(_)),
            ..
        } => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stub.seen.lock().unwrap().len(), 1, "asked once");
    bus.close().await;
    stub.bus.close().await;
}
