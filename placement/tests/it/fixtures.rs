//! Provider layouts of upstream's gabbi fixtures
//! (placement/tests/functional/fixtures/gabbits.py), rebuilt on the engine.

use std::collections::{BTreeMap, HashMap};

use fabric::ids::ProviderUuid;
use placement::engine::{
    AggregateUuid, AllocationCandidates, CandidatesRequest, GroupPolicy, Index, Inventory,
    RequestGroup,
};
use uuid::Uuid;

/// An index plus names for its providers and aggregates.
pub struct Env {
    pub index: Index,
    pub rp: HashMap<&'static str, ProviderUuid>,
    pub agg: HashMap<&'static str, AggregateUuid>,
}

impl Env {
    pub fn new() -> Self {
        Self {
            index: Index::new(),
            rp: HashMap::new(),
            agg: HashMap::new(),
        }
    }

    pub fn agg(&mut self, name: &'static str) -> AggregateUuid {
        *self
            .agg
            .entry(name)
            .or_insert_with(|| AggregateUuid(Uuid::new_v4()))
    }

    /// `tb.create_provider(name, *aggs, parent=...)`.
    pub fn provider(
        &mut self,
        name: &'static str,
        aggs: &[&'static str],
        parent: Option<&str>,
    ) -> ProviderUuid {
        let uuid = ProviderUuid::new_random();
        let parent = parent.map(|p| self.rp[p]);
        self.index.create_provider(uuid, name, parent).unwrap();
        let aggs: Vec<AggregateUuid> = aggs.iter().map(|a| self.agg(a)).collect();
        if !aggs.is_empty() {
            let g = self.index.generation(&uuid).unwrap();
            self.index.set_aggregates(&uuid, Some(g), &aggs).unwrap();
        }
        self.rp.insert(name, uuid);
        uuid
    }

    /// `tb.add_inventory(rp, rc, total, **kw)`.
    pub fn inventory(&mut self, name: &str, rc: &str, inv: Inventory) {
        let uuid = self.rp[name];
        let g = self.index.generation(&uuid).unwrap();
        self.index.set_inventory(&uuid, g, rc, inv).unwrap();
    }

    pub fn inv(&mut self, name: &str, rc: &str, total: u64) {
        self.inventory(name, rc, Inventory::new(total));
    }

    /// `tb.set_traits(rp, *traits)`.
    pub fn traits(&mut self, name: &str, traits: &[&str]) {
        let uuid = self.rp[name];
        let g = self.index.generation(&uuid).unwrap();
        self.index.set_traits(&uuid, g, traits).unwrap();
    }

    pub fn name_of(&self, uuid: &ProviderUuid) -> &'static str {
        self.rp
            .iter()
            .find(|(_, u)| *u == uuid)
            .map(|(n, _)| *n)
            .unwrap()
    }

    pub fn query(&self, req: &CandidatesRequest) -> AllocationCandidates {
        self.index.allocation_candidates(req).unwrap()
    }

    /// Each candidate as a sorted list of "provider:CLASS=amount".
    pub fn describe(&self, c: &AllocationCandidates) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = c
            .allocation_requests
            .iter()
            .map(|r| {
                let mut v: Vec<String> = r
                    .allocations
                    .iter()
                    .flat_map(|a| {
                        a.resources
                            .iter()
                            .map(move |(rc, n)| format!("{}:{rc}={n}", self.name_of(&a.provider)))
                    })
                    .collect();
                v.sort();
                v
            })
            .collect();
        out.sort();
        out
    }

    /// Names of the providers in `provider_summaries`, sorted.
    pub fn summary_names(&self, c: &AllocationCandidates) -> Vec<&'static str> {
        let mut v: Vec<_> = c
            .provider_summaries
            .iter()
            .map(|s| self.name_of(&s.provider))
            .collect();
        v.sort();
        v
    }
}

