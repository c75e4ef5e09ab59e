//! Index mutations: generations, conflicts, trees, snapshots.

use std::collections::BTreeMap;

use fabric::ids::ProviderUuid;
use placement::engine::{EngineError, Index, Inventory, ProviderRecord, UsageDelta};

use crate::fixtures::{request, shared_storage, unsuffixed};

#[test]
fn generations_are_checked_and_bumped() {
    let mut idx = Index::new();
    let a = ProviderUuid::new_random();
    assert_eq!(idx.create_provider(a, "a", None).unwrap(), 0);
    let inv: BTreeMap<String, Inventory> = [("VCPU".to_owned(), Inventory::new(4))].into();
    assert_eq!(idx.set_inventories(&a, 0, &inv).unwrap(), 1);
    assert!(matches!(
        idx.set_inventories(&a, 0, &inv),
        Err(EngineError::GenerationConflict {
            expected: 0,
            current: 1,
            ..
        })
    ));
    assert_eq!(idx.set_traits(&a, 1, &["CUSTOM_X"]).unwrap(), 2);
    // Aggregates before 1.19: no check, no bump.
    assert_eq!(idx.set_aggregates(&a, None, &[]).unwrap(), 2);
    let d = UsageDelta {
        provider: a,
        resource_class: "VCPU".into(),
        delta: 3,
    };
    idx.apply_usage_deltas(std::slice::from_ref(&d), true)
        .unwrap();
    assert_eq!(idx.generation(&a), Some(3));
    // 3 + 3 > 4.
    assert!(matches!(
        idx.apply_usage_deltas(&[d], true),
        Err(EngineError::CapacityExceeded { .. })
    ));
    // Removing an inventory in use.
    assert!(matches!(
        idx.set_inventories(&a, 3, &BTreeMap::new()),
        Err(EngineError::InUse { .. })
    ));
    assert!(matches!(
        idx.delete_provider(&a),
        Err(EngineError::InUse { .. })
    ));
    let release = UsageDelta {
        provider: a,
        resource_class: "VCPU".into(),
        delta: -3,
    };
    idx.apply_usage_deltas(&[release], true).unwrap();
    idx.delete_provider(&a).unwrap();
    assert!(idx.is_empty());
}

#[test]
fn trees_and_reparenting() {
    let mut idx = Index::new();
    let (r, c, g) = (
        ProviderUuid::new_random(),
        ProviderUuid::new_random(),
        ProviderUuid::new_random(),
    );
    idx.create_provider(r, "r", None).unwrap();
    idx.create_provider(c, "c", Some(r)).unwrap();
    idx.create_provider(g, "g", Some(c)).unwrap();
    assert!(matches!(
        idx.create_provider(ProviderUuid::new_random(), "g", None),
        Err(EngineError::DuplicateName(_))
    ));
    assert!(matches!(
        idx.delete_provider(&c),
        Err(EngineError::HasChildren(_))
    ));
    assert!(matches!(
        idx.update_provider(&r, "r", Some(g)),
        Err(EngineError::ParentLoop(_))
    ));
    // Un-parent c (1.37): c and g become their own tree.
    idx.update_provider(&c, "c2", None).unwrap();
    let snap = idx.snapshot();
    let roots: Vec<_> = snap
        .iter()
        .filter(|p| p.parent.is_none())
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(roots.len(), 2);
    let f = placement::engine::ProviderFilter {
        in_tree: Some(g),
        ..Default::default()
    };
    let mut tree = idx.list_providers(&f).unwrap();
    tree.sort();
    let mut want = vec![c, g];
    want.sort();
    assert_eq!(tree, want);
}

#[test]
fn snapshot_roundtrip_and_mirror_updates() {
    let e = shared_storage();
    let mut snap = e.index.snapshot();
    snap.reverse(); // children before parents must still load
    let mut idx = Index::from_snapshot(snap).unwrap();
    let req = request(
        vec![unsuffixed("VCPU:1,MEMORY_MB:1024,DISK_GB:100")],
        Default::default(),
    );
    assert_eq!(
        idx.allocation_candidates(&req)
            .unwrap()
            .allocation_requests
            .len(),
        e.query(&req).allocation_requests.len()
    );
    // Mirror: the database says ss2 now has 1900 DISK_GB used, generation 42.
    let mut rec: ProviderRecord = idx.provider(&e.rp["ss2"]).unwrap();
    rec.usages.insert("DISK_GB".into(), 1900);
    rec.generation = 42;
    idx.upsert_provider(rec).unwrap();
    assert_eq!(idx.generation(&e.rp["ss2"]), Some(42));
    assert_eq!(
        idx.allocation_candidates(&req)
            .unwrap()
            .allocation_requests
            .len(),
        3
    );
    idx.remove_provider(&e.rp["cn1"]).unwrap();
    assert_eq!(idx.len(), 12 - 5);
    assert_eq!(
        idx.allocation_candidates(&req)
            .unwrap()
            .allocation_requests
            .len(),
        2
    );
}
