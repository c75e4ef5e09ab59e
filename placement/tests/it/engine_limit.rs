//! Early exit at `limit` in the general (nested/sharing) path gives exactly
//! the first `limit` candidates of the full enumeration, on random fleets.

use std::collections::BTreeMap;

use uuid::Uuid;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

const RCS: &[&str] = &["VCPU", "MEMORY_MB", "DISK_GB", "VF", "FPGA"];
const TRAITS: &[&str] = &["T1", "T2", "T3", "T4"];

#[derive(Clone)]
struct Prov {
    uuid: Uuid,
    name: String,
    parent: Option<Uuid>,
    inv: Vec<(String, u64, u64, u64)>,
    traits: Vec<String>,
    aggs: Vec<Uuid>,
}

fn fleet(r: &mut Rng, aggs: &[Uuid]) -> Vec<Prov> {
    let mut out = Vec::new();
    let n_roots = 1 + r.below(25);
    let mut id = 1u128;
    let mut mk = |r: &mut Rng, parent: Option<Uuid>, sharing: bool| {
        let u = Uuid::from_u128(id * 7919 + (r.below(1000) as u128) * 1_000_000_000);
        id += 1;
        let mut inv = Vec::new();
        for rc in RCS {
            if r.chance(if sharing { 25 } else { 45 }) {
                let total = 1 + r.below(8);
                let used = r.below(total + 1);
                let max = 1 + r.below(total);
                inv.push((rc.to_string(), total, used, max));
            }
        }
        let mut traits: Vec<String> = TRAITS
            .iter()
            .filter(|_| r.chance(30))
            .map(|t| t.to_string())
            .collect();
        if sharing {
            traits.push("MISC_SHARES_VIA_AGGREGATE".into());
        }
        let ag: Vec<Uuid> = aggs
            .iter()
            .filter(|_| r.chance(if sharing { 50 } else { 25 }))
            .copied()
            .collect();
        Prov {
            uuid: u,
            name: format!("p{id}"),
            parent,
            inv,
            traits,
            aggs: ag,
        }
    };
    for _ in 0..n_roots {
        let sharing = r.chance(15);
        let root = mk(r, None, sharing);
        let ru = root.uuid;
        out.push(root);
        if !sharing && r.chance(50) {
            for _ in 0..r.below(3) + 1 {
                let c = mk(r, Some(ru), false);
                let cu = c.uuid;
                out.push(c);
                if r.chance(40) {
                    for _ in 0..r.below(3) {
                        out.push(mk(r, Some(cu), false));
                    }
                }
            }
        }
    }
    // shuffle a bit so slot order != uuid order
    for i in (1..out.len()).rev() {
        let j = r.below(i as u64 + 1) as usize;
        if out[i].parent.is_none() && out[j].parent.is_none() {
            out.swap(i, j);
        }
    }
    out
}

macro_rules! run {
    ($m:ident, $provs:expr, $req:expr) => {{
        use placement::engine as e;
        let recs: Vec<e::ProviderRecord> = $provs
            .iter()
            .map(|p: &Prov| {
                let mut rec =
                    e::ProviderRecord::new(fabric::ids::ProviderUuid(p.uuid), p.name.clone());
                rec.parent = p.parent.map(fabric::ids::ProviderUuid);
                for (rc, total, used, max) in &p.inv {
                    rec.inventories.insert(
                        rc.clone(),
                        e::Inventory {
                            max_unit: *max,
                            ..e::Inventory::new(*total)
                        },
                    );
                    if *used > 0 {
                        rec.usages.insert(rc.clone(), *used);
                    }
                }
                rec.traits = p.traits.clone();
                rec.aggregates = p.aggs.iter().map(|a| e::AggregateUuid(*a)).collect();
                rec
            })
            .collect();
        let idx = e::Index::from_snapshot(recs).unwrap();
        let rq: &Req = $req;
        let groups = rq
            .groups
            .iter()
            .map(|g: &Grp| e::RequestGroup {
                suffix: g.suffix.clone(),
                resources: g.resources.clone(),
                required: g.required.clone(),
                forbidden: g.forbidden.clone(),
                member_of: g
                    .member_of
                    .iter()
                    .map(|s| s.iter().map(|a| e::AggregateUuid(*a)).collect())
                    .collect(),
                forbidden_aggregates: g
                    .forbidden_aggs
                    .iter()
                    .map(|a| e::AggregateUuid(*a))
                    .collect(),
                in_tree: g.in_tree.map(fabric::ids::ProviderUuid),
            })
            .collect();
        let req = e::CandidatesRequest {
            groups,
            group_policy: if rq.isolate {
                e::GroupPolicy::Isolate
            } else {
                e::GroupPolicy::None
            },
            same_subtree: rq.same_subtree.clone(),
            root_required: rq.root_required.clone(),
            root_forbidden: rq.root_forbidden.clone(),
            limit: rq.limit,
            order: e::CandidateOrder::Deterministic,
            nested_aware: rq.nested_aware,
        };
        idx.allocation_candidates(&req)
    }};
}

