//! Placement enforces its own policy file, as upstream: the defaults keep
//! every API an administrator's or a service's, and a rule in the file
//! opens one API without opening the others. A file that does not parse
//! stops the start with the reason.

use serde_json::json;

async fn start(policy_file: &str, name: &str) -> (placement::Running, testkit::SqliteDb) {
    let db = testkit::sqlite(name);
    let mut cfg = placement::config::PlacementConfig {
        listen: "127.0.0.1:0".into(),
        policy_file: policy_file.to_owned(),
        ..Default::default()
    };
    cfg.database.connection = db.url.clone();
    (
        placement::serve(&cfg, None)
            .await
            .expect("placement starts"),
        db,
    )
}

/// `method path` as `token` (noauth2: `user:project`), its status.
async fn call(r: &placement::Running, token: &str, method: &str, path: &str) -> u16 {
    let (addr, token, method, path) =
        (r.addr, token.to_owned(), method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        let body = json!({"name": format!("rp-{}", uuid::Uuid::new_v4())}).to_string();
        let body = (method == "POST").then_some(body.as_str());
        testkit::http::Client::new(addr)
            .with_header("x-auth-token", &token)
            .with_header("openstack-api-version", "placement 1.39")
            .request(&method, &path, body)
            .unwrap()
            .status
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_policy_file_opens_one_api_and_the_defaults_stay_closed() {
    // The defaults: a plain user is refused, the administrator served.
    let (r, _db) = start("", "policy_defaults").await;
    assert_eq!(
        call(&r, "alice:p1", "GET", "/resource_providers").await,
        403
    );
    assert_eq!(call(&r, "admin", "GET", "/resource_providers").await, 200);
    r.task.abort();

    let dir = testkit::temp_dir("placement_policy");
    let file = dir.join("policy.yaml");
    std::fs::write(
        &file,
        "# readers may list providers\n\"placement:resource_providers:list\": \"role:reader\"\n",
    )
    .unwrap();
    let (r, _db) = start(&file.display().to_string(), "policy_file").await;
    assert_eq!(
        call(&r, "alice:p1", "GET", "/resource_providers").await,
        200
    );
    // Only that API: creating is still an administrator's.
    assert_eq!(
        call(&r, "alice:p1", "POST", "/resource_providers").await,
        403
    );
    assert_eq!(call(&r, "admin", "POST", "/resource_providers").await, 200);
    r.task.abort();

    // A rule that does not parse: no start, and the reason.
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "\"placement:resource_providers:list\": \"role:a and (\"\n",
    )
    .unwrap();
    let db = testkit::sqlite("policy_bad");
    let mut cfg = placement::config::PlacementConfig {
        listen: "127.0.0.1:0".into(),
        policy_file: bad.display().to_string(),
        ..Default::default()
    };
    cfg.database.connection = db.url.clone();
    let e = placement::serve(&cfg, None).await.err().expect("refused");
    let e = format!("{e:#}");
    assert!(
        e.contains("policy_file") && e.contains("unexpected end of rule"),
        "{e}"
    );
}
