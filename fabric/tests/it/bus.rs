//! The message-bus suite, written once and run against both transports
//! (`bus::inproc::*` and `bus::amqp::*`), plus RabbitMQ-only tests of a
//! broker restart (`bus::amqp_broker_restart`).

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabric::bus::{self, BusError, BusOptions, Delivery, Subscription, Transport};
use fabric::wire::{now_unix_ms, Envelope};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    Inproc,
    Amqp,
}

/// `n` transports on one fresh bus (separate connections over RabbitMQ, like
/// separate processes); `None` when RabbitMQ is unavailable and not required.
async fn transports(backend: Backend, test: &str, n: usize) -> Option<Vec<Arc<dyn Transport>>> {
    transports_with(backend, test, n, BusOptions::default()).await
}

pub(crate) async fn transports_with(
    backend: Backend,
    test: &str,
    n: usize,
    options: BusOptions,
) -> Option<Vec<Arc<dyn Transport>>> {
    let url = match backend {
        Backend::Inproc => format!("inproc://{test}-{}", uuid::Uuid::new_v4()),
        Backend::Amqp => testkit::rabbitmq(&format!("bus_{test}"))?,
    };
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            bus::connect_with(&url, options.clone())
                .await
                .expect("connect"),
        );
    }
    Some(out)
}

async fn recv(sub: &mut Subscription) -> Delivery {
    tokio::time::timeout(WAIT, sub.recv())
        .await
        .unwrap_or_else(|_| panic!("nothing arrived on {} within {WAIT:?}", sub.name()))
        .expect("subscription ended")
}

async fn nothing_more(sub: &mut Subscription) {
    if let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
        panic!("unexpected delivery {:?}", d.envelope());
    }
}

pub(crate) fn msg(method: &str, payload: impl Into<bytes::Bytes>) -> Envelope {
    Envelope::new(method).with_payload(payload)
}

/// Answers every call on `queue`: `fail` → error reply, else echo.
async fn echo_server(t: &Arc<dyn Transport>, queue: &str) -> tokio::task::JoinHandle<()> {
    let mut sub = t.consume(queue).await.expect("consume");
    tokio::spawn(async move {
        while let Some(d) = sub.recv().await {
            let req = d.envelope().clone();
            assert!(
                !req.correlation_id.is_empty(),
                "call without correlation id"
            );
            assert!(req.deadline_unix_ms > 0, "call without deadline");
            let reply = if req.method == "fail" {
                req.error_reply("NotFound", "no such instance")
            } else {
                req.reply(req.payload.clone())
            };
            let _ = d.reply(reply).await;
        }
    })
}

async fn cast_delivers(b: Backend) {
    let Some(t) = transports(b, "cast_delivers", 2).await else {
        return;
    };
    // Cast before any consumer exists: buffered.
    for i in 0..3u8 {
        t[0].cast("compute.host-1", msg("build", vec![i]))
            .await
            .unwrap();
    }
    let mut sub = t[1].consume("compute.host-1").await.unwrap();
    t[0].cast("compute.host-1", msg("build", vec![3]))
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        let d = recv(&mut sub).await;
        assert_eq!(d.envelope().method, "build");
        assert!(!d.expects_reply());
        got.push(d.envelope().payload[0]);
        d.ack().await.unwrap();
    }
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 3]);
    nothing_more(&mut sub).await;
}

async fn competing_consumers(b: Backend) {
    let Some(t) = transports(b, "competing_consumers", 3).await else {
        return;
    };
    const N: u32 = 40;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for tr in &t[1..] {
        let mut sub = tr.consume("conductor").await.unwrap();
        let seen = seen.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = 0;
            while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(2), sub.recv()).await {
                seen.lock().unwrap().push(u32::from_be_bytes(
                    d.envelope().payload[..].try_into().unwrap(),
                ));
                d.ack().await.unwrap();
                mine += 1;
            }
            mine
        }));
    }
    for i in 0..N {
        t[0].cast("conductor", msg("work", i.to_be_bytes().to_vec()))
            .await
            .unwrap();
    }
    for task in tasks {
        task.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let distinct: BTreeSet<u32> = seen.iter().copied().collect();
    assert_eq!(
        seen.len(),
        N as usize,
        "each message exactly once: {seen:?}"
    );
    assert_eq!(distinct, (0..N).collect());
}

