//! allocation-candidates.yaml and allocation-candidates-member-of.yaml.

use placement::engine::{
    parse_member_of, parse_required, CandidateOrder, CandidatesRequest, GroupPolicy, ProviderFilter,
};

use crate::fixtures::{non_shared_storage, request, res, shared_storage, unsuffixed};

const VMD: &str = "VCPU:1,MEMORY_MB:1024,DISK_GB:100";

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn shared_storage_no_allocations_yet() {
    let e = shared_storage();
    // Microversion 1.10: not nested-aware.
    let mut req = request(vec![unsuffixed(VMD)], GroupPolicy::None);
    req.nested_aware = false;
    let c = e.query(&req);
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["cn1:MEMORY_MB=1024", "cn1:VCPU=1", "ss2:DISK_GB=100"]),
            s(&["cn1:MEMORY_MB=1024", "cn1:VCPU=1", "ss:DISK_GB=100"]),
            s(&["cn2:DISK_GB=100", "cn2:MEMORY_MB=1024", "cn2:VCPU=1"]),
            s(&["cn2:MEMORY_MB=1024", "cn2:VCPU=1", "ss2:DISK_GB=100"]),
            s(&["cn2:MEMORY_MB=1024", "cn2:VCPU=1", "ss:DISK_GB=100"]),
        ]
    );
    assert_eq!(e.summary_names(&c), vec!["cn1", "cn2", "ss", "ss2"]);
    let cn1 = c
        .provider_summaries
        .iter()
        .find(|p| p.provider == e.rp["cn1"])
        .unwrap();
    let cap = |name: &str| {
        cn1.resources
            .iter()
            .find(|r| &*r.resource_class == name)
            .map(|r| (r.capacity, r.used))
    };
    assert_eq!(cap("VCPU"), Some((384, 0)));
    assert_eq!(cap("MEMORY_MB"), Some((196_608, 0)));
    let cn2 = c
        .provider_summaries
        .iter()
        .find(|p| p.provider == e.rp["cn2"])
        .unwrap();
    assert!(cn2
        .resources
        .iter()
        .any(|r| &*r.resource_class == "DISK_GB" && r.capacity == 1900));

    // Nested-aware (1.29+): same candidates, summaries cover whole trees.
    let c = e.query(&request(vec![unsuffixed(VMD)], GroupPolicy::None));
    assert_eq!(c.allocation_requests.len(), 5);
    assert_eq!(c.provider_summaries.len(), 12);
    let pf = c
        .provider_summaries
        .iter()
        .find(|p| p.provider == e.rp["pf1_1"])
        .unwrap();
    assert_eq!(pf.parent, Some(e.rp["numa1_1"]));
    assert_eq!(pf.root, e.rp["cn1"]);
}

#[test]
fn shared_storage_limit_and_traits() {
    let e = shared_storage();
    let mut req = request(vec![unsuffixed(VMD)], GroupPolicy::None);
    req.limit = Some(1);
    assert_eq!(e.query(&req).allocation_requests.len(), 1);
    req.order = CandidateOrder::Shuffle { seed: 7 };
    assert_eq!(e.query(&req).allocation_requests.len(), 1);

    let mut g = unsuffixed(VMD);
    g.required = parse_required(&["HW_CPU_X86_SSE"]).unwrap().required;
    let mut req = request(vec![g], GroupPolicy::None);
    req.nested_aware = false;
    let c = e.query(&req);
    assert_eq!(c.allocation_requests.len(), 2);
    assert_eq!(e.summary_names(&c), vec!["cn1", "ss", "ss2"]);
    let cn1 = c
        .provider_summaries
        .iter()
        .find(|p| p.provider == e.rp["cn1"])
        .unwrap();
    let mut traits: Vec<&str> = cn1.traits.iter().map(|t| &**t).collect();
    traits.sort();
    assert_eq!(traits, vec!["HW_CPU_X86_SSE", "HW_CPU_X86_SSE2"]);

    // Forbidden: nothing from cn1; cn2 alone or with either sharing disk.
    let f = parse_required(&["!HW_CPU_X86_SSE"]).unwrap();
    let mut g = unsuffixed(VMD);
    g.forbidden = f.forbidden;
    let c = e.query(&request(vec![g], GroupPolicy::None));
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["cn2:DISK_GB=100", "cn2:MEMORY_MB=1024", "cn2:VCPU=1"]),
            s(&["cn2:MEMORY_MB=1024", "cn2:VCPU=1", "ss2:DISK_GB=100"]),
            s(&["cn2:MEMORY_MB=1024", "cn2:VCPU=1", "ss:DISK_GB=100"]),
        ]
    );

    let mut g = unsuffixed(VMD);
    g.required = vec![s(&["HW_CPU_X86_SSE3"])];
    let c = e.query(&request(vec![g], GroupPolicy::None));
    assert!(c.allocation_requests.is_empty() && c.provider_summaries.is_empty());
}

