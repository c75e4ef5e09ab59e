//! `GET /allocation_candidates` through the real service: providers,
//! inventories, traits and aggregates are created through the API, then
//! candidates are asked for at several microversions.
//!
//! Layout (a small `SharedStorageFixture` with one nested tree):
//! cn1 (VCPU, MEMORY_MB; SSE, SSE2) ─ numa1 ─ pf1 (SRIOV_NET_VF:8)
//! cn2 (VCPU, MEMORY_MB, DISK_GB)
//! ss  (DISK_GB; MISC_SHARES_VIA_AGGREGATE)
//! cn1, cn2 and ss share one aggregate.

use std::net::SocketAddr;

use placement::PlacementConfig;
use serde_json::{json, Value};
use testkit::http::Client;

struct Api {
    client: Client,
}

impl Api {
    fn new(addr: SocketAddr, token: &str) -> Self {
        Self {
            client: Client::new(addr)
                .with_header("x-auth-token", token)
                .with_header("openstack-api-version", "placement 1.0"),
        }
    }

    fn call(&mut self, method: &str, path: &str, mv: &str, body: Option<Value>) -> (u16, Value) {
        self.client.default_headers[1].1 = format!("placement {mv}");
        let body = body.map(|b| b.to_string());
        let r = self
            .client
            .request(method, path, body.as_deref())
            .expect("request");
        let v = if r.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&r.body)
                .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", r.body))
        };
        (r.status, v)
    }

    fn ok(&mut self, method: &str, path: &str, mv: &str, body: Option<Value>) -> Value {
        let (status, v) = self.call(method, path, mv, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {v}"
        );
        v
    }

    fn provider(&mut self, name: &str, parent: Option<&str>) -> String {
        let mut body = json!({ "name": name });
        if let Some(p) = parent {
            body["parent_provider_uuid"] = json!(p);
        }
        let v = self.ok("POST", "/resource_providers", "1.20", Some(body));
        v["uuid"].as_str().expect("uuid").to_owned()
    }

    fn generation(&mut self, rp: &str) -> i64 {
        let v = self.ok("GET", &format!("/resource_providers/{rp}"), "1.20", None);
        v["generation"].as_i64().expect("generation")
    }

    fn inventories(&mut self, rp: &str, inventories: Value) {
        let g = self.generation(rp);
        self.ok(
            "PUT",
            &format!("/resource_providers/{rp}/inventories"),
            "1.20",
            Some(json!({ "resource_provider_generation": g, "inventories": inventories })),
        );
    }

    fn traits(&mut self, rp: &str, traits: &[&str]) {
        let g = self.generation(rp);
        self.ok(
            "PUT",
            &format!("/resource_providers/{rp}/traits"),
            "1.20",
            Some(json!({ "resource_provider_generation": g, "traits": traits })),
        );
    }

    fn aggregates(&mut self, rp: &str, aggs: &[&str]) {
        let g = self.generation(rp);
        self.ok(
            "PUT",
            &format!("/resource_providers/{rp}/aggregates"),
            "1.20",
            Some(json!({ "resource_provider_generation": g, "aggregates": aggs })),
        );
    }

    fn candidates(&mut self, query: &str, mv: &str) -> Value {
        self.ok("GET", &format!("/allocation_candidates?{query}"), mv, None)
    }

    /// `(status, detail, code)` of a failing candidates request.
    fn error(&mut self, query: &str, mv: &str) -> (u16, String, String) {
        let (status, v) = self.call("GET", &format!("/allocation_candidates?{query}"), mv, None);
        assert!(status >= 400, "{query} at {mv} answered {status}: {v}");
        let e = &v["errors"][0];
        (
            status,
            e["detail"].as_str().unwrap_or_default().to_owned(),
            e["code"].as_str().unwrap_or_default().to_owned(),
        )
    }
}

struct Fixture {
    cn1: String,
    cn2: String,
    ss: String,
    numa1: String,
    pf1: String,
}

