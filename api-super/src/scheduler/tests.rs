//! The scheduler's unit tests: decisions over made-up hosts and
//! candidates (filters, weighers, alternates, groups, No valid host).
use super::placement::{ProviderAllocation, Usage};
use super::*;
use cell_mapping::CellMapping;

fn cell(n: u8) -> CellMapping {
    CellMapping {
        id: n as i64,
        uuid: format!("00000000-0000-0000-0000-0000000000{n:02}")
            .parse()
            .unwrap(),
        name: Some(format!("cell{n}")),
        transport_url: format!("inproc://c{n}"),
        database_connection: format!("sqlite://c{n}"),
        disabled: false,
    }
}

/// `n` hosts over `azs` zones, host i with i*1024 MB free.
fn make_hosts(n: usize, azs: &[&str]) -> Vec<Candidate> {
    (0..n)
        .map(|i| {
            let rp = format!("rp{i}");
            let mut resources = BTreeMap::new();
            resources.insert(
                "MEMORY_MB".to_owned(),
                Usage {
                    capacity: 65536,
                    used: 65536 - (i as i64 + 1) * 1024,
                },
            );
            resources.insert(
                "VCPU".to_owned(),
                Usage {
                    capacity: 16,
                    used: 0,
                },
            );
            let mut allocations = BTreeMap::new();
            allocations.insert(
                rp.clone(),
                ProviderAllocation {
                    resources: [("MEMORY_MB".to_owned(), 512)].into_iter().collect(),
                },
            );
            Candidate {
                info: Arc::new(HostInfo {
                    host: format!("host{i}"),
                    node: format!("host{i}"),
                    provider: rp,
                    cell: cell(1 + (i % 2) as u8),
                    availability_zone: azs[i % azs.len()].to_owned(),
                    service_up: true,
                    service_disabled: false,
                    service_forced_down: false,
                    aggregate_metadata: BTreeMap::new(),
                    failed_builds: 0,
                    hypervisor_version: 1_000,
                    supported_instances: vec![[
                        if i % 2 == 0 { "x86_64" } else { "aarch64" }.to_owned(),
                        "fake".to_owned(),
                        "hvm".to_owned(),
                    ]],
                }),
                allocation: AllocationRequest { allocations },
                summary: ProviderSummary { resources },
            }
        })
        .collect()
}

fn req() -> Request {
    Request {
        resources: [("MEMORY_MB".to_owned(), 512)].into_iter().collect(),
        ..Default::default()
    }
}

fn weighers(m: f64) -> Vec<Box<dyn Weigher>> {
    vec![Box::new(weighers::ram::RamWeigher { multiplier: m })]
}

#[test]
fn spread_prefers_the_freest_and_pack_the_fullest() {
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &req(),
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(o[0].info.host, "host3");
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &req(),
        &filters::defaults(),
        &weighers(-1.0),
    );
    assert_eq!(o[0].info.host, "host0");
}

#[test]
fn filters_count_what_they_remove() {
    let mut hosts = make_hosts(6, &["az1", "az2"]);
    Arc::make_mut(&mut hosts[0].info).service_up = false;
    Arc::make_mut(&mut hosts[2].info).service_disabled = true;
    let mut r = req();
    r.availability_zone = Some("az1".into());
    let (o, removed) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
    assert_eq!(o.len(), 1, "{o:?}");
    assert_eq!(o[0].info.host, "host4");
    assert_eq!(
        removed,
        vec![
            ("ForcedHostFilter", 0),
            ("RequestedDestinationFilter", 0),
            ("ComputeFilter", 2),
            ("AvailabilityZoneFilter", 3),
            ("ImagePropertiesFilter", 0),
            ("AggregateInstanceExtraSpecsFilter", 0),
            ("ServerGroupAffinityFilter", 0),
            ("ServerGroupAntiAffinityFilter", 0),
        ]
    );
}

#[test]
fn forced_host_keeps_only_that_host() {
    let mut r = req();
    r.force_host = Some("host1".into());
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].info.host, "host1");
}

#[test]
fn requested_destination_keeps_that_host_and_still_filters() {
    let mut r = req();
    r.requested_host = Some("host1".into());
    let (o, removed) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].info.host, "host1");
    assert_eq!(removed[1], ("RequestedDestinationFilter", 3));
    // The other filters still run: a disabled requested host is no host.
    let mut hosts = make_hosts(4, &["nova"]);
    Arc::make_mut(&mut hosts[1].info).service_disabled = true;
    let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
    assert!(o.is_empty(), "{o:?}");
    // A node: only the host that has it.
    let hosts = make_hosts(4, &["nova"]);
    let mut r = req();
    r.requested_node = Some(hosts[2].info.node.clone());
    let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].info.host, "host2");
}

