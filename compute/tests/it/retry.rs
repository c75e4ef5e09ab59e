//! The conductor client over real RabbitMQ: a call that loses the broker
//! connection while in flight, and one that times out on a live connection,
//! is repeated (once the bus is back) under the same `update_id`, until the
//! retry deadline; a refusal is not repeated, nor is a method that is not
//! safe to repeat. A stub conductor on a connection of its own answers
//! (skipped without RabbitMQ unless REQUIRE_REAL_BACKENDS=1).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use compute::conductor::{CallRetry, ConductorClient};
use fabric::bus::{self, BusError, BusOptions, Transport};
use fabric::rpc::{self, code, method, RequestIds, RpcError, CONDUCTOR_QUEUE};
use prost::Message;
use tokio::sync::Notify;

/// What the stub does with the requests it receives, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Answer (an instance update with the instance, ACTIVE).
    Apply,
    /// Take it and never answer.
    Silent,
    /// Take it and answer after [`LATE`]: after the caller's timeout.
    Late,
    /// Refuse it (unexpected task state).
    Refuse,
    /// Answer as a conductor that does not know the method.
    Unknown,
}

/// How late a [`Answer::Late`] answer comes.
const LATE: Duration = Duration::from_millis(1500);

/// One request the stub received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    /// When it reached the stub.
    at: Instant,
    /// The update, for `instance_update`.
    update: Option<rpc::InstanceUpdate>,
}

struct Stub {
    bus: Arc<dyn Transport>,
    seen: Arc<Mutex<Vec<Received>>>,
    received: Arc<Notify>,
}

impl Stub {
    fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// The instance updates received, in order.
    fn updates(&self) -> Vec<rpc::InstanceUpdate> {
        self.seen().into_iter().filter_map(|r| r.update).collect()
    }
}

/// The answer to `env` when applied.
fn applied(env: &fabric::wire::Envelope) -> Vec<u8> {
    match env.method.as_str() {
        method::INSTANCE_UPDATE => {
            let u: rpc::InstanceUpdate = env.decode_message().unwrap();
            rpc::InstanceRecord {
                instance_uuid: u.instance_uuid,
                vm_state: "active".into(),
                ..Default::default()
            }
            .encode_to_vec()
        }
        method::INSTANCE_UPDATE_STEPS => {
            let r: rpc::InstanceSteps = env.decode_message().unwrap();
            rpc::InstanceRecord {
                instance_uuid: r
                    .steps
                    .last()
                    .map(|u| u.instance_uuid.clone())
                    .unwrap_or_default(),
                vm_state: "active".into(),
                ..Default::default()
            }
            .encode_to_vec()
        }
        method::INSTANCE_FAULT => rpc::Ack::default().encode_to_vec(),
        method::RESCHEDULE => rpc::RescheduleResult::default().encode_to_vec(),
        other => panic!("the stub does not know {other}"),
    }
}

