//! Creates being scheduled in the background are bounded: a create that
//! finds no place within a few seconds is refused with a 503 and writes
//! nothing.

use serde_json::json;

use crate::common::json as body;
use crate::compute::{Region, IMAGE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_beyond_the_bound_gets_503_and_writes_nothing() {
    let region = Region::start_with("create_bound", 1, 1, |c| c.max_pending_creates = 1).await;
    let conductor = region.compute.app.conductor().clone();
    assert_eq!(conductor.max_pending_creates(), 1);
    // The only place is taken (as by a create still being scheduled).
    let slot = conductor.reserve_create().await.expect("the free place");
    let create = json!({"server": {"name": "refused", "flavorRef": "1", "imageRef": IMAGE, "networks": "none"}});
    let r = region
        .call(&region.member, "POST", "/v2.1/servers", Some(create))
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    let msg = body(&r)["serviceUnavailable"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(msg.contains("limit of 1 server creates"), "{}", r.body);
    // Nothing was written: no server, no build request.
    let r = region
        .call(&region.member, "GET", "/v2.1/servers", None)
        .await;
    assert_eq!(body(&r)["servers"], json!([]), "{}", r.body);
    // With the place back, creates go through and are built.
    drop(slot);
    let id = region.boot(&region.member, "accepted", "1").await;
    let (s, _) = region.wait(&id, |s| s["status"] == "ACTIVE").await;
    assert_eq!(s["name"], "accepted");
    // The finished create gave its place back.
    let again = conductor.reserve_create().await;
    assert!(again.is_some(), "the place is free again");
    region.stop().await;
}