#[test]
fn in_tree_names_the_one_provider_of_a_named_host() {
    let mut hosts = make_hosts(3, &["nova"]);
    // host2 has two nodes (as an ironic-like host would).
    let mut second = (*hosts[2].info).clone();
    second.node = "host2-b".into();
    second.provider = "rp2b".into();
    hosts.push(Candidate {
        info: Arc::new(second),
        ..hosts[2].clone()
    });
    let map: host_state::HostMap = hosts.iter().map(|c| Arc::clone(&c.info)).collect();
    let mut r = req();
    assert_eq!(in_tree(&map, &r), None, "no host named");
    r.force_host = Some("host1".into());
    assert_eq!(in_tree(&map, &r), Some("rp1"));
    r.force_host = None;
    r.requested_host = Some("host0".into());
    assert_eq!(in_tree(&map, &r), Some("rp0"));
    r.requested_host = Some("host2".into());
    assert_eq!(in_tree(&map, &r), None, "two nodes: the filters choose");
    r.requested_node = Some("host2-b".into());
    assert_eq!(in_tree(&map, &r), Some("rp2b"));
    r.requested_host = Some("nope".into());
    assert_eq!(in_tree(&map, &r), None, "unknown: the filters say no");
}

#[test]
fn host_map_finds_hosts_nodes_and_zones_by_index() {
    let mut hosts = make_hosts(4, &["az1", "az2"]);
    let mut second = (*hosts[2].info).clone();
    second.node = "host2-b".into();
    second.provider = "rp2b".into();
    let second = Arc::new(second);
    // az2's hosts are host1 and host3: disable both, so az2 has none
    // enabled.
    for i in [1, 3] {
        Arc::make_mut(&mut hosts[i].info).service_disabled = true;
    }
    let map: host_state::HostMap = hosts
        .iter()
        .map(|c| Arc::clone(&c.info))
        .chain([second])
        .collect();
    let providers = |host: Option<&str>, node: Option<&str>| {
        let mut v: Vec<String> = map.named(host, node).map(|h| h.provider.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(providers(Some("host2"), None), ["rp2", "rp2b"]);
    assert_eq!(providers(Some("host2"), Some("host2-b")), ["rp2b"]);
    assert_eq!(providers(None, Some("host2-b")), ["rp2b"]);
    assert_eq!(
        providers(Some("host1"), Some("host2-b")),
        Vec::<String>::new()
    );
    assert_eq!(providers(Some("nope"), None), Vec::<String>::new());
    assert_eq!(providers(None, None).len(), 5);
    assert_eq!(map.nodes_of("host2").len(), 2);
    assert!(map.nodes_of("nope").is_empty());
    assert_eq!(map.get("rp3").map(|h| h.host.as_str()), Some("host3"));
    assert!(map.zone_available("az1"));
    assert!(!map.zone_available("az2"), "all its services disabled");
    assert!(!map.zone_available("az3"));
}

#[test]
fn build_failure_weigher_sinks_failing_hosts() {
    let w = weighers::build_failure::BuildFailureWeigher {
        multiplier: 1_000_000.0,
    };
    let mut hosts = make_hosts(4, &["nova"]);
    assert_eq!(w.weigh(&hosts[0], &req()), 0.0);
    // host3 has the most free RAM but failed once, host2 twice.
    Arc::make_mut(&mut hosts[3].info).failed_builds = 1;
    Arc::make_mut(&mut hosts[2].info).failed_builds = 2;
    assert_eq!(w.weigh(&hosts[3], &req()), -1.0);
    assert_eq!(w.name(), "BuildFailureWeigher");
    let ws: Vec<Box<dyn Weigher>> = vec![
        Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
        Box::new(w),
    ];
    let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &ws);
    assert_eq!(names(&o), ["host1", "host0", "host3", "host2"]);
    // Weighed down, not filtered: alone, a failing host is still chosen.
    let (o, _) = decide(vec![hosts[2].clone()], &req(), &filters::defaults(), &ws);
    assert_eq!(names(&o), ["host2"]);
    // Multiplier 0: the failures do not count.
    let ws: Vec<Box<dyn Weigher>> = vec![
        Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
        Box::new(weighers::build_failure::BuildFailureWeigher { multiplier: 0.0 }),
    ];
    let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &ws);
    assert_eq!(names(&o), ["host3", "host2", "host1", "host0"]);
    // Every host failed as often: no difference, RAM decides.
    for h in &mut hosts {
        Arc::make_mut(&mut h.info).failed_builds = 5;
    }
    let ws: Vec<Box<dyn Weigher>> = vec![
        Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
        Box::new(weighers::build_failure::BuildFailureWeigher {
            multiplier: 1_000_000.0,
        }),
    ];
    let (o, _) = decide(hosts, &req(), &filters::defaults(), &ws);
    assert_eq!(names(&o), ["host3", "host2", "host1", "host0"]);
}

