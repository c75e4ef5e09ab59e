//! A broker that blocks publishers (`connection.blocked`, after a memory
//! or disk alarm) makes publishes fail in bounded time with a clear error,
//! and traffic resumes once it unblocks. Runs alone (see
//! `.config/nextest.toml`): the alarm is the whole broker's.

use std::time::{Duration, Instant};

use fabric::bus::{BusError, BusOptions};

use crate::bus::{msg, rabbitmqctl_args, transports_with, Backend};

/// Clears the alarm even if the test panics half way (RabbitMQ's default
/// relative watermark).
struct RestoreWatermark;

impl Drop for RestoreWatermark {
    fn drop(&mut self) {
        rabbitmqctl_args(&["set_vm_memory_high_watermark", "0.4"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_broker_blocked_fails_fast_and_recovers() {
    let wait = Duration::from_secs(3);
    let options = BusOptions {
        publish_wait: wait,
        ..BusOptions::default()
    };
    let Some(t) = transports_with(Backend::Amqp, "amqp_broker_blocked", 1, options).await else {
        return;
    };
    let bus = t[0].clone();
    let queue = "compute.blocked-host";
    let mut sub = bus.consume(queue).await.unwrap();
    bus.cast(queue, msg("beat", &b"before"[..])).await.unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .unwrap()
        .unwrap();
    d.ack().await.unwrap();

    // The memory alarm: every publisher is blocked.
    let restore = RestoreWatermark;
    tokio::task::spawn_blocking(|| {
        rabbitmqctl_args(&["set_vm_memory_high_watermark", "absolute", "1"])
    })
    .await
    .unwrap();
    // Each publish ends within its bound; once the broker has said
    // `connection.blocked`, at once and saying so.
    let since = Instant::now();
    loop {
        let started = Instant::now();
        let res = bus.cast(queue, msg("beat", &b"during"[..])).await;
        let took = started.elapsed();
        assert!(
            took <= wait + Duration::from_secs(1),
            "a publish took {took:?}: {res:?}"
        );
        match res {
            Err(BusError::Blocked) => break,
            // The publish the alarm met on its way: its outcome unknown.
            Err(BusError::Timeout(_) | BusError::BlockedInFlight) => {}
            other => panic!("while blocked: {other:?}"),
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "never told blocked"
        );
    }
    // From then on at once, the connection kept (not taken for lost).
    let started = Instant::now();
    let res = bus.cast(queue, msg("beat", &b"during"[..])).await;
    assert!(matches!(res, Err(BusError::Blocked)), "{res:?}");
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    let e = bus
        .call(queue, msg("ping", &b""[..]), Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(matches!(e, BusError::Blocked), "{e:?}");
    assert!(e.to_string().contains("connection.blocked"), "{e}");

    // Unblocked: publishes go through again and are delivered.
    tokio::task::spawn_blocking(move || drop(restore))
        .await
        .unwrap();
    let since = Instant::now();
    loop {
        match bus.cast(queue, msg("beat", &b"after"[..])).await {
            Ok(()) => break,
            Err(e) => assert!(since.elapsed() < Duration::from_secs(30), "still: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = tokio::time::timeout_at(deadline.into(), sub.recv())
            .await
            .expect("the message sent after the alarm arrives")
            .unwrap();
        let after = &d.envelope().payload[..] == b"after";
        let _ = d.ack().await;
        if after {
            break;
        }
    }
}