async fn stub(url: &str, script: Vec<Answer>) -> Stub {
    let bus = bus::connect_with(url, options("stub-conductor"))
        .await
        .expect("connect the stub");
    let mut sub = bus.consume(CONDUCTOR_QUEUE).await.unwrap();
    let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
    let received = Arc::new(Notify::new());
    let (s, r) = (seen.clone(), received.clone());
    tokio::spawn(async move {
        while let Some(d) = sub.recv().await {
            let env = d.envelope().clone();
            let update = (env.method == method::INSTANCE_UPDATE)
                .then(|| env.decode_message::<rpc::InstanceUpdate>().unwrap());
            let n = {
                let mut s = s.lock().unwrap();
                s.push(Received {
                    method: env.method.clone(),
                    at: Instant::now(),
                    update,
                });
                s.len()
            };
            r.notify_one();
            match script.get(n - 1).copied().unwrap_or(Answer::Apply) {
                Answer::Apply => {
                    let _ = d.reply(env.reply(applied(&env))).await;
                }
                Answer::Silent => {
                    let _ = d.ack().await;
                }
                Answer::Late => {
                    tokio::spawn(async move {
                        tokio::time::sleep(LATE).await;
                        let _ = d.reply(env.reply(applied(&env))).await;
                    });
                }
                Answer::Refuse => {
                    let _ = d
                        .reply(env.error_reply(code::UNEXPECTED_TASK_STATE, "moved on"))
                        .await;
                }
                Answer::Unknown => {
                    let _ = d
                        .reply(env.error_reply(code::UNKNOWN_METHOD, "unknown method"))
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
    client_with(
        url,
        name,
        timeout,
        CallRetry::for_up_to(Duration::from_secs(30)),
    )
    .await
}

async fn client_with(
    url: &str,
    name: &str,
    timeout: Duration,
    retry: CallRetry,
) -> (Arc<dyn Transport>, ConductorClient) {
    let bus = bus::connect_with(url, options(name))
        .await
        .expect("connect the client");
    let c = ConductorClient::new(bus.clone(), timeout).with_retry(retry);
    (bus, c)
}

/// Whether `err` is a timeout of a conductor call.
fn is_timeout(err: &compute::ComputeError) -> bool {
    matches!(
        err,
        compute::ComputeError::Conductor {
            source: RpcError::Bus(BusError::Timeout(_)),
            ..
        }
    )
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
    let seen = stub.updates();
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
    assert_eq!(stub.seen().len(), 1, "asked once");
    bus.close().await;
    stub.bus.close().await;
}

/// The conductor applies the update but answers after the call timeout
/// (a loaded conductor): the call is asked again under the same key, and
/// the second answer is the call's result. Before, the timeout was the
/// result and the agent gave up a build that had succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_timed_out_update_is_asked_again_with_the_same_update_id() {
    let Some(url) = testkit::rabbitmq("compute_retry_timeout") else {
        return;
    };
    let stub = stub(&url, vec![Answer::Late, Answer::Apply]).await;
    let timeout = Duration::from_secs(1);
    let (bus, c) = client(&url, "compute-retry-timeout", timeout).await;
    let u = update();
    let started = Instant::now();
    let rec = c
        .update_instance(&u, &RequestIds::default())
        .await
        .expect("the repeat is answered");
    let elapsed = started.elapsed();
    assert_eq!(rec.vm_state, "active");
    assert_eq!(rec.instance_uuid, u.instance_uuid);
    assert!(
        elapsed >= timeout,
        "the first attempt timed out: {elapsed:?}"
    );
    // The late answer to the first attempt changes nothing.
    tokio::time::sleep(LATE).await;
    let seen = stub.updates();
    assert_eq!(seen.len(), 2, "one repeat: {seen:?}");
    assert!(!seen[0].update_id.is_empty(), "the update carries a key");
    assert_eq!(
        seen[0].update_id, seen[1].update_id,
        "the repeat has the same key"
    );
    assert_eq!(seen[0], seen[1], "the repeat is the same update");
    bus.close().await;
    stub.bus.close().await;
}

/// `instance_fault_create` and `reschedule_instance` are not safe to
/// repeat: a timeout is their result, after one request each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_timed_out_fault_and_reschedule_are_asked_once() {
    let Some(url) = testkit::rabbitmq("compute_retry_never") else {
        return;
    };
    let stub = stub(&url, vec![Answer::Silent, Answer::Silent]).await;
    let (bus, c) = client(&url, "compute-retry-never", Duration::from_secs(1)).await;
    let instance = uuid::Uuid::new_v4().to_string();
    let fault = rpc::InstanceFault {
        instance_uuid: instance.clone(),
        code: 500,
        message: "failed".into(),
        ..Default::default()
    };
    let err = c
        .fault(&fault, &RequestIds::default())
        .await
        .expect_err("no answer");
    assert!(is_timeout(&err), "expected a timeout, got {err:?}");
    let reschedule = rpc::Reschedule {
        build: Some(rpc::BuildAndRunInstance {
            instance_uuid: instance,
            ..Default::default()
        }),
        failed_host: "host1".into(),
        ..Default::default()
    };
    let err = c
        .reschedule(&reschedule, &RequestIds::default())
        .await
        .expect_err("no answer");
    assert!(is_timeout(&err), "expected a timeout, got {err:?}");
    // Longer than the first backoff: a repeat would have reached the stub.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let methods: Vec<String> = stub.seen().into_iter().map(|r| r.method).collect();
    assert_eq!(
        methods,
        [method::INSTANCE_FAULT, method::RESCHEDULE],
        "each asked once"
    );
    bus.close().await;
    stub.bus.close().await;
}

/// A conductor that never answers: the update is asked again after each
/// timeout, and no attempt starts after the retry deadline; then the
/// timeout is the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_timeout_repeats_stop_at_the_deadline() {
    let Some(url) = testkit::rabbitmq("compute_retry_deadline") else {
        return;
    };
    let stub = stub(&url, vec![Answer::Silent; 100]).await;
    let timeout = Duration::from_millis(500);
    let retry = CallRetry {
        deadline: Duration::from_secs(2),
        min_delay: Duration::from_millis(200),
        max_delay: Duration::from_millis(200),
    };
    let (bus, c) = client_with(&url, "compute-retry-deadline", timeout, retry).await;
    let started = Instant::now();
    let err = c
        .update_instance(&update(), &RequestIds::default())
        .await
        .expect_err("never answered");
    let elapsed = started.elapsed();
    assert!(is_timeout(&err), "expected a timeout, got {err:?}");
    // Attempts at about 0, 0.7 and 1.4 s; a fourth would start at 2.1 s.
    assert!(
        elapsed < retry.deadline + timeout + Duration::from_secs(1),
        "took {elapsed:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = stub.seen();
    assert!(seen.len() >= 2, "repeated after the timeout: {seen:?}");
    assert!(seen.len() <= 3, "at most 3 attempts fit: {seen:?}");
    for r in &seen {
        // Delivery takes a little; an attempt started after the deadline
        // would arrive at least a timeout after the previous one.
        assert!(
            r.at.duration_since(started) < retry.deadline + Duration::from_millis(300),
            "an attempt after the deadline: {:?}",
            r.at.duration_since(started)
        );
    }
    let keys: Vec<String> = seen
        .iter()
        .filter_map(|r| r.update.as_ref().map(|u| u.update_id.clone()))
        .collect();
    assert!(
        keys.iter().all(|k| !k.is_empty() && *k == keys[0]),
        "one key on every attempt: {keys:?}"
    );
    bus.close().await;
    stub.bus.close().await;
}

/// A compute upgraded before its conductor: the conductor does not know
/// `instance_update_steps`, so the steps go one by one as
/// `instance_update`, in order, each under its own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_steps_to_a_conductor_without_the_method_go_one_by_one() {
    let Some(url) = testkit::rabbitmq("compute_steps_fallback") else {
        return;
    };
    // The steps method unknown, the three updates applied; then the next
    // steps call refused (one stub for both: a second consumer on the queue
    // could take a request while the first one's connection closes).
    let old = stub(
        &url,
        vec![
            Answer::Unknown,
            Answer::Apply,
            Answer::Apply,
            Answer::Apply,
            Answer::Refuse,
        ],
    )
    .await;
    let (bus, c) = client(&url, "compute-steps-fallback", Duration::from_secs(10)).await;
    let steps: Vec<rpc::InstanceUpdate> = (0..3)
        .map(|i| rpc::InstanceUpdate {
            update_id: format!("key-{i}"),
            ..update()
        })
        .collect();
    let rec = c
        .update_instance_steps(steps.clone(), &RequestIds::default())
        .await
        .expect("applied one by one");
    assert_eq!(rec.instance_uuid, steps[2].instance_uuid);
    let seen = old.seen();
    let methods: Vec<&str> = seen.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(
        methods,
        [
            method::INSTANCE_UPDATE_STEPS,
            method::INSTANCE_UPDATE,
            method::INSTANCE_UPDATE,
            method::INSTANCE_UPDATE
        ]
    );
    assert_eq!(old.updates(), steps, "each step as it was, in order");
    // A refusal of the method itself is not taken for an old conductor.
    let err = c
        .update_instance_steps(steps.clone(), &RequestIds::default())
        .await
        .expect_err("refused");
    assert_eq!(err.remote_code(), Some(code::UNEXPECTED_TASK_STATE));
    let seen = old.seen();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(seen[4].method, method::INSTANCE_UPDATE_STEPS);
    bus.close().await;
    old.bus.close().await;
}
