//! Two real placement processes over one PostgreSQL database, many
//! concurrent claimers: capacity is never exceeded, and every 409 is a real
//! conflict (a capacity refusal only once the provider is truly full).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use testkit::http::Client;

/// A placement process; killed on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn start(db: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_placement"))
        .args([
            "--database",
            db,
            "--listen",
            "127.0.0.1:0",
            "--auth-strategy",
            "noauth2",
        ])
        .env("PLACEMENT__TELEMETRY__LOG_FILTER", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start placement");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("read address");
    let addr = line
        .trim()
        .strip_prefix("placement listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .expect("address");
    Server { child, addr }
}

fn client(addr: SocketAddr) -> Client {
    Client::new(addr)
        .with_header("x-auth-token", "admin")
        .with_header("openstack-api-version", "placement 1.28")
}

fn uuid() -> String {
    fabric::ids::ConsumerUuid::new_random().to_string()
}

#[test]
fn two_processes_never_over_allocate() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(testkit::postgres("placement_two_processes")) else {
        return;
    };
    let a = start(&db.url);
    let b = start(&db.url);
    const CAPACITY: usize = 40;

    let rp = uuid();
    let mut ca = client(a.addr);
    let r = ca
        .request(
            "POST",
            "/resource_providers",
            Some(&format!(r#"{{"name": "cn1", "uuid": "{rp}"}}"#)),
        )
        .unwrap();
    // At 1.20+ the new provider comes back with 200.
    assert_eq!(r.status, 200, "{}", r.body);
    // The inventory is set through the other process, with the generation
    // the first one created.
    let mut cb = client(b.addr);
    let r = cb
        .request(
            "PUT",
            &format!("/resource_providers/{rp}/inventories"),
            Some(&format!(
                r#"{{"resource_provider_generation": 0, "inventories": {{"VCPU": {{"total": {CAPACITY}}}}}}}"#
            )),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // A stale generation is refused by either process.
    let r = ca
        .request(
            "PUT",
            &format!("/resource_providers/{rp}/inventories"),
            Some(r#"{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 1}}}"#),
        )
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.body.contains("placement.concurrent_update") || r.body.contains("generation conflict"),
        "{}",
        r.body
    );

    let successes = Arc::new(AtomicUsize::new(0));
    let capacity_refusals = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let addr = if i % 2 == 0 { a.addr } else { b.addr };
            let (rp, successes, capacity_refusals, retries) =
                (rp.clone(), successes.clone(), capacity_refusals.clone(), retries.clone());
            std::thread::spawn(move || {
                let mut c = client(addr);
                let body = format!(
                    r#"{{"allocations": {{"{rp}": {{"resources": {{"VCPU": 1}}}}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}}"#
                );
                for _ in 0..100 {
                    let r = c.request("PUT", &format!("/allocations/{}", uuid()), Some(&body)).unwrap();
                    match r.status {
                        204 => {
                            successes.fetch_add(1, Ordering::SeqCst);
                        }
                        409 if r.body.contains("exceed the capacity") => {
                            // Usage only grows in this test: a true refusal
                            // means the provider is full right now.
                            let u = c.request("GET", &format!("/resource_providers/{rp}/usages"), None).unwrap();
                            let v: serde_json::Value = serde_json::from_str(&u.body).unwrap();
                            assert_eq!(v["usages"]["VCPU"], CAPACITY, "refused while not full: {}", r.body);
                            capacity_refusals.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        409 => {
                            assert!(r.body.contains("placement.concurrent_update") || r.body.contains("conflict"), "{}", r.body);
                            retries.fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("unexpected {other}: {}", r.body),
                    }
                }
                panic!("a claimer never saw the provider full");
            })
        })
        .collect();
    for t in threads {
        t.join().expect("claimer thread");
    }
    assert_eq!(successes.load(Ordering::SeqCst), CAPACITY);
    assert_eq!(capacity_refusals.load(Ordering::SeqCst), 16);
    for c in [&mut ca, &mut cb] {
        let u = c
            .request("GET", &format!("/resource_providers/{rp}/usages"), None)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&u.body).unwrap();
        assert_eq!(v["usages"]["VCPU"], CAPACITY);
        let allocs = c
            .request(
                "GET",
                &format!("/resource_providers/{rp}/allocations"),
                None,
            )
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&allocs.body).unwrap();
        assert_eq!(v["allocations"].as_object().unwrap().len(), CAPACITY);
    }
    eprintln!(
        "retries after concurrent updates: {}",
        retries.load(Ordering::SeqCst)
    );
}

/// Polls `path` on `addr` until `done` holds for the parsed body, for at
/// most 10 s; the last body when it never does.
fn eventually(
    addr: SocketAddr,
    path: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> Result<std::time::Duration, String> {
    let started = std::time::Instant::now();
    let mut c = client(addr).with_header("openstack-api-version", "placement 1.39");
    loop {
        let r = c.request("GET", path, None).unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        if done(&v) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            return Err(r.body);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn candidates(v: &serde_json::Value) -> usize {
    v["allocation_requests"].as_array().map_or(0, Vec::len)
}

/// What one process writes, the other's in-memory index (allocation
/// candidates) reflects within seconds: new providers, claims, traits,
/// deletions — also after its LISTEN connection was killed.
#[test]
fn index_changes_reach_the_other_process() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(testkit::postgres("placement_index_follow")) else {
        return;
    };
    let a = start(&db.url);
    let b = start(&db.url);
    let mut ca = client(a.addr).with_header("openstack-api-version", "placement 1.39");
    let rp = uuid();
    let r = ca
        .request(
            "POST",
            "/resource_providers",
            Some(&format!(r#"{{"name": "follow1", "uuid": "{rp}"}}"#)),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = ca
        .request(
            "PUT",
            &format!("/resource_providers/{rp}/inventories"),
            Some(r#"{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 2}}}"#),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);

    // A new provider with inventory.
    let two = "/allocation_candidates?resources=VCPU:2";
    let took = eventually(b.addr, two, |v| candidates(v) == 1).expect("B never saw the provider");
    eprintln!("new provider seen by the other process after {took:?}");

    // A claim of everything: no candidate left on B.
    let consumer = uuid();
    let r = ca
        .request(
            "PUT",
            &format!("/allocations/{consumer}"),
            Some(&format!(
                r#"{{"allocations": {{"{rp}": {{"resources": {{"VCPU": 2}}}}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}}"#
            )),
        )
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.body);
    let one = "/allocation_candidates?resources=VCPU:1";
    eventually(b.addr, one, |v| candidates(v) == 0).expect("B never saw the claim");

    // Freed again, and a trait.
    let r = ca
        .request("DELETE", &format!("/allocations/{consumer}"), None)
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.body);
    eventually(b.addr, one, |v| candidates(v) == 1).expect("B never saw the release");
    let r = ca.request("PUT", "/traits/CUSTOM_FOLLOW", None).unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    let gen = ca
        .request("GET", &format!("/resource_providers/{rp}"), None)
        .unwrap();
    let gen: serde_json::Value = serde_json::from_str(&gen.body).unwrap();
    let r = ca
        .request(
            "PUT",
            &format!("/resource_providers/{rp}/traits"),
            Some(&format!(
                r#"{{"resource_provider_generation": {}, "traits": ["CUSTOM_FOLLOW"]}}"#,
                gen["generation"]
            )),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let traited = "/allocation_candidates?resources=VCPU:1&required=CUSTOM_FOLLOW";
    eventually(b.addr, traited, |v| candidates(v) == 1).expect("B never saw the trait");

    // Kill every LISTEN connection on this database, then change again:
    // the follower reconnects and catches up.
    let killed: i64 = rt.block_on(async {
        let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
        sqlx::query_scalar(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    });
    assert!(
        killed >= 2,
        "expected both processes' LISTEN connections, killed {killed}"
    );
    let r = ca
        .request("DELETE", &format!("/resource_providers/{rp}"), None)
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.body);
    eventually(b.addr, one, |v| candidates(v) == 0)
        .expect("B never saw the deletion after its LISTEN connection was killed");
}
