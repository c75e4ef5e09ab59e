//! `randomize_allocation_candidates`: with it on, limited
//! `GET /allocation_candidates` queries sample the whole fleet; with it
//! off, they return the same first providers every time.

use std::collections::BTreeSet;

use testkit::http::Client;

const PROVIDERS: usize = 100;
const LIMIT: usize = 5;
const QUERIES: usize = 20;

/// Starts placement with `randomize`, creates [`PROVIDERS`] compute nodes
/// and runs [`QUERIES`] limited candidate queries: the providers created
/// (in order) and each answer's providers (in answer order).
async fn sample(name: &str, randomize: bool) -> (Vec<String>, Vec<Vec<String>>) {
    let db = testkit::sqlite(name);
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 1,
        },
        randomize_allocation_candidates: randomize,
        ..Default::default()
    };
    let running = placement::serve(&cfg, None).await.expect("placement");
    let addr = running.addr;
    let out = tokio::task::spawn_blocking(move || {
        let mut c = Client::new(addr)
            .with_header("x-auth-token", "admin")
            .with_header("openstack-api-version", "placement 1.36");
        let mut created = Vec::new();
        for i in 0..PROVIDERS {
            let rp = fabric::ids::ProviderUuid::new_random().to_string();
            let r = c
                .request(
                    "POST",
                    "/resource_providers",
                    Some(&format!(r#"{{"name": "cn{i}", "uuid": "{rp}"}}"#)),
                )
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            let inv = r#"{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}}"#;
            let r = c
                .request("PUT", &format!("/resource_providers/{rp}/inventories"), Some(inv))
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            created.push(rp);
        }
        let mut answers = Vec::new();
        for _ in 0..QUERIES {
            let r = c
                .request(
                    "GET",
                    &format!("/allocation_candidates?resources=VCPU:1,MEMORY_MB:512&limit={LIMIT}"),
                    None,
                )
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            let reqs = v["allocation_requests"].as_array().unwrap();
            assert_eq!(reqs.len(), LIMIT, "{}", r.body);
            let rps: Vec<String> = reqs
                .iter()
                .map(|a| {
                    let m = a["allocations"].as_object().unwrap();
                    assert_eq!(m.len(), 1);
                    m.keys().next().unwrap().clone()
                })
                .collect();
            // The summaries are those of the returned providers only.
            let mut summarized: Vec<String> = v["provider_summaries"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            summarized.sort();
            let mut sorted = rps.clone();
            sorted.sort();
            assert_eq!(summarized, sorted);
            answers.push(rps);
        }
        (created, answers)
    })
    .await
    .unwrap();
    running.task.abort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_limited_queries_sample_the_whole_fleet() {
    let (created, answers) = sample("placement_randomize_on", true).await;
    let known: BTreeSet<&String> = created.iter().collect();
    let mut seen = BTreeSet::new();
    for a in &answers {
        let distinct: BTreeSet<&String> = a.iter().collect();
        assert_eq!(distinct.len(), LIMIT, "no provider twice in one answer");
        for rp in a {
            assert!(known.contains(rp), "{rp} is one of ours");
            seen.insert(rp.clone());
        }
    }
    let different: BTreeSet<&Vec<String>> = answers.iter().collect();
    assert!(
        different.len() > QUERIES / 2,
        "answers differ from query to query: {} distinct of {QUERIES}",
        different.len()
    );
    // 20 samples of 5 out of 100 cover ~64 providers on average; the
    // deterministic order would cover exactly 5.
    assert!(
        seen.len() >= 6 * LIMIT,
        "{} providers seen over {QUERIES} queries of {LIMIT}",
        seen.len()
    );
    // Not just the first providers: some from the last half of the fleet.
    assert!(created[PROVIDERS / 2..].iter().any(|rp| seen.contains(rp)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_randomize_limited_queries_return_the_first_providers() {
    let (created, answers) = sample("placement_randomize_off", false).await;
    for a in &answers {
        assert_eq!(
            a,
            &created[..LIMIT],
            "stable order: the first {LIMIT} created"
        );
    }
}
