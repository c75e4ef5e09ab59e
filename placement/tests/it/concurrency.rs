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
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(db: &str) -> Server {
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