#[derive(Clone, Debug)]
struct Grp {
    suffix: String,
    resources: BTreeMap<String, u64>,
    required: Vec<Vec<String>>,
    forbidden: Vec<String>,
    member_of: Vec<Vec<Uuid>>,
    forbidden_aggs: Vec<Uuid>,
    in_tree: Option<Uuid>,
}
#[derive(Clone, Debug)]
struct Req {
    groups: Vec<Grp>,
    isolate: bool,
    same_subtree: Vec<Vec<String>>,
    root_required: Vec<String>,
    root_forbidden: Vec<String>,
    limit: Option<usize>,
    nested_aware: bool,
}

fn request(r: &mut Rng, provs: &[Prov], aggs: &[Uuid]) -> Req {
    let mut groups = Vec::new();
    let grp = |r: &mut Rng, suffix: String, resourceless_ok: bool| {
        let mut resources = BTreeMap::new();
        let k = if resourceless_ok && r.chance(30) {
            0
        } else {
            1 + r.below(3)
        };
        for _ in 0..k {
            resources.insert(
                RCS[r.below(RCS.len() as u64) as usize].to_string(),
                1 + r.below(3),
            );
        }
        let mut g = Grp {
            suffix,
            resources,
            required: vec![],
            forbidden: vec![],
            member_of: vec![],
            forbidden_aggs: vec![],
            in_tree: None,
        };
        if r.chance(30) {
            g.required
                .push(vec![TRAITS[r.below(4) as usize].to_string()]);
        }
        if r.chance(15) {
            g.required.push(vec![
                TRAITS[r.below(4) as usize].to_string(),
                TRAITS[r.below(4) as usize].to_string(),
            ]);
        }
        if r.chance(20) {
            g.forbidden.push(TRAITS[r.below(4) as usize].to_string());
        }
        if r.chance(20) {
            g.member_of
                .push(vec![aggs[r.below(aggs.len() as u64) as usize]]);
        }
        if r.chance(10) {
            g.forbidden_aggs
                .push(aggs[r.below(aggs.len() as u64) as usize]);
        }
        if r.chance(10) {
            g.in_tree = Some(provs[r.below(provs.len() as u64) as usize].uuid);
        }
        g
    };
    if r.chance(70) {
        groups.push(grp(r, String::new(), false));
    }
    let ng = if groups.is_empty() {
        1 + r.below(3)
    } else {
        r.below(3)
    };
    for i in 0..ng {
        groups.push(grp(r, format!("_{i}"), true));
    }
    if groups.iter().all(|g| g.resources.is_empty()) {
        groups[0].resources.insert("VCPU".into(), 1);
    }
    let resourceless: Vec<String> = groups
        .iter()
        .filter(|g| g.resources.is_empty())
        .map(|g| g.suffix.clone())
        .collect();
    let mut same_subtree = Vec::new();
    let suffixed: Vec<String> = groups
        .iter()
        .filter(|g| !g.suffix.is_empty())
        .map(|g| g.suffix.clone())
        .collect();
    if !resourceless.is_empty() || (suffixed.len() > 1 && r.chance(30)) {
        let mut s: Vec<String> = suffixed
            .iter()
            .filter(|x| resourceless.contains(x) || r.chance(60))
            .cloned()
            .collect();
        if s.is_empty() {
            s.push(suffixed[0].clone());
        }
        same_subtree.push(s);
    }
    let mut root_required = vec![];
    let mut root_forbidden = vec![];
    if r.chance(10) {
        root_required.push(TRAITS[r.below(4) as usize].to_string());
    }
    if r.chance(10) {
        root_forbidden.push(TRAITS[r.below(4) as usize].to_string());
    }
    Req {
        groups,
        isolate: r.chance(40),
        same_subtree,
        root_required,
        root_forbidden,
        limit: if r.chance(50) {
            Some(1 + r.below(6) as usize)
        } else {
            None
        },
        nested_aware: r.chance(80),
    }
}

#[test]
fn limit_is_a_prefix_of_the_full_answer() {
    let mut limited = 0;
    for seed in 0..400u64 {
        let mut r = Rng(seed);
        let aggs: Vec<Uuid> = (0..4).map(|i| Uuid::from_u128(0xAA00 + i)).collect();
        let provs = fleet(&mut r, &aggs);
        for _ in 0..10 {
            let mut req = request(&mut r, &provs, &aggs);
            let Some(limit) = req.limit.take() else {
                continue;
            };
            let full = run!(engine, provs, &req);
            req.limit = Some(limit);
            let part = run!(engine, provs, &req);
            let (Ok(full), Ok(part)) = (full, part) else {
                continue;
            };
            let want: Vec<_> = full
                .allocation_requests
                .iter()
                .take(limit)
                .cloned()
                .collect();
            assert_eq!(part.allocation_requests, want, "seed {seed}: {req:?}");
            if full.allocation_requests.len() > limit {
                limited += 1;
            }
        }
    }
    assert!(
        limited > 50,
        "only {limited} requests were cut by their limit"
    );
}
