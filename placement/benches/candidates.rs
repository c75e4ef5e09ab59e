//! Allocation candidates over the in-memory index.
//!
//! Fleet: N root providers with VCPU, MEMORY_MB and DISK_GB, 10% with
//! CUSTOM_FOO, aggregates of 50. Queries: plain, `required=CUSTOM_FOO`,
//! `member_of=<agg>`, all with `limit=1000`. Variants: `flat` (the fast
//! path), `general` (one sharing provider: the tree/sharing-aware path) and
//! `nested` (every 10th compute node has a child with SRIOV_NET_VF, and a
//! fourth query asks for VFs too). Index memory is reported from
//! `Index::heap_bytes` (a counting global allocator would need `unsafe`,
//! which the workspace forbids).
//!
//! `cargo bench -p placement --bench candidates -- candidates_10000`

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fabric::ids::ProviderUuid;
use placement::engine::{
    AggregateUuid, CandidatesRequest, Index, Inventory, ProviderRecord, RequestGroup,
};
use uuid::Uuid;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Flat,
    General,
    Nested,
}

impl Variant {
    fn suffix(self) -> &'static str {
        match self {
            Variant::Flat => "",
            Variant::General => "_general",
            Variant::Nested => "_nested",
        }
    }
}

fn fleet(n: usize, variant: Variant) -> (Index, Vec<AggregateUuid>) {
    let aggs: Vec<AggregateUuid> = (0..n.div_ceil(50))
        .map(|i| AggregateUuid(Uuid::from_u128(0xA66_0000 + i as u128)))
        .collect();
    let mut recs: Vec<ProviderRecord> = (0..n)
        .map(|i| {
            let mut r = ProviderRecord::new(
                ProviderUuid(Uuid::from_u128(i as u128 + 1)),
                format!("cn{i:05}"),
            );
            r.inventories = BTreeMap::from([
                (
                    "VCPU".to_owned(),
                    Inventory {
                        allocation_ratio: 16.0,
                        ..Inventory::new(64)
                    },
                ),
                (
                    "MEMORY_MB".to_owned(),
                    Inventory {
                        allocation_ratio: 1.5,
                        ..Inventory::new(256 * 1024)
                    },
                ),
                ("DISK_GB".to_owned(), Inventory::new(2000)),
            ]);
            r.usages = BTreeMap::from([
                ("VCPU".to_owned(), (i % 7) as u64),
                ("MEMORY_MB".to_owned(), 2048),
            ]);
            r.traits = vec!["HW_CPU_X86_AVX2".to_owned()];
            if i % 10 == 0 {
                r.traits.push("CUSTOM_FOO".to_owned());
            }
            r.aggregates = vec![aggs[i / 50]];
            r
        })
        .collect();
    if variant == Variant::Nested {
        for i in (0..n).step_by(10) {
            let mut r = ProviderRecord::new(
                ProviderUuid(Uuid::from_u128((1 << 64) + i as u128)),
                format!("cn{i:05}-pf"),
            );
            r.parent = Some(ProviderUuid(Uuid::from_u128(i as u128 + 1)));
            r.inventories = BTreeMap::from([("SRIOV_NET_VF".to_owned(), Inventory::new(8))]);
            recs.push(r);
        }
    }
    if variant == Variant::General {
        let mut r = ProviderRecord::new(ProviderUuid(Uuid::from_u128(u128::MAX)), "shared-disk");
        r.inventories = BTreeMap::from([("DISK_GB".to_owned(), Inventory::new(100_000))]);
        r.traits = vec!["MISC_SHARES_VIA_AGGREGATE".to_owned()];
        r.aggregates = vec![aggs[0]];
        recs.push(r);
    }
    (Index::from_snapshot(recs).expect("fleet"), aggs)
}

fn queries(aggs: &[AggregateUuid]) -> Vec<(&'static str, CandidatesRequest)> {
    let base = RequestGroup::unsuffixed([("VCPU", 1), ("MEMORY_MB", 256), ("DISK_GB", 10)]);
    let req = |g: RequestGroup| CandidatesRequest {
        limit: Some(1000),
        ..CandidatesRequest::new(vec![g])
    };
    let mut required = base.clone();
    required.required = vec![vec!["CUSTOM_FOO".to_owned()]];
    let mut member_of = base.clone();
    member_of.member_of = vec![vec![aggs[aggs.len() / 2], aggs[aggs.len() / 3]]];
    let mut vf = base.clone();
    vf.resources.insert("SRIOV_NET_VF".to_owned(), 2);
    vec![
        ("plain", req(base)),
        ("required", req(required)),
        ("member_of", req(member_of)),
        ("vf", req(vf)),
    ]
}

fn bench(c: &mut Criterion) {
    for n in [1_000usize, 10_000] {
        for variant in [Variant::Flat, Variant::General, Variant::Nested] {
            let (idx, aggs) = fleet(n, variant);
            if variant == Variant::Flat {
                let bytes = idx.heap_bytes();
                eprintln!(
                    "index memory: {n} providers, {bytes} bytes, {} bytes/provider",
                    bytes / n
                );
            }
            let mut group = c.benchmark_group(format!("candidates_{n}{}", variant.suffix()));
            for (name, q) in queries(&aggs) {
                if name == "vf" && variant != Variant::Nested {
                    continue;
                }
                let got = idx.allocation_candidates(&q).expect("query");
                eprintln!(
                    "{n}{} {name}: {} candidates, {} summaries",
                    variant.suffix(),
                    got.allocation_requests.len(),
                    got.provider_summaries.len()
                );
                group.bench_with_input(BenchmarkId::from_parameter(name), &q, |b, q| {
                    b.iter(|| black_box(idx.allocation_candidates(black_box(q)).expect("query")))
                });
            }
            group.finish();
        }
    }
    c.bench_function("build_index_10000", |b| {
        b.iter(|| black_box(fleet(10_000, Variant::Flat)));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