async fn call_round_trip(b: Backend) {
    let Some(t) = transports(b, "call_round_trip", 2).await else {
        return;
    };
    let _server = echo_server(&t[1], "conductor").await;
    let reply = t[0]
        .call(
            "conductor",
            msg("ping", &b"hello"[..]).with_request_ids("req-1", "req-g"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(&reply.payload[..], b"hello");
    assert_eq!(reply.method, "ping");
    assert_eq!(reply.request_id, "req-1");
    assert_eq!(reply.global_request_id, "req-g");
    assert!(reply.error.is_none());
}

async fn call_timeout(b: Backend) {
    let Some(t) = transports(b, "call_timeout", 1).await else {
        return;
    };
    let started = Instant::now();
    let err = t[0]
        .call(
            "conductor.nobody",
            msg("ping", &b""[..]),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, BusError::Timeout(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

async fn remote_error(b: Backend) {
    let Some(t) = transports(b, "remote_error", 2).await else {
        return;
    };
    let _server = echo_server(&t[1], "conductor").await;
    let err = t[0]
        .call("conductor", msg("fail", &b""[..]), WAIT)
        .await
        .unwrap_err();
    match err {
        BusError::Remote { code, message } => {
            assert_eq!(code, "NotFound");
            assert_eq!(message, "no such instance");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
}

async fn fanout_reaches_all(b: Backend) {
    let Some(t) = transports(b, "fanout_reaches_all", 3).await else {
        return;
    };
    let mut subs = Vec::new();
    for tr in &t {
        subs.push(tr.subscribe("cells").await.unwrap());
    }
    subs.push(t[1].subscribe("cells").await.unwrap());
    t[0].fanout("cells", msg("refresh", &b"x"[..]))
        .await
        .unwrap();
    for sub in &mut subs {
        let d = recv(sub).await;
        assert_eq!(d.envelope().method, "refresh");
        d.ack().await.unwrap();
        nothing_more(sub).await;
    }
}

async fn envelope_fields_intact(b: Backend) {
    let Some(t) = transports(b, "envelope_fields_intact", 2).await else {
        return;
    };
    let mut sub = t[1].consume("compute.host-2").await.unwrap();
    let sent = Envelope::new("build_and_run_instance")
        .with_request_ids("req-abc", "req-global")
        .with_payload(vec![0u8, 1, 2, 255])
        .with_timeout(Duration::from_secs(60));
    t[0].cast("compute.host-2", sent.clone()).await.unwrap();
    let d = recv(&mut sub).await;
    assert_eq!(d.envelope(), &sent);
    d.ack().await.unwrap();
}

async fn concurrent_calls(b: Backend) {
    let Some(t) = transports(b, "concurrent_calls", 3).await else {
        return;
    };
    let _s1 = echo_server(&t[1], "conductor").await;
    let _s2 = echo_server(&t[2], "conductor").await;
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let t = t[0].clone();
        tasks.push(tokio::spawn(async move {
            let reply = t
                .call("conductor", msg("echo", i.to_be_bytes().to_vec()), WAIT)
                .await
                .unwrap();
            assert_eq!(&reply.payload[..], &i.to_be_bytes()[..]);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

async fn expired_dropped(b: Backend) {
    let Some(t) = transports(b, "expired_dropped", 2).await else {
        return;
    };
    let mut stale = msg("stale", &b""[..]);
    stale.deadline_unix_ms = now_unix_ms() - 1;
    t[0].cast("conductor", stale).await.unwrap();
    t[0].cast("conductor", msg("fresh", &b""[..]))
        .await
        .unwrap();
    let mut sub = t[1].consume("conductor").await.unwrap();
    let d = recv(&mut sub).await;
    assert_eq!(d.envelope().method, "fresh");
    d.ack().await.unwrap();
    nothing_more(&mut sub).await;
}

async fn unacked_redelivered(b: Backend) {
    let Some(t) = transports(b, "unacked_redelivered", 2).await else {
        return;
    };
    let mut sub = t[1].consume("conductor").await.unwrap();
    t[0].cast("conductor", msg("work", &b"1"[..]))
        .await
        .unwrap();
    let d = recv(&mut sub).await;
    assert!(!d.redelivered());
    drop(d); // handler gave up without settling
    let d = recv(&mut sub).await;
    assert_eq!(d.envelope().method, "work");
    assert!(d.redelivered());
    d.ack().await.unwrap();
    nothing_more(&mut sub).await;
}

async fn closed_transport_fails(b: Backend) {
    let Some(t) = transports(b, "closed_transport_fails", 1).await else {
        return;
    };
    let mut sub = t[0].consume("conductor").await.unwrap();
    t[0].close().await;
    assert!(matches!(
        t[0].cast("conductor", msg("x", &b""[..])).await,
        Err(BusError::Closed)
    ));
    let end = tokio::time::timeout(WAIT, sub.recv())
        .await
        .expect("subscription ends");
    assert!(end.is_none());
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod inproc {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Inproc).await
                }
            )*
        }
        mod amqp {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Amqp).await
                }
            )*
        }
    };
}

suite!(
    cast_delivers,
    competing_consumers,
    call_round_trip,
    call_timeout,
    remote_error,
    fanout_reaches_all,
    envelope_fields_intact,
    concurrent_calls,
    expired_dropped,
    unacked_redelivered,
    closed_transport_fails,
);

pub(crate) fn rabbitmqctl(arg: &str) {
    rabbitmqctl_args(&[arg]);
}

pub(crate) fn rabbitmqctl_args(args: &[&str]) {
    let arg = args.join(" ");
    let out = std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .output()
        .expect("run rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl {arg}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the broker app again even if the test panics half way.
struct StartAppOnDrop;

impl Drop for StartAppOnDrop {
    fn drop(&mut self) {
        rabbitmqctl("start_app");
    }
}

/// Runs alone (see `.config/nextest.toml`): stops and starts the RabbitMQ
/// application in the middle of traffic. Every cast that returned `Ok` must
/// be consumed afterwards (duplicates allowed), and a call in flight when the
/// broker stops must fail promptly instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_broker_restart() {
    let options = BusOptions {
        publish_wait: Duration::from_secs(5),
        reconnect_max: Duration::from_secs(1),
        ..BusOptions::default()
    };
    let Some(t) = transports_with(Backend::Amqp, "amqp_broker_restart", 2, options).await else {
        return;
    };
    let (producer, consumer) = (t[0].clone(), t[1].clone());
    let queue = "compute.restart-host";

    // Consumer: records every id it sees, acks (an ack may fail across the
    // restart; the message then comes again).
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let mut sub = consumer.consume(queue).await.unwrap();
    let seen2 = seen.clone();
    let consumer_task = tokio::spawn(async move {
        while let Some(d) = sub.recv().await {
            seen2.lock().unwrap().insert(u32::from_be_bytes(
                d.envelope().payload[..].try_into().unwrap(),
            ));
            let _ = d.ack().await;
        }
    });

    // Producer: casts until told to stop, recording what was confirmed.
    let confirmed = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(Mutex::new(0u32));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer_task = {
        let (confirmed, failed, stop, producer) = (
            confirmed.clone(),
            failed.clone(),
            stop.clone(),
            producer.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match producer
                    .cast(queue, msg("work", i.to_be_bytes().to_vec()))
                    .await
                {
                    Ok(()) => confirmed.lock().unwrap().push(i),
                    Err(_) => *failed.lock().unwrap() += 1,
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A call in flight (nobody answers) when the broker stops.
    let caller = producer.clone();
    let call = tokio::spawn(async move {
        let started = Instant::now();
        let res = caller
            .call(
                "conductor.nobody",
                msg("ping", &b""[..]),
                Duration::from_secs(60),
            )
            .await;
        (res, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let confirmed_before = confirmed.lock().unwrap().len();
    let guard = StartAppOnDrop;
    tokio::task::spawn_blocking(|| rabbitmqctl("stop_app"))
        .await
        .unwrap();
    let (res, elapsed) = tokio::time::timeout(Duration::from_secs(15), call)
        .await
        .expect("call in flight hangs after the broker stopped")
        .unwrap();
    assert!(
        matches!(
            res,
            Err(BusError::Disconnected) | Err(BusError::Unavailable(_)) | Err(BusError::Timeout(_))
        ),
        "call in flight: {res:?}"
    );
    assert!(elapsed < Duration::from_secs(15), "call took {elapsed:?}");
    eprintln!("call in flight ended after {elapsed:?} with {res:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(move || drop(guard))
        .await
        .unwrap();
    let restarted_at = confirmed.lock().unwrap().len();

    // Traffic after recovery.
    let deadline = Instant::now() + Duration::from_secs(30);
    while confirmed.lock().unwrap().len() < restarted_at + 50 {
        assert!(
            Instant::now() < deadline,
            "no confirmed casts after the broker came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer_task.await.unwrap();

    // Every confirmed cast is consumed eventually.
    let confirmed: Vec<u32> = confirmed.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let missing: Vec<u32> = {
            let seen = seen.lock().unwrap();
            confirmed
                .iter()
                .copied()
                .filter(|i| !seen.contains(i))
                .collect()
        };
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "confirmed but never consumed: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "confirmed {} casts ({} before the stop), {} failed during the outage",
        confirmed.len(),
        confirmed_before,
        failed.lock().unwrap()
    );

    // Calls work again after the restart.
    let _server = echo_server(&consumer, "conductor").await;
    let reply = producer
        .call("conductor", msg("ping", &b"again"[..]), WAIT)
        .await
        .unwrap();
    assert_eq!(&reply.payload[..], b"again");
    consumer_task.abort();
}
