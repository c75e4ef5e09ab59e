//! Message-bus throughput: casts and call round trips per second, in-process
//! and over RabbitMQ (skipped with a message when RabbitMQ is unreachable).
//!
//! - `cast`: one confirmed cast at a time (latency bound).
//! - `cast_x64`: 64 casts in flight at once (throughput).
//! - `call`: one request/reply round trip at a time.
//! - `call_x64`: 64 calls in flight at once.
//!
//! A consumer on the other side acks every cast and echoes every call.
//! Run: `cargo bench -p fabric --bench bus`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fabric::bus::{self, Transport};
use fabric::wire::Envelope;
use futures_util::future::join_all;

const CAST_QUEUE: &str = "compute.bench-host";
const CALL_QUEUE: &str = "conductor.bench";
const FANOUT: usize = 64;

fn envelope() -> Envelope {
    Envelope::new("bench")
        .with_request_ids("req-bench", "req-bench-global")
        .with_payload(vec![7u8; 256])
}

async fn start_peer(server: &Arc<dyn Transport>) {
    let mut casts = server.consume(CAST_QUEUE).await.expect("consume casts");
    tokio::spawn(async move {
        while let Some(d) = casts.recv().await {
            let _ = d.ack().await;
        }
    });
    let mut calls = server.consume(CALL_QUEUE).await.expect("consume calls");
    tokio::spawn(async move {
        while let Some(d) = calls.recv().await {
            let reply = d.envelope().reply(d.envelope().payload.clone());
            let _ = d.reply(reply).await;
        }
    });
}

fn bench_bus(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut backends = vec![("inproc", "inproc://bench".to_owned())];
    match testkit::rabbitmq("bench_bus") {
        Some(url) => backends.push(("amqp", url)),
        None => eprintln!("bus bench: RabbitMQ unreachable, benchmarking in-process only"),
    }

    let mut group = c.benchmark_group("bus");
    for (label, url) in backends {
        let (client, server) = rt.block_on(async {
            let client = bus::connect(&url).await.expect("connect client");
            let server = bus::connect(&url).await.expect("connect server");
            start_peer(&server).await;
            (client, server)
        });
        let timeout = Duration::from_secs(10);

        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("{label}/cast"), |b| {
            b.to_async(&rt)
                .iter(|| async { client.cast(CAST_QUEUE, envelope()).await.expect("cast") })
        });
        group.bench_function(format!("{label}/call"), |b| {
            b.to_async(&rt).iter(|| async {
                client
                    .call(CALL_QUEUE, envelope(), timeout)
                    .await
                    .expect("call")
            })
        });

        group.throughput(Throughput::Elements(FANOUT as u64));
        group.bench_function(format!("{label}/cast_x{FANOUT}"), |b| {
            b.to_async(&rt).iter(|| async {
                let casts = (0..FANOUT).map(|_| client.cast(CAST_QUEUE, envelope()));
                for r in join_all(casts).await {
                    r.expect("cast");
                }
            })
        });
        group.bench_function(format!("{label}/call_x{FANOUT}"), |b| {
            b.to_async(&rt).iter(|| async {
                let calls = (0..FANOUT).map(|_| client.call(CALL_QUEUE, envelope(), timeout));
                for r in join_all(calls).await {
                    r.expect("call");
                }
            })
        });

        rt.block_on(async {
            client.close().await;
            server.close().await;
        });
    }
    group.finish();
}

criterion_group!(benches, bench_bus);
criterion_main!(benches);