fn seed(api: &mut Api) -> Fixture {
    let agg = "5d0c5b3e-2c8f-4b61-9d2f-6a1e7f4f0a11";
    let cn1 = api.provider("cn1", None);
    let cn2 = api.provider("cn2", None);
    let ss = api.provider("ss", None);
    let numa1 = api.provider("numa1", Some(&cn1));
    let pf1 = api.provider("pf1", Some(&numa1));
    let compute = json!({
        "VCPU": { "total": 24, "allocation_ratio": 16.0 },
        "MEMORY_MB": { "total": 131072, "allocation_ratio": 1.5 },
    });
    api.inventories(&cn1, compute.clone());
    let mut cn2_inv = compute;
    cn2_inv["DISK_GB"] = json!({ "total": 2000, "reserved": 100 });
    api.inventories(&cn2, cn2_inv);
    api.inventories(
        &ss,
        json!({ "DISK_GB": { "total": 2000, "reserved": 100 } }),
    );
    api.inventories(&pf1, json!({ "SRIOV_NET_VF": { "total": 8 } }));
    api.traits(&cn1, &["HW_CPU_X86_SSE", "HW_CPU_X86_SSE2"]);
    api.traits(&ss, &["MISC_SHARES_VIA_AGGREGATE"]);
    for rp in [&cn1, &cn2, &ss] {
        api.aggregates(rp, &[agg]);
    }
    Fixture {
        cn1,
        cn2,
        ss,
        numa1,
        pf1,
    }
}

