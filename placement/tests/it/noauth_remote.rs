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
