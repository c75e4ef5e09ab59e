//! The scheduler's in-process placement calls (`region::local_placement`)
//! answer as the HTTP client does against the same placement service:
//! the same candidates and summaries, a claim readable over HTTP, a
//! conflict as `false` (capacity short, consumer present), an unknown
//! resource class as placement's 400, the undo of a claim removing it (and
//! absent allocations fine).

use std::collections::BTreeMap;

use api_super::scheduler::placement::{
    AllocationRequest, Candidates, HttpPlacement, PlacementError, Resources, SchedulerPlacement,
};
use region::local_placement::LocalPlacement;
use region::{Region, RegionConfig};

/// Candidates in a comparable order (placement shuffles them).
fn sorted(c: &Candidates) -> (Vec<String>, Vec<String>) {
    let mut reqs: Vec<String> = c
        .allocation_requests
        .iter()
        .map(|r| format!("{:?}", r.allocations))
        .collect();
    reqs.sort();
    let sums = c
        .provider_summaries
        .iter()
        .map(|(rp, s)| format!("{rp} {:?}", s.resources))
        .collect();
    (reqs, sums)
}

/// `GET /allocations/{consumer}` over HTTP (1.36).
async fn allocations(url: &str, token: &str, consumer: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("{url}/allocations/{consumer}"))
        .header("X-Auth-Token", token)
        .header("OpenStack-API-Version", "placement 1.36")
        .send()
        .await
        .expect("read")
        .json()
        .await
        .expect("json")
}

fn resources(pairs: &[(&str, i64)]) -> Resources {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_calls_answer_as_the_http_client() {
    let dir = testkit::temp_dir("local_placement");
    let mut cfg = RegionConfig::default();
    cfg.region.data_dir = dir.clone();
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 3;
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let url = format!("http://{}", region.placement.addr);
    let http = HttpPlacement::with_token(&url, region.service_token.clone()).expect("client");
    let local = LocalPlacement::new(region.placement.placement.clone(), true, http.clone());

    // Candidates: every host, the same summaries both ways.
    let want = resources(&[("VCPU", 1), ("MEMORY_MB", 512), ("DISK_GB", 1)]);
    let over_http = http
        .candidates(&want, 100, None)
        .await
        .expect("http candidates");
    let in_process = local
        .candidates(&want, 100, None)
        .await
        .expect("local candidates");
    assert_eq!(in_process.allocation_requests.len(), 3);
    assert_eq!(sorted(&in_process), sorted(&over_http));
    // A limit is a sample of that size.
    assert_eq!(
        local
            .candidates(&want, 2, None)
            .await
            .expect("sample")
            .allocation_requests
            .len(),
        2
    );

    // `in_tree`: only that provider's tree, the same both ways; a
    // malformed uuid is placement's 400 both ways.
    let rp = in_process.allocation_requests[2]
        .allocations
        .keys()
        .next()
        .unwrap()
        .clone();
    let tree_http = http
        .candidates(&want, 100, Some(&rp))
        .await
        .expect("http in_tree");
    let tree_local = local
        .candidates(&want, 100, Some(&rp))
        .await
        .expect("local in_tree");
    assert_eq!(tree_local.allocation_requests.len(), 1);
    assert!(tree_local.allocation_requests[0]
        .allocations
        .contains_key(&rp));
    assert_eq!(sorted(&tree_local), sorted(&tree_http));
    for r in [
        local.candidates(&want, 10, Some("nope")).await,
        http.candidates(&want, 10, Some("nope")).await,
    ] {
        assert!(
            matches!(r, Err(PlacementError::Status { status: 400, .. })),
            "{r:?}"
        );
    }

    // An unknown class: placement's 400, as over HTTP.
    let bad = resources(&[("NO_SUCH_CLASS", 1)]);
    for r in [
        local.candidates(&bad, 10, None).await,
        http.candidates(&bad, 10, None).await,
    ] {
        match r {
            Err(PlacementError::Status {
                status: 400, body, ..
            }) => {
                assert!(
                    body.contains("No such resource class NO_SUCH_CLASS"),
                    "{body}"
                )
            }
            other => panic!("unknown class answered {other:?}"),
        }
    }

    // A claim, read back over HTTP; the same consumer again is a conflict.
    let request: AllocationRequest = in_process.allocation_requests[0].clone();
    let (project, user) = (&region.admin.project, &region.admin.username);
    let consumer = uuid::Uuid::new_v4().to_string();
    assert!(local
        .claim(&consumer, &request, project, user)
        .await
        .expect("claim"));
    assert!(!local
        .claim(&consumer, &request, project, user)
        .await
        .expect("again"));
    let read = allocations(&url, &region.service_token.get(), &consumer).await;
    let (rp, alloc) = request.allocations.iter().next().expect("one provider");
    let shown: BTreeMap<String, i64> =
        serde_json::from_value(read["allocations"][rp]["resources"].clone()).expect("resources");
    assert_eq!(&shown, &alloc.resources, "{read}");
    assert_eq!(read["project_id"], project.as_str(), "{read}");

    // More than a host has: a conflict, nothing written.
    let mut too_big = request.clone();
    if let Some(a) = too_big.allocations.values_mut().next() {
        a.resources.insert("VCPU".to_owned(), 100_000);
    }
    let other = uuid::Uuid::new_v4().to_string();
    assert!(!local
        .claim(&other, &too_big, project, user)
        .await
        .expect("too big"));

    // The undo: gone, and undoing again (or a consumer that never was) is fine.
    local.delete_allocations(&consumer).await.expect("delete");
    local
        .delete_allocations(&consumer)
        .await
        .expect("delete again");
    local
        .delete_allocations(&other)
        .await
        .expect("never written");
    for c in [&consumer, &other] {
        let read = allocations(&url, &region.service_token.get(), c).await;
        assert_eq!(read["allocations"], serde_json::json!({}), "{read}");
    }
    // The index saw the undo: every host is a candidate with nothing used.
    let after = local.candidates(&want, 100, None).await.expect("after");
    assert_eq!(after.allocation_requests.len(), 3);
    assert!(
        after
            .provider_summaries
            .values()
            .all(|s| s.resources.values().all(|u| u.used == 0)),
        "{:?}",
        after.provider_summaries
    );
    region.shutdown().await;
}
