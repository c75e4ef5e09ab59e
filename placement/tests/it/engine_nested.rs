//! Nested trees: spread of the unsuffixed group, same_subtree, resourceless
//! groups, root_required, in_tree and member_of on roots (semantics of
//! granular-same-subtree.yaml / allocation-candidates-root-required.yaml).

use placement::engine::{CandidatesRequest, GroupPolicy};

use crate::fixtures::{group, request, unsuffixed, Env};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// cn1 (MEMORY_MB, CUSTOM_ROOT) → numa0/numa1 (VCPU:4, HW_NUMA_ROOT) →
/// pf0 (VF, PHYSNET_A) / pf1 (VF, PHYSNET_B); cn2 flat (VCPU, MEMORY_MB).
fn numa() -> Env {
    let mut e = Env::new();
    e.provider("cn1", &[], None);
    e.inv("cn1", "MEMORY_MB", 2048);
    e.traits("cn1", &["CUSTOM_ROOT"]);
    for (numa, pf, net) in [
        ("numa0", "pf0", "CUSTOM_PHYSNET_A"),
        ("numa1", "pf1", "CUSTOM_PHYSNET_B"),
    ] {
        e.provider(numa, &[], Some("cn1"));
        e.inv(numa, "VCPU", 4);
        e.traits(numa, &["HW_NUMA_ROOT"]);
        e.provider(pf, &[], Some(numa));
        e.inv(pf, "SRIOV_NET_VF", 4);
        e.traits(pf, &[net]);
    }
    e.provider("cn2", &[], None);
    e.inv("cn2", "VCPU", 8);
    e.inv("cn2", "MEMORY_MB", 2048);
    e
}

#[test]
fn unsuffixed_spreads_over_tree() {
    let e = numa();
    let req = request(vec![unsuffixed("VCPU:1,MEMORY_MB:512")], GroupPolicy::None);
    let c = e.query(&req);
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["cn1:MEMORY_MB=512", "numa0:VCPU=1"]),
            s(&["cn1:MEMORY_MB=512", "numa1:VCPU=1"]),
            s(&["cn2:MEMORY_MB=512", "cn2:VCPU=1"]),
        ]
    );
    assert_eq!(c.provider_summaries.len(), 6);
    // Below 1.29 a candidate may use one provider per tree only.
    let c = e.query(&CandidatesRequest {
        nested_aware: false,
        ..req
    });
    assert_eq!(
        e.describe(&c),
        vec![s(&["cn2:MEMORY_MB=512", "cn2:VCPU=1"])]
    );
    assert_eq!(e.summary_names(&c), vec!["cn2"]);
}

#[test]
fn unsuffixed_traits_are_collective() {
    let e = numa();
    let mut g = unsuffixed("VCPU:1,SRIOV_NET_VF:1");
    g.required = vec![s(&["CUSTOM_PHYSNET_A"])];
    let c = e.query(&request(vec![g], GroupPolicy::None));
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["numa0:VCPU=1", "pf0:SRIOV_NET_VF=1"]),
            s(&["numa1:VCPU=1", "pf0:SRIOV_NET_VF=1"]),
        ]
    );
    // A trait on a provider that supplies nothing does not count.
    let mut g = unsuffixed("VCPU:1");
    g.required = vec![s(&["CUSTOM_ROOT"])];
    assert!(e
        .query(&request(vec![g], GroupPolicy::None))
        .allocation_requests
        .is_empty());
}

#[test]
fn same_subtree_and_resourceless() {
    let e = numa();
    let groups = vec![group("_COMPUTE", "VCPU:1"), group("_NET", "SRIOV_NET_VF:1")];
    assert_eq!(
        e.query(&request(groups.clone(), GroupPolicy::None))
            .allocation_requests
            .len(),
        4
    );
    let mut req = request(groups, GroupPolicy::None);
    req.same_subtree = vec![s(&["_COMPUTE", "_NET"])];
    let c = e.query(&req);
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["numa0:VCPU=1", "pf0:SRIOV_NET_VF=1"]),
            s(&["numa1:VCPU=1", "pf1:SRIOV_NET_VF=1"]),
        ]
    );

    let mut numa_group = group("_NUMA", "");
    numa_group.required = vec![s(&["HW_NUMA_ROOT"])];
    let mut req = request(
        vec![group("_NET", "SRIOV_NET_VF:1"), numa_group.clone()],
        GroupPolicy::None,
    );
    // Resourceless groups must be named in same_subtree.
    assert!(e.index.allocation_candidates(&req).is_err());
    req.same_subtree = vec![s(&["_NET", "_NUMA"])];
    let c = e.query(&req);
    assert_eq!(c.allocation_requests.len(), 2);
    for r in &c.allocation_requests {
        let net = r.mappings["_NET"][0];
        let numa = r.mappings["_NUMA"][0];
        assert_eq!(
            (e.name_of(&net), e.name_of(&numa)),
            if e.name_of(&net) == "pf0" {
                ("pf0", "numa0")
            } else {
                ("pf1", "numa1")
            }
        );
    }
}

#[test]
fn root_required_in_tree_member_of() {
    let mut e = numa();
    let mut req = request(vec![unsuffixed("VCPU:1")], GroupPolicy::None);
    req.root_required = s(&["CUSTOM_ROOT"]);
    assert_eq!(
        e.describe(&e.query(&req)),
        vec![s(&["numa0:VCPU=1"]), s(&["numa1:VCPU=1"])]
    );
    req.root_required.clear();
    req.root_forbidden = s(&["CUSTOM_ROOT"]);
    assert_eq!(e.describe(&e.query(&req)), vec![s(&["cn2:VCPU=1"])]);

    let mut g = unsuffixed("VCPU:1");
    g.in_tree = Some(e.rp["pf0"]);
    assert_eq!(
        e.query(&request(vec![g], GroupPolicy::None))
            .allocation_requests
            .len(),
        2
    );

    // An aggregate on the root spans its tree for the unsuffixed group, but
    // a granular group needs the provider itself in the aggregate.
    let agg = e.agg("aggX");
    let cn1 = e.rp["cn1"];
    let gen = e.index.generation(&cn1).unwrap();
    e.index.set_aggregates(&cn1, Some(gen), &[agg]).unwrap();
    let mut g = unsuffixed("VCPU:1");
    g.member_of = vec![vec![agg]];
    assert_eq!(
        e.query(&request(vec![g], GroupPolicy::None))
            .allocation_requests
            .len(),
        2
    );
    let mut g = group("1", "VCPU:1");
    g.member_of = vec![vec![agg]];
    assert!(e
        .query(&request(vec![g], GroupPolicy::None))
        .allocation_requests
        .is_empty());
}

#[test]
fn isolate_within_tree() {
    let e = numa();
    let c = e.query(&request(
        vec![group("1", "VCPU:1"), group("2", "VCPU:1")],
        GroupPolicy::Isolate,
    ));
    assert_eq!(c.allocation_requests.len(), 2);
    for r in &c.allocation_requests {
        assert_ne!(r.mappings["1"], r.mappings["2"]);
    }
}