#[test]
fn disk_weigher_spreads_or_packs_by_free_disk() {
    let mut hosts = make_hosts(4, &["nova"]);
    // Free disk: host0 300, host1 100, host2 400, host3 200 GB.
    for (h, free) in hosts.iter_mut().zip([300, 100, 400, 200]) {
        h.summary.resources.insert(
            "DISK_GB".to_owned(),
            Usage {
                capacity: 1000,
                used: 1000 - free,
            },
        );
    }
    let disk = |m: f64| -> Vec<Box<dyn Weigher>> {
        vec![Box::new(weighers::disk::DiskWeigher { multiplier: m })]
    };
    let w = weighers::disk::DiskWeigher { multiplier: 1.0 };
    assert_eq!(w.name(), "DiskWeigher");
    assert_eq!(w.weigh(&hosts[2], &req()), 400.0);
    let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &disk(1.0));
    assert_eq!(names(&o), ["host2", "host0", "host3", "host1"]);
    let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &disk(-1.0));
    assert_eq!(names(&o), ["host1", "host3", "host0", "host2"]);
    // Against RAM (host3 freest): the larger multiplier wins.
    let ws: Vec<Box<dyn Weigher>> = vec![
        Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
        Box::new(weighers::disk::DiskWeigher { multiplier: 2.0 }),
    ];
    let (o, _) = decide(hosts, &req(), &filters::defaults(), &ws);
    assert_eq!(o[0].info.host, "host2");
    // No disk inventory anywhere: neutral (ties by name).
    let (o, _) = decide(
        make_hosts(3, &["nova"]),
        &req(),
        &filters::defaults(),
        &disk(1.0),
    );
    assert_eq!(names(&o), ["host0", "host1", "host2"]);
}

#[test]
fn no_valid_host_details_name_every_filter() {
    let r = NoValidHost {
        candidates: 3,
        unmapped: 0,
        removed: vec![("ComputeFilter", 1), ("AvailabilityZoneFilter", 2)],
        claim_conflicts: 0,
    };
    let d = r.details();
    assert!(d.contains("ComputeFilter removed 1"), "{d}");
    assert!(d.contains("AvailabilityZoneFilter removed 2"), "{d}");
}

fn group(policy: &str, hosts: &[&str], max: i64) -> Option<GroupSpec> {
    Some(GroupSpec {
        uuid: "g".into(),
        policy: policy.into(),
        max_server_per_host: max,
        hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
    })
}

fn all_weighers() -> Vec<Box<dyn Weigher>> {
    vec![
        Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
        Box::new(weighers::affinity::SoftAffinityWeigher { multiplier: 10.0 }),
        Box::new(weighers::affinity::SoftAntiAffinityWeigher { multiplier: 10.0 }),
    ]
}

fn names(o: &[Candidate]) -> Vec<&str> {
    o.iter().map(|c| c.info.host.as_str()).collect()
}

#[test]
fn extra_specs_must_match_aggregate_metadata() {
    let mut hosts = make_hosts(4, &["nova"]);
    for i in [1, 3] {
        Arc::make_mut(&mut hosts[i].info)
            .aggregate_metadata
            .insert("ssd".into(), ["true".to_owned()].into_iter().collect());
    }
    Arc::make_mut(&mut hosts[3].info)
        .aggregate_metadata
        .insert("cores".into(), ["32".to_owned()].into_iter().collect());
    let mut r = req();
    // Another scope is not this filter's business.
    r.flavor_extra_specs
        .insert("hw:cpu_policy".into(), "dedicated".into());
    let (o, _) = decide(hosts.clone(), &r, &filters::defaults(), &weighers(1.0));
    assert_eq!(o.len(), 4);
    r.flavor_extra_specs
        .insert("aggregate_instance_extra_specs:ssd".into(), "true".into());
    let (o, removed) = decide(hosts.clone(), &r, &filters::defaults(), &weighers(1.0));
    assert_eq!(names(&o), ["host3", "host1"]);
    assert!(removed.contains(&("AggregateInstanceExtraSpecsFilter", 2)));
    // Unscoped keys count too; operators as Nova's.
    r.flavor_extra_specs.insert("cores".into(), ">= 16".into());
    let (o, _) = decide(hosts.clone(), &r, &filters::defaults(), &weighers(1.0));
    assert_eq!(names(&o), ["host3"]);
    r.flavor_extra_specs.insert("cores".into(), ">= 64".into());
    let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
    assert!(o.is_empty());
}

