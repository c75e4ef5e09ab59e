//! Per-project image quotas (Glance's unified limits): images counted at
//! create, uploads under way and bytes held counted at upload; an upload
//! stops at the project's limit and leaves its image queued.

use api_super::image::ImageConfig;
use serde_json::{json, Value};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_quotas_refuse_with_413_and_leave_nothing_half_done() {
    let id = start("image_quota_id", |_| {}).await;
    let (member, _) = token(id.addr(), "demo", MEMBER_PW, Some("demo")).await;
    let (admin, _) = token(id.addr(), "admin", ADMIN_PW, Some("admin")).await;
    let db = testkit::sqlite("image_quota");
    let mut cfg = ImageConfig {
        listen: "127.0.0.1:0".into(),
        filesystem_store_datadir: db.dir.join("store").display().to_string(),
        ..Default::default()
    };
    cfg.database.connection = db.url.clone();
    cfg.quota.image_count_total = 2;
    cfg.quota.image_size_total = 1;
    let img = api_super::serve_image(cfg, id.running.identity.validator.clone())
        .await
        .unwrap();
    let base = format!("http://{}/v2/images", img.addr);
    let http = reqwest::Client::new();
    let create = |token: &str| {
        http.post(&base)
            .header("x-auth-token", token)
            .json(&json!({"disk_format": "raw", "container_format": "bare"}))
            .send()
    };
    let upload = |token: &str, id: &str, n: usize| {
        http.put(format!("{base}/{id}/file"))
            .header("x-auth-token", token)
            .header("content-type", "application/octet-stream")
            .body(vec![7u8; n])
            .send()
    };
    let status = |token: &str, id: &str| {
        let r = http
            .get(format!("{base}/{id}"))
            .header("x-auth-token", token)
            .send();
        async move { r.await.unwrap().json::<Value>().await.unwrap()["status"].clone() }
    };
    let new_id = |r: reqwest::Response| async move {
        let v: Value = r.json().await.unwrap();
        v["id"].as_str().expect("an image id").to_owned()
    };
    let a = new_id(create(&member).await.unwrap()).await;
    let b = new_id(create(&member).await.unwrap()).await;
    // A third image of the project: 413 in Glance's words; another
    // project is not counted with it.
    let r = create(&member).await.unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    let msg = body["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("image_count_total is over limit of 2 due to current usage 2"),
        "{body}"
    );
    assert_eq!(create(&admin).await.unwrap().status(), 201);
    // 600 KiB of the 1 MiB: stored.
    let r = upload(&member, &a, 600 << 10).await.unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    assert_eq!(status(&member, &a).await, "active");
    // Another 600 KiB would pass the limit: stopped at it, 413, the image
    // still queued with no data.
    let r = upload(&member, &b, 600 << 10).await.unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("image_size_total is over limit of 1 MiB"),
        "{body}"
    );
    assert_eq!(status(&member, &b).await, "queued");
    // What fits is taken.
    let r = upload(&member, &b, 400 << 10).await.unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    // Deleting frees both the count and the bytes.
    let r = http
        .delete(format!("{base}/{a}"))
        .header("x-auth-token", &member)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let c = new_id(create(&member).await.unwrap()).await;
    let r = upload(&member, &c, 600 << 10).await.unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
}
