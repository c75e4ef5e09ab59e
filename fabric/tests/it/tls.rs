//! The bus over `amqps://`: a TLS-terminating proxy with a test CA in
//! front of the real RabbitMQ. A process that does not trust the CA
//! refuses the broker; once it trusts it (`http::trust_ca_file`, the
//! services' `tls_ca_file`), calls and casts go through TLS.

use std::time::Duration;

use fabric::bus;
use testkit::pki::{TestPki, TlsProxy};

use crate::bus::msg;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_needs_the_trusted_ca_then_carries_casts() {
    let Some(url) = testkit::rabbitmq("bus_amqps") else {
        return;
    };
    let pki = TestPki::new();
    let files = pki.write_to(&testkit::temp_dir("bus_amqps_pki"));
    let proxy = TlsProxy::start("127.0.0.1:5672".parse().unwrap(), pki.acceptor()).await;
    let amqps = url.replacen("amqp://", "amqps://", 1).replacen(
        "127.0.0.1:5672",
        &proxy.addr.to_string(),
        1,
    );
    assert!(amqps.starts_with("amqps://") && amqps.contains(&proxy.addr.to_string()));

    // The system's roots only: the broker's certificate is refused.
    let refused = bus::connect(&amqps).await;
    assert!(refused.is_err(), "connected without trusting the CA");
    assert_eq!(proxy.handshakes(), 0);

    fabric::http::trust_ca_file(&files.ca_file).unwrap();
    let bus = bus::connect(&amqps).await.expect("connect over amqps");
    assert!(proxy.handshakes() >= 1);
    let queue = "compute.amqps-host";
    let mut sub = bus.consume(queue).await.unwrap();
    bus.cast(queue, msg("beat", &b"over tls"[..]))
        .await
        .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .expect("delivered in time")
        .expect("a delivery");
    assert_eq!(&d.envelope().payload[..], b"over tls");
    d.ack().await.unwrap();
    bus.close().await;
}