#[test]
fn affinity_keeps_the_members_hosts() {
    let mut r = req();
    r.group = group("affinity", &[], 1);
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(o.len(), 4, "no member yet: anywhere");
    r.group = group("affinity", &["host1"], 1);
    let (o, removed) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(names(&o), ["host1"]);
    assert!(removed.contains(&("ServerGroupAffinityFilter", 3)));
}

#[test]
fn anti_affinity_avoids_the_members_hosts_up_to_the_limit() {
    let mut r = req();
    r.group = group("anti-affinity", &["host3", "host2", "host2"], 1);
    let (o, removed) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(names(&o), ["host1", "host0"]);
    assert!(removed.contains(&("ServerGroupAntiAffinityFilter", 2)));
    // max_server_per_host 2: host3 (one member) is fine again.
    r.group = group("anti-affinity", &["host3", "host2", "host2"], 2);
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &weighers(1.0),
    );
    assert_eq!(names(&o), ["host3", "host1", "host0"]);
}

#[test]
fn soft_policies_weigh_instead_of_filtering() {
    let mut r = req();
    // host3 has the most free RAM, but host0 has the members.
    r.group = group("soft-affinity", &["host0", "host0"], 1);
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &all_weighers(),
    );
    assert_eq!(o.len(), 4);
    assert_eq!(o[0].info.host, "host0");
    // Soft anti-affinity: the members' hosts come last, none removed.
    r.group = group("soft-anti-affinity", &["host3", "host2"], 1);
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &r,
        &filters::defaults(),
        &all_weighers(),
    );
    assert_eq!(names(&o), ["host1", "host0", "host3", "host2"]);
    // Without a group the weighers are neutral.
    let (o, _) = decide(
        make_hosts(4, &["nova"]),
        &req(),
        &filters::defaults(),
        &all_weighers(),
    );
    assert_eq!(o[0].info.host, "host3");
}

#[test]
fn image_properties_keep_the_hosts_that_run_the_guest() {
    use crate::image_props::ImageProps;
    let image = |kv: &[(&str, &str)]| {
        ImageProps::from_image(
            &kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
        .unwrap()
    };
    let run = |r: &Request| {
        decide(
            make_hosts(4, &["nova"]),
            r,
            &filters::defaults(),
            &weighers(1.0),
        )
    };
    let mut r = req();
    // No scheduling property: every host.
    r.image = image(&[("os_distro", "cirros")]);
    assert_eq!(run(&r).0.len(), 4);
    // Even hosts are x86_64, odd ones aarch64.
    r.image = image(&[("hw_architecture", "aarch64")]);
    let (o, removed) = run(&r);
    assert_eq!(names(&o), ["host3", "host1"]);
    assert!(
        removed.contains(&("ImagePropertiesFilter", 2)),
        "{removed:?}"
    );
    r.image = image(&[
        ("architecture", "amd64"),
        ("img_hv_type", "fake"),
        ("hw_vm_mode", "hvm"),
    ]);
    assert_eq!(names(&run(&r).0), ["host2", "host0"]);
    // All three must match one triple.
    r.image = image(&[("hw_architecture", "x86_64"), ("img_hv_type", "qemu")]);
    assert!(run(&r).0.is_empty());
    // The version counts once a triple matches (hosts report 1.0).
    r.image = image(&[
        ("hw_architecture", "x86_64"),
        ("img_hv_requested_version", ">=1.0"),
    ]);
    assert_eq!(run(&r).0.len(), 2);
    r.image = image(&[
        ("hw_architecture", "x86_64"),
        ("img_hv_requested_version", ">=2.0"),
    ]);
    assert!(run(&r).0.is_empty());
    // A host that reports nothing runs no image that names a property.
    let mut hosts = make_hosts(2, &["nova"]);
    Arc::make_mut(&mut hosts[0].info)
        .supported_instances
        .clear();
    r.image = image(&[("img_hv_type", "fake")]);
    let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
    assert_eq!(names(&o), ["host1"]);
}