#[test]
fn usage_reduces_candidates() {
    let mut e = shared_storage();
    // Fill ss completely: 1900 usable.
    let d = placement::engine::UsageDelta {
        provider: e.rp["ss"],
        resource_class: "DISK_GB".into(),
        delta: 1900,
    };
    e.index.apply_usage_deltas(&[d], true).unwrap();
    let c = e.query(&request(vec![unsuffixed(VMD)], GroupPolicy::None));
    assert_eq!(c.allocation_requests.len(), 3);
    assert!(e
        .describe(&c)
        .iter()
        .flatten()
        .all(|a| !a.starts_with("ss:")));
}

#[test]
fn member_of() {
    let mut e = non_shared_storage();
    let (a, b) = (e.agg["aggA"], e.agg["aggB"]);
    let mut g = unsuffixed(VMD);
    g.member_of = parse_member_of(&[a.to_string()]).unwrap().member_of;
    assert!(e
        .query(&request(vec![g.clone()], GroupPolicy::None))
        .allocation_requests
        .is_empty());

    let cn1 = e.rp["cn1"];
    let gen = e.index.generation(&cn1).unwrap();
    e.index.set_aggregates(&cn1, Some(gen), &[a]).unwrap();
    let mut g = unsuffixed(VMD);
    g.member_of = parse_member_of(&[format!("in:{a},{b}")]).unwrap().member_of;
    let c = e.query(&request(vec![g.clone()], GroupPolicy::None));
    assert_eq!(e.describe(&c).len(), 1);
    assert_eq!(c.allocation_requests[0].allocations[0].provider, cn1);

    let cn2 = e.rp["cn2"];
    let gen = e.index.generation(&cn2).unwrap();
    e.index.set_aggregates(&cn2, Some(gen), &[b]).unwrap();
    assert_eq!(
        e.query(&request(vec![g], GroupPolicy::None))
            .allocation_requests
            .len(),
        2
    );

    // AND of two member_of params: nobody is in both.
    let mut g = unsuffixed(VMD);
    g.member_of = parse_member_of(&[a.to_string(), b.to_string()])
        .unwrap()
        .member_of;
    assert!(e
        .query(&request(vec![g], GroupPolicy::None))
        .allocation_requests
        .is_empty());

    // Forbidden aggregate: everyone but cn1.
    let mut g = unsuffixed(VMD);
    g.forbidden_aggregates = parse_member_of(&[format!("!{a}")]).unwrap().forbidden;
    let c = e.query(&request(vec![g], GroupPolicy::None));
    let names: Vec<_> = c
        .allocation_requests
        .iter()
        .map(|r| e.name_of(&r.allocations[0].provider))
        .collect();
    assert_eq!(names, vec!["cn2", "cn3"]);
}

#[test]
fn resource_provider_list_filters() {
    let e = shared_storage();
    let f = ProviderFilter {
        resources: res("DISK_GB:100"),
        ..ProviderFilter::default()
    };
    let mut names: Vec<_> = e
        .index
        .list_providers(&f)
        .unwrap()
        .iter()
        .map(|u| e.name_of(u))
        .collect();
    names.sort();
    assert_eq!(names, vec!["cn2", "ss", "ss2"]);
    let f = ProviderFilter {
        in_tree: Some(e.rp["numa1_1"]),
        ..ProviderFilter::default()
    };
    assert_eq!(e.index.list_providers(&f).unwrap().len(), 5);
    let f = ProviderFilter {
        required: vec![s(&["MISC_SHARES_VIA_AGGREGATE"])],
        forbidden: s(&["HW_CPU_X86_SSE"]),
        resources: res("DISK_GB:1901"),
        ..ProviderFilter::default()
    };
    assert!(e.index.list_providers(&f).unwrap().is_empty());
}

#[test]
fn invalid_requests_are_refused() {
    let e = shared_storage();
    assert!(e
        .index
        .allocation_candidates(&CandidatesRequest::default())
        .is_err());
    let mut g = unsuffixed("VCPU:1");
    g.resources.insert("MEMORY_MB".into(), 0);
    assert!(e
        .index
        .allocation_candidates(&request(vec![g], GroupPolicy::None))
        .is_err());
}
