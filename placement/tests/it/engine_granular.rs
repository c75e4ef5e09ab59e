//! granular.yaml on the GranularFixture.

use placement::engine::GroupPolicy;

use crate::fixtures::{granular, group, request, unsuffixed};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn different_groups_policy() {
    let e = granular();
    let groups = vec![group("1", "VCPU:1"), group("2", "MEMORY_MB:1024")];
    let c = e.query(&request(groups.clone(), GroupPolicy::None));
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["cn_left:MEMORY_MB=1024", "cn_left:VCPU=1"]),
            s(&["cn_middle:MEMORY_MB=1024", "cn_middle:VCPU=1"]),
            s(&["cn_right:MEMORY_MB=1024", "cn_right:VCPU=1"]),
        ]
    );
    assert_eq!(c.provider_summaries.len(), 3);
    let m = &c.allocation_requests[0].mappings;
    assert_eq!(m.len(), 2);
    assert_eq!(m["1"], m["2"]);

    let c = e.query(&request(groups, GroupPolicy::Isolate));
    assert!(c.allocation_requests.is_empty() && c.provider_summaries.is_empty());
}

#[test]
fn resources_combine() {
    let e = granular();
    let groups = vec![
        unsuffixed("VCPU:3,MEMORY_MB:512"),
        group("1", "VCPU:1,MEMORY_MB:1024"),
        group("2", "VCPU:2"),
    ];
    let c = e.query(&request(groups, GroupPolicy::None));
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["cn_left:MEMORY_MB=1536", "cn_left:VCPU=6"]),
            s(&["cn_middle:MEMORY_MB=1536", "cn_middle:VCPU=6"]),
            s(&["cn_right:MEMORY_MB=1536", "cn_right:VCPU=6"]),
        ]
    );
    // Merged amounts are re-checked against capacity.
    let groups = vec![group("1", "VCPU:5"), group("2", "VCPU:5")];
    assert!(e
        .query(&request(groups, GroupPolicy::None))
        .allocation_requests
        .is_empty());
}

#[test]
fn disk_sharing() {
    let e = granular();
    let groups = vec![
        group("1", "VCPU:1,MEMORY_MB:1024"),
        group("2", "DISK_GB:100"),
    ];
    let c = e.query(&request(groups.clone(), GroupPolicy::Isolate));
    assert_eq!(c.allocation_requests.len(), 5);
    assert_eq!(c.provider_summaries.len(), 5);
    let c = e.query(&request(groups, GroupPolicy::None));
    assert_eq!(c.allocation_requests.len(), 7);
    assert_eq!(c.provider_summaries.len(), 5);

    for g in [group("1", "DISK_GB:800"), unsuffixed("DISK_GB:800")] {
        let c = e.query(&request(vec![g], GroupPolicy::None));
        assert_eq!(
            e.describe(&c),
            vec![
                s(&["shr_disk_1:DISK_GB=800"]),
                s(&["shr_disk_2:DISK_GB=800"])
            ]
        );
        assert_eq!(c.provider_summaries.len(), 2);
    }
}

#[test]
fn isolated_ssd_and_forbidden_ssd() {
    let e = granular();
    let mut g2 = group("2", "DISK_GB:100");
    g2.required = vec![s(&["CUSTOM_DISK_SSD"])];
    let c = e.query(&request(
        vec![group("1", "VCPU:1,MEMORY_MB:1024"), g2],
        GroupPolicy::Isolate,
    ));
    assert_eq!(
        e.describe(&c),
        vec![
            s(&[
                "cn_left:MEMORY_MB=1024",
                "cn_left:VCPU=1",
                "shr_disk_1:DISK_GB=100"
            ]),
            s(&[
                "cn_middle:MEMORY_MB=1024",
                "cn_middle:VCPU=1",
                "shr_disk_1:DISK_GB=100"
            ]),
        ]
    );
    assert_eq!(
        e.summary_names(&c),
        vec!["cn_left", "cn_middle", "shr_disk_1"]
    );

    let mut g2 = group("2", "DISK_GB:100");
    g2.forbidden = s(&["CUSTOM_DISK_SSD"]);
    let c = e.query(&request(vec![group("1", "VCPU:1"), g2], GroupPolicy::None));
    assert_eq!(
        e.describe(&c),
        vec![
            s(&["cn_left:DISK_GB=100", "cn_left:VCPU=1"]),
            s(&["cn_left:VCPU=1", "shr_disk_2:DISK_GB=100"]),
            s(&["cn_middle:VCPU=1", "shr_disk_2:DISK_GB=100"]),
            s(&["cn_right:VCPU=1", "shr_disk_2:DISK_GB=100"]),
        ]
    );
}

#[test]
fn any_traits_and_max_unit() {
    let e = granular();
    // required=in:HW_CPU_X86_MMX,HW_CPU_X86_SSE → cn_middle and cn_right.
    let mut g = unsuffixed("VCPU:1");
    g.required = vec![s(&["HW_CPU_X86_MMX", "HW_CPU_X86_SSE"])];
    let c = e.query(&request(vec![g], GroupPolicy::None));
    assert_eq!(
        e.describe(&c),
        vec![s(&["cn_middle:VCPU=1"]), s(&["cn_right:VCPU=1"])]
    );
    // cn_right's VGPU max_unit is 2.
    let c = e.query(&request(vec![group("1", "VGPU:3")], GroupPolicy::None));
    assert_eq!(e.describe(&c), vec![s(&["cn_left:VGPU=3"])]);
}