/// Parses `"VCPU:1,MEMORY_MB:1024"`.
pub fn res(s: &str) -> BTreeMap<String, u64> {
    s.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

pub fn unsuffixed(resources: &str) -> RequestGroup {
    RequestGroup {
        resources: res(resources),
        ..RequestGroup::default()
    }
}

pub fn group(suffix: &str, resources: &str) -> RequestGroup {
    RequestGroup {
        suffix: suffix.to_owned(),
        resources: if resources.is_empty() {
            BTreeMap::new()
        } else {
            res(resources)
        },
        ..RequestGroup::default()
    }
}

pub fn request(groups: Vec<RequestGroup>, policy: GroupPolicy) -> CandidatesRequest {
    CandidatesRequest {
        groups,
        group_policy: policy,
        ..CandidatesRequest::default()
    }
}

/// `SharedStorageFixture`: cn1 (VCPU, MEMORY_MB, SSE traits), cn2 (VCPU,
/// MEMORY_MB, DISK_GB), sharing ss and ss2 (DISK_GB) all in one aggregate;
/// each cn has two NUMA children each with a PF child (SRIOV_NET_VF:8).
pub fn shared_storage() -> Env {
    let mut e = Env::new();
    for n in ["cn1", "cn2", "ss", "ss2"] {
        e.provider(n, &["agg"], None);
    }
    e.provider("numa1_1", &[], Some("cn1"));
    e.provider("numa1_2", &[], Some("cn1"));
    e.provider("numa2_1", &[], Some("cn2"));
    e.provider("numa2_2", &[], Some("cn2"));
    e.provider("pf1_1", &[], Some("numa1_1"));
    e.provider("pf1_2", &[], Some("numa1_2"));
    e.provider("pf2_1", &[], Some("numa2_1"));
    e.provider("pf2_2", &[], Some("numa2_2"));
    for cn in ["cn1", "cn2"] {
        e.inventory(
            cn,
            "VCPU",
            Inventory {
                allocation_ratio: 16.0,
                ..Inventory::new(24)
            },
        );
        e.inventory(
            cn,
            "MEMORY_MB",
            Inventory {
                allocation_ratio: 1.5,
                ..Inventory::new(128 * 1024)
            },
        );
    }
    e.traits("cn1", &["HW_CPU_X86_SSE", "HW_CPU_X86_SSE2"]);
    e.inventory(
        "cn2",
        "DISK_GB",
        Inventory {
            reserved: 100,
            ..Inventory::new(2000)
        },
    );
    for ss in ["ss", "ss2"] {
        e.inventory(
            ss,
            "DISK_GB",
            Inventory {
                reserved: 100,
                ..Inventory::new(2000)
            },
        );
        e.traits(ss, &["MISC_SHARES_VIA_AGGREGATE"]);
    }
    for pf in ["pf1_1", "pf1_2", "pf2_1", "pf2_2"] {
        e.inv(pf, "SRIOV_NET_VF", 8);
    }
    e
}

/// `GranularFixture` (see the diagram in upstream's gabbits.py).
pub fn granular() -> Env {
    let mut e = Env::new();
    e.provider("cn_left", &["aggA"], None);
    for (rc, n) in [
        ("VCPU", 8),
        ("MEMORY_MB", 4096),
        ("DISK_GB", 500),
        ("VGPU", 8),
        ("SRIOV_NET_VF", 8),
        ("CUSTOM_NET_MBPS", 4000),
    ] {
        e.inv("cn_left", rc, n);
    }
    e.traits(
        "cn_left",
        &[
            "HW_CPU_X86_AVX",
            "HW_CPU_X86_AVX2",
            "HW_GPU_API_DXVA",
            "HW_NIC_DCB_PFC",
            "CUSTOM_FOO",
        ],
    );
    e.provider("cn_middle", &["aggA", "aggB"], None);
    for (rc, n) in [
        ("VCPU", 8),
        ("MEMORY_MB", 4096),
        ("SRIOV_NET_VF", 8),
        ("CUSTOM_NET_MBPS", 4000),
    ] {
        e.inv("cn_middle", rc, n);
    }
    e.traits(
        "cn_middle",
        &[
            "HW_CPU_X86_AVX",
            "HW_CPU_X86_AVX2",
            "HW_CPU_X86_SSE",
            "HW_NIC_ACCEL_TLS",
        ],
    );
    e.provider("cn_right", &["aggB", "aggC"], None);
    for (rc, n) in [("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)] {
        e.inv("cn_right", rc, n);
    }
    e.inventory(
        "cn_right",
        "VGPU",
        Inventory {
            max_unit: 2,
            ..Inventory::new(8)
        },
    );
    e.traits(
        "cn_right",
        &["HW_CPU_X86_MMX", "HW_GPU_API_DXVA", "CUSTOM_DISK_SSD"],
    );
    e.provider("shr_disk_1", &["aggA"], None);
    e.inv("shr_disk_1", "DISK_GB", 1000);
    e.traits(
        "shr_disk_1",
        &["MISC_SHARES_VIA_AGGREGATE", "CUSTOM_DISK_SSD"],
    );
    e.provider("shr_disk_2", &["aggA", "aggB"], None);
    e.inv("shr_disk_2", "DISK_GB", 1000);
    e.traits("shr_disk_2", &["MISC_SHARES_VIA_AGGREGATE"]);
    e.provider("shr_net", &["aggC"], None);
    e.inv("shr_net", "SRIOV_NET_VF", 16);
    e.inv("shr_net", "CUSTOM_NET_MBPS", 40000);
    e.traits("shr_net", &["MISC_SHARES_VIA_AGGREGATE"]);
    e
}

/// `NonSharedStorageFixture`: three compute nodes with local storage.
pub fn non_shared_storage() -> Env {
    let mut e = Env::new();
    for cn in ["cn1", "cn2", "cn3"] {
        e.provider(cn, &[], None);
        e.inv(cn, "VCPU", 24);
        e.inv(cn, "MEMORY_MB", 128 * 1024);
        e.inv(cn, "DISK_GB", 2000);
    }
    e.agg("aggA");
    e.agg("aggB");
    e.agg("aggC");
    e
}