/// Each candidate as a sorted list of `provider:CLASS=amount`, from the
/// dict form (1.12+).
fn describe(v: &Value, names: &[(&str, &str)]) -> Vec<Vec<String>> {
    let name = |u: &str| {
        names
            .iter()
            .find(|(_, x)| *x == u)
            .map(|(n, _)| (*n).to_owned())
            .unwrap_or_else(|| u.to_owned())
    };
    let mut out: Vec<Vec<String>> = v["allocation_requests"]
        .as_array()
        .expect("allocation_requests")
        .iter()
        .map(|r| {
            let mut items: Vec<String> = r["allocations"]
                .as_object()
                .expect("dict form")
                .iter()
                .flat_map(|(rp, a)| {
                    let rp = name(rp);
                    a["resources"]
                        .as_object()
                        .expect("resources")
                        .iter()
                        .map(move |(rc, n)| format!("{rp}:{rc}={n}"))
                        .collect::<Vec<_>>()
                })
                .collect();
            items.sort();
            items
        })
        .collect();
    out.sort();
    out
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

fn run(addr: SocketAddr) {
    let mut api = Api::new(addr, "admin");
    let f = seed(&mut api);
    let names = [
        ("cn1", f.cn1.as_str()),
        ("cn2", f.cn2.as_str()),
        ("ss", f.ss.as_str()),
        ("numa1", f.numa1.as_str()),
        ("pf1", f.pf1.as_str()),
    ];
    const VMD: &str = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100";

    // Before 1.10 there is no such resource.
    let (status, _, _) = api.error(VMD, "1.9");
    assert_eq!(status, 404);

    // 1.10: list form, only providers used, only requested classes.
    let v = api.candidates(VMD, "1.10");
    let reqs = v["allocation_requests"].as_array().unwrap();
    assert_eq!(reqs.len(), 3);
    let first = &reqs[0]["allocations"];
    assert!(first.is_array(), "list form before 1.12: {first}");
    assert!(first[0]["resource_provider"]["uuid"].is_string());
    let mut sums = keys(&v["provider_summaries"]);
    let mut want = vec![f.cn1.clone(), f.cn2.clone(), f.ss.clone()];
    want.sort();
    sums.sort();
    assert_eq!(sums, want);
    let cn2 = &v["provider_summaries"][&f.cn2];
    assert_eq!(keys(cn2), vec!["resources"]);
    assert_eq!(
        cn2["resources"]["DISK_GB"],
        json!({"capacity": 1900, "used": 0})
    );
    assert_eq!(
        cn2["resources"]["VCPU"],
        json!({"capacity": 384, "used": 0})
    );

    // 1.12: dict form, same candidates.
    let v = api.candidates(VMD, "1.12");
    assert_eq!(
        describe(&v, &names),
        vec![
            vec!["cn1:MEMORY_MB=1024", "cn1:VCPU=1", "ss:DISK_GB=100"],
            vec!["cn2:DISK_GB=100", "cn2:MEMORY_MB=1024", "cn2:VCPU=1"],
            vec!["cn2:MEMORY_MB=1024", "cn2:VCPU=1", "ss:DISK_GB=100"],
        ]
    );
    assert!(v["allocation_requests"][0].get("mappings").is_none());

    // 1.16: limit; repeated limit takes the first.
    assert_eq!(
        api.candidates(&format!("{VMD}&limit=1"), "1.16")["allocation_requests"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        api.candidates(&format!("{VMD}&limit=10&limit=1"), "1.16")["allocation_requests"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // 1.17: required traits, traits in summaries.
    let v = api.candidates(&format!("{VMD}&required=HW_CPU_X86_SSE"), "1.17");
    assert_eq!(
        describe(&v, &names),
        vec![vec!["cn1:MEMORY_MB=1024", "cn1:VCPU=1", "ss:DISK_GB=100"]]
    );
    let mut traits: Vec<&str> = v["provider_summaries"][&f.cn1]["traits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    traits.sort();
    assert_eq!(traits, vec!["HW_CPU_X86_SSE", "HW_CPU_X86_SSE2"]);

    // 1.22: forbidden traits.
    let v = api.candidates(&format!("{VMD}&required=!HW_CPU_X86_SSE"), "1.22");
    assert_eq!(describe(&v, &names).len(), 2);

    // 1.26 shows requested classes only, 1.27 every class.
    let v = api.candidates("resources=VCPU:1", "1.26");
    assert_eq!(
        keys(&v["provider_summaries"][&f.cn2]["resources"]),
        vec!["VCPU"]
    );
    let v = api.candidates("resources=VCPU:1", "1.27");
    assert_eq!(
        keys(&v["provider_summaries"][&f.cn2]["resources"]),
        vec!["DISK_GB", "MEMORY_MB", "VCPU"]
    );

    // Nested: blind before 1.29, whole trees in the summaries from 1.29.
    let q = "resources=VCPU:1,SRIOV_NET_VF:4";
    let v = api.candidates(q, "1.28");
    assert!(v["allocation_requests"].as_array().unwrap().is_empty());
    let v = api.candidates(q, "1.29");
    assert_eq!(
        describe(&v, &names),
        vec![vec!["cn1:VCPU=1", "pf1:SRIOV_NET_VF=4"]]
    );
    let pf = &v["provider_summaries"][&f.pf1];
    assert_eq!(pf["parent_provider_uuid"], json!(f.numa1));
    assert_eq!(pf["root_provider_uuid"], json!(f.cn1));
    assert_eq!(
        v["provider_summaries"][&f.cn1]["parent_provider_uuid"],
        Value::Null
    );
    assert_eq!(v["provider_summaries"].as_object().unwrap().len(), 3);

    // 1.31 in_tree; 1.34 mappings with a named (1.33) suffix.
    let v = api.candidates(&format!("{VMD}&in_tree={}", f.cn2), "1.31");
    assert_eq!(
        describe(&v, &names),
        vec![vec!["cn2:DISK_GB=100", "cn2:MEMORY_MB=1024", "cn2:VCPU=1"]]
    );
    let v = api.candidates("resources=VCPU:1&resources_NET=SRIOV_NET_VF:2", "1.34");
    let m = &v["allocation_requests"][0]["mappings"];
    assert_eq!(m[""], json!([f.cn1]));
    assert_eq!(m["_NET"], json!([f.pf1]));

    // 1.35 root_required, 1.36 same_subtree with a resourceless group,
    // 1.39 any-traits.
    let v = api.candidates(&format!("{VMD}&root_required=!HW_CPU_X86_SSE"), "1.35");
    assert_eq!(describe(&v, &names).len(), 2);
    let v = api.candidates(
        "resources_CPU=VCPU:1&required_NUMA=HW_CPU_X86_SSE&same_subtree=_CPU,_NUMA&group_policy=none",
        "1.36",
    );
    assert_eq!(describe(&v, &names), vec![vec!["cn1:VCPU=1"]]);
    let v = api.candidates(
        &format!("{VMD}&required=in:HW_CPU_X86_SSE,HW_CPU_X86_AVX"),
        "1.39",
    );
    assert_eq!(describe(&v, &names).len(), 1);

    // Errors.
    let (s, d, _) = api.error("resources=MCPU:99", "1.10");
    assert_eq!(s, 400);
    assert!(
        d.contains("Invalid resource class in resources parameter"),
        "{d}"
    );
    let (s, d, _) = api.error(&format!("{VMD}&required=CUSTOM_NOPE"), "1.17");
    assert_eq!(s, 400);
    assert!(d.contains("No such trait(s)"), "{d}");
    let (s, d, _) = api.error("", "1.10");
    assert_eq!(s, 400);
    assert!(d.contains("'resources' is a required property"), "{d}");
    let (_, d, _) = api.error(&format!("{VMD}&limit=cow"), "1.16");
    assert!(d.contains("Failed validating 'pattern'"), "{d}");
    let (_, d, _) = api.error(&format!("{VMD}&limit=5"), "1.15");
    assert!(d.contains("'limit' was unexpected"), "{d}");
    let (_, d, _) = api.error("resources1=VCPU:1&resources2=VCPU:1", "1.25");
    assert!(d.contains("\"group_policy\" parameter is required"), "{d}");
    let (_, d, _) = api.error("resources=", "1.10");
    assert!(d.contains("Got: empty string."), "{d}");
    let (_, d, _) = api.error(&format!("{VMD}&member_of=not-a-uuid"), "1.24");
    assert!(
        d.contains("Expected 'member_of' parameter to contain valid UUID(s)."),
        "{d}"
    );
    let (_, d, code) = api.error(
        "resources1=VCPU:1&required2=HW_CPU_X86_SSE&group_policy=none",
        "1.36",
    );
    assert!(d.contains("Resourceless suffixed group request"), "{d}");
    assert_eq!(code, "placement.query.bad_value");
    let (_, d, code) = api.error("member_of1=5d0c5b3e-2c8f-4b61-9d2f-6a1e7f4f0a11", "1.36");
    assert!(d.contains("There must be at least one resources"), "{d}");
    assert_eq!(code, "placement.query.missing_value");
    let (_, d, code) = api.error(
        "resources=VCPU:1&root_required=HW_CPU_X86_SSE&root_required=!HW_CPU_X86_SSE2",
        "1.35",
    );
    assert!(d.contains("may be specified only once"), "{d}");
    assert_eq!(code, "placement.query.duplicate_key");

    // Policy: an administrator's API.
    let mut user = Api::new(addr, "alice:demo");
    let (status, _) = user.call(
        "GET",
        &format!("/allocation_candidates?{VMD}"),
        "1.10",
        None,
    );
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_through_the_api() {
    let db = testkit::sqlite("candidates_through_the_api");
    let mut cfg = PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        ..Default::default()
    };
    cfg.database.connection = db.url.clone();
    let running = placement::serve(&cfg, None).await.expect("serve");
    let addr = running.addr;
    tokio::task::spawn_blocking(move || run(addr))
        .await
        .expect("client thread");
    running.task.abort();
}
