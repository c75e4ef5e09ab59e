//! Secure defaults (issue 32): placement refuses `noauth2` on an address
//! that is not loopback, where anyone who reaches it would be an
//! administrator, unless told so explicitly; on loopback it serves.

use std::process::{Command, Stdio};

#[test]
fn noauth2_on_a_non_loopback_address_exits_with_a_clear_error() {
    let db = testkit::sqlite("noauth_remote_bin");
    let out = Command::new(env!("CARGO_BIN_EXE_placement"))
        .args([
            "--database",
            &db.url,
            "--listen",
            "0.0.0.0:0",
            "--auth-strategy",
            "noauth2",
        ])
        .env("PLACEMENT__TELEMETRY__LOG_FILTER", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run placement");
    assert!(!out.status.success(), "it must not serve: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("noauth2") && err.contains("not a loopback address"),
        "{err}"
    );
}

#[tokio::test]
async fn noauth2_serves_on_loopback_or_when_told_explicitly() {
    let mut cfg = placement::config::PlacementConfig {
        listen: "127.0.0.1:0".into(),
        ..Default::default()
    };
    let db = testkit::sqlite("noauth_remote");
    cfg.database.connection = db.url.clone();
    let r = placement::serve(&cfg, None).await.expect("loopback serves");
    r.task.abort();
    cfg.listen = "0.0.0.0:0".into();
    let e = placement::serve(&cfg, None).await.err().expect("refused");
    assert!(e.to_string().contains("allow_noauth2_remote"), "{e}");
    cfg.allow_noauth2_remote = true;
    let r = placement::serve(&cfg, None).await.expect("told explicitly");
    assert!(!r.addr.ip().is_loopback());
    r.task.abort();
}

/// The identity service's keys and token checks come over https or from
/// this machine: `keystone` with a plain-http `identity_url` on another
/// host is refused before anything is fetched, unless told explicitly.
#[tokio::test]
async fn keystone_over_plain_http_to_another_host_is_refused() {
    let db = testkit::sqlite("keystone_plain_http");
    for strategy in ["keystone", "keystone_remote"] {
        let mut cfg = placement::config::PlacementConfig {
            listen: "127.0.0.1:0".into(),
            auth_strategy: strategy.into(),
            // TEST-NET-1: nothing answers there.
            identity_url: "http://192.0.2.10:5000".into(),
            ..Default::default()
        };
        cfg.database.connection = db.url.clone();
        let e = placement::serve(&cfg, None).await.err().expect("refused");
        let e = e.to_string();
        assert!(
            e.contains("identity_url") && e.contains("allow_plain_http"),
            "{strategy}: {e}"
        );
        // Told explicitly, it goes on to log in (and fails for want of
        // a service user: nothing is reached).
        cfg.allow_plain_http_identity = true;
        let e = placement::serve(&cfg, None).await.err().expect("no user");
        assert!(
            !e.to_string().contains("allow_plain_http"),
            "{strategy}: {e}"
        );
    }
}
