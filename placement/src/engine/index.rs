//! The provider index: providers, trees, inventories, usages, traits and
//! aggregates, interned to small integers with inverted indexes, plus the
//! generation-checked mutations that keep it in step with the database.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use fabric::ids::ProviderUuid;
use uuid::Uuid;

use super::bitset::BitSet;
use super::error::EngineError;

/// The trait that marks a provider as sharing its inventory with the
/// providers in its aggregates.
pub const MISC_SHARES_VIA_AGGREGATE: &str = "MISC_SHARES_VIA_AGGREGATE";

/// A placement aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AggregateUuid(pub Uuid);

impl fmt::Display for AggregateUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// Slot of a provider in the index (dense, reused after deletes).
pub(crate) type Slot = u32;
/// Interned resource class.
pub(crate) type RcId = u32;
/// Interned trait.
pub(crate) type TraitId = u32;
/// Interned aggregate.
pub(crate) type AggId = u32;

/// One inventory record, as upstream stores it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inventory {
    /// Total amount.
    pub total: u64,
    /// Reserved amount (not allocatable).
    pub reserved: u64,
    /// Smallest amount one allocation may take.
    pub min_unit: u64,
    /// Largest amount one allocation may take.
    pub max_unit: u64,
    /// Allocation amounts must be a multiple of this.
    pub step_size: u64,
    /// Overcommit ratio.
    pub allocation_ratio: f64,
}

impl Inventory {
    /// An inventory of `total` with upstream's defaults (`max_unit = total`).
    pub fn new(total: u64) -> Self {
        Self {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            allocation_ratio: 1.0,
        }
    }

    /// `(total - reserved) * allocation_ratio`, truncated like upstream.
    pub fn capacity(&self) -> u64 {
        (self.total.saturating_sub(self.reserved) as f64 * self.allocation_ratio) as u64
    }

    fn validate(&self, rc: &str) -> Result<(), EngineError> {
        let bad = |reason| {
            Err(EngineError::InvalidInventory {
                resource_class: rc.to_owned(),
                reason,
            })
        };
        if self.total == 0 {
            return bad("total must be at least 1");
        }
        if self.step_size == 0 || self.min_unit == 0 || self.max_unit == 0 {
            return bad("min_unit, max_unit and step_size must be at least 1");
        }
        if self.min_unit > self.max_unit {
            return bad("min_unit greater than max_unit");
        }
        if self.allocation_ratio.is_nan()
            || self.allocation_ratio <= 0.0
            || !self.allocation_ratio.is_finite()
        {
            return bad("allocation_ratio must be positive");
        }
        if self.reserved > self.total {
            return bad("reserved greater than total");
        }
        Ok(())
    }
}

/// A provider as the database holds it: the unit of snapshots and of
/// mirror updates (`Index::from_snapshot`, `Index::upsert_provider`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRecord {
    /// Provider UUID.
    pub uuid: ProviderUuid,
    /// Unique name.
    pub name: String,
    /// Current generation.
    pub generation: u32,
    /// Parent provider, if nested.
    pub parent: Option<ProviderUuid>,
    /// Inventory by resource class name.
    pub inventories: BTreeMap<String, Inventory>,
    /// Current usage (sum of allocations) by resource class name.
    pub usages: BTreeMap<String, u64>,
    /// Trait names.
    pub traits: Vec<String>,
    /// Aggregates.
    pub aggregates: Vec<AggregateUuid>,
}

impl ProviderRecord {
    /// A root provider with nothing on it, generation 0.
    pub fn new(uuid: ProviderUuid, name: impl Into<String>) -> Self {
        Self {
            uuid,
            name: name.into(),
            generation: 0,
            parent: None,
            inventories: BTreeMap::new(),
            usages: BTreeMap::new(),
            traits: Vec::new(),
            aggregates: Vec::new(),
        }
    }
}

/// One change to a provider's usage (an allocation written or removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageDelta {
    /// The provider.
    pub provider: ProviderUuid,
    /// Resource class name.
    pub resource_class: String,
    /// Positive to consume, negative to release.
    pub delta: i64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct InvEntry {
    pub(crate) rc: RcId,
    pub(crate) inv: Inventory,
    pub(crate) capacity: u64,
    pub(crate) used: u64,
}

impl InvEntry {
    /// Whether one more allocation of `amount` fits (upstream's capacity clause).
    #[inline]
    pub(crate) fn fits(&self, amount: u64) -> bool {
        amount >= self.inv.min_unit
            && amount <= self.inv.max_unit
            && amount.is_multiple_of(self.inv.step_size)
            && self.used.saturating_add(amount) <= self.capacity
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Provider {
    pub(crate) uuid: ProviderUuid,
    pub(crate) name: Arc<str>,
    pub(crate) generation: u32,
    pub(crate) parent: Option<Slot>,
    pub(crate) root: Slot,
    pub(crate) children: Vec<Slot>,
    /// Sorted by `rc`.
    pub(crate) inv: Vec<InvEntry>,
    /// Sorted.
    pub(crate) traits: Vec<TraitId>,
    /// Sorted.
    pub(crate) aggs: Vec<AggId>,
}

impl Provider {
    #[inline]
    pub(crate) fn inv(&self, rc: RcId) -> Option<&InvEntry> {
        self.inv.iter().find(|e| e.rc == rc)
    }
    fn inv_mut(&mut self, rc: RcId) -> Option<&mut InvEntry> {
        self.inv.iter_mut().find(|e| e.rc == rc)
    }
}

/// String interner: name ⇄ small id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Interner {
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        let a: Arc<str> = Arc::from(s);
        self.names.push(a.clone());
        self.ids.insert(a, id);
        id
    }
    pub(crate) fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }
    pub(crate) fn name(&self, id: u32) -> &Arc<str> {
        &self.names[id as usize]
    }
    fn heap_bytes(&self) -> usize {
        self.names.iter().map(|n| n.len() + 16).sum::<usize>()
            + self.names.capacity() * 16
            + self.ids.capacity() * 24
    }
}

/// The in-memory mirror of the placement database used to answer
/// `GET /allocation_candidates` and the `GET /resource_providers` filters.
#[derive(Debug, Clone)]
pub struct Index {
    pub(crate) providers: Vec<Option<Provider>>,
    free: Vec<Slot>,
    by_uuid: HashMap<ProviderUuid, Slot>,
    by_name: HashMap<Arc<str>, Slot>,
    pub(crate) rcs: Interner,
    pub(crate) traits: Interner,
    pub(crate) aggs: Vec<AggregateUuid>,
    agg_ids: HashMap<AggregateUuid, AggId>,
    /// Every live provider.
    pub(crate) live: BitSet,
    /// Every live root provider (the possible candidate anchors).
    pub(crate) roots: BitSet,
    /// Class → providers with an inventory of it.
    pub(crate) rc_providers: Vec<BitSet>,
    /// Trait → providers having it.
    pub(crate) trait_providers: Vec<BitSet>,
    /// Aggregate → member providers.
    pub(crate) agg_providers: Vec<BitSet>,
    /// Number of live providers that have a parent.
    pub(crate) nested: usize,
    pub(crate) sharing_trait: TraitId,
}

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        let mut traits = Interner::default();
        let sharing_trait = traits.intern(MISC_SHARES_VIA_AGGREGATE);
        Self {
            providers: Vec::new(),
            free: Vec::new(),
            by_uuid: HashMap::new(),
            by_name: HashMap::new(),
            rcs: Interner::default(),
            traits,
            aggs: Vec::new(),
            agg_ids: HashMap::new(),
            live: BitSet::new(),
            roots: BitSet::new(),
            rc_providers: Vec::new(),
            trait_providers: vec![BitSet::new()],
            agg_providers: Vec::new(),
            nested: 0,
            sharing_trait,
        }
    }

    /// Builds the index from a database snapshot. Parents may appear after
    /// their children in `records`.
    pub fn from_snapshot(records: Vec<ProviderRecord>) -> Result<Self, EngineError> {
        let mut idx = Self::new();
        let known: HashMap<ProviderUuid, usize> = records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.uuid, i))
            .collect();
        if known.len() != records.len() {
            let mut seen = std::collections::HashSet::new();
            for r in &records {
                if !seen.insert(r.uuid) {
                    return Err(EngineError::DuplicateUuid(r.uuid));
                }
            }
        }
        // Insert parents before children (iterative, tolerant of any order).
        let mut done = vec![false; records.len()];
        let mut records: Vec<Option<ProviderRecord>> = records.into_iter().map(Some).collect();
        for start in 0..records.len() {
            let mut chain = vec![start];
            loop {
                let cur = *chain.last().unwrap_or(&start);
                let parent = records[cur].as_ref().and_then(|r| r.parent);
                match parent.and_then(|p| known.get(&p).copied()) {
                    Some(pi) if !done[pi] => {
                        if chain.contains(&pi) {
                            return Err(EngineError::ParentLoop(
                                records[pi]
                                    .as_ref()
                                    .map(|r| r.uuid)
                                    .unwrap_or(ProviderUuid(Uuid::nil())),
                            ));
                        }
                        chain.push(pi);
                    }
                    _ => break,
                }
            }
            while let Some(i) = chain.pop() {
                if done[i] {
                    continue;
                }
                if let Some(rec) = records[i].take() {
                    idx.insert_record(rec)?;
                }
                done[i] = true;
            }
        }
        Ok(idx)
    }

    /// Number of live providers.
    pub fn len(&self) -> usize {
        self.by_uuid.len()
    }

    /// Whether the index holds no provider.
    pub fn is_empty(&self) -> bool {
        self.by_uuid.is_empty()
    }

    /// A provider's current generation.
    pub fn generation(&self, uuid: &ProviderUuid) -> Option<u32> {
        self.slot(uuid).map(|s| self.p(s).generation)
    }

    /// The provider as a record (what the database would hold).
    pub fn provider(&self, uuid: &ProviderUuid) -> Option<ProviderRecord> {
        self.slot(uuid).map(|s| self.record(s))
    }

    /// Every provider, as records (roots before their descendants).
    pub fn snapshot(&self) -> Vec<ProviderRecord> {
        let mut out = Vec::with_capacity(self.len());
        for (s, p) in self.iter_live() {
            if p.parent.is_none() {
                self.walk_tree(s, &mut |c| out.push(self.record(c)));
            }
        }
        out
    }

    /// Approximate heap bytes held by the index (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        let provider_size = std::mem::size_of::<Option<Provider>>();
        let mut n = self.providers.capacity() * provider_size + self.free.capacity() * 4;
        for p in self.providers.iter().flatten() {
            n += p.name.len() + 16;
            n += p.children.capacity() * 4
                + p.inv.capacity() * std::mem::size_of::<InvEntry>()
                + p.traits.capacity() * 4
                + p.aggs.capacity() * 4;
        }
        n += self.by_uuid.capacity() * (std::mem::size_of::<(ProviderUuid, Slot)>() + 1);
        n += self.by_name.capacity() * (std::mem::size_of::<(Arc<str>, Slot)>() + 1);
        n += self.rcs.heap_bytes() + self.traits.heap_bytes();
        n += self.aggs.capacity() * 16 + self.agg_ids.capacity() * 21;
        n += self.live.heap_bytes() + self.roots.heap_bytes();
        for b in self
            .rc_providers
            .iter()
            .chain(&self.trait_providers)
            .chain(&self.agg_providers)
        {
            n += b.heap_bytes() + std::mem::size_of::<BitSet>();
        }
        n
    }

    // ----- mutations (API style, generation checked) -----

    /// Creates a provider (generation 0). `POST /resource_providers`.
    pub fn create_provider(
        &mut self,
        uuid: ProviderUuid,
        name: &str,
        parent: Option<ProviderUuid>,
    ) -> Result<u32, EngineError> {
        let mut rec = ProviderRecord::new(uuid, name);
        rec.parent = parent;
        self.insert_record(rec)?;
        Ok(0)
    }

    /// Deletes a provider. Fails if it has children or usage.
    pub fn delete_provider(&mut self, uuid: &ProviderUuid) -> Result<(), EngineError> {
        let s = self.slot_or_404(uuid)?;
        let p = self.p(s);
        if !p.children.is_empty() {
            return Err(EngineError::HasChildren(*uuid));
        }
        if let Some(e) = p.inv.iter().find(|e| e.used > 0) {
            return Err(EngineError::InUse {
                uuid: *uuid,
                resource_class: self.rcs.name(e.rc).to_string(),
            });
        }
        self.remove_slot(s);
        Ok(())
    }

    /// Renames and/or re-parents a provider (`PUT /resource_providers/{uuid}`;
    /// re-parenting and un-parenting are microversion 1.37 — the HTTP layer
    /// refuses them before that). Does not bump the generation.
    pub fn update_provider(
        &mut self,
        uuid: &ProviderUuid,
        name: &str,
        parent: Option<ProviderUuid>,
    ) -> Result<(), EngineError> {
        let s = self.slot_or_404(uuid)?;
        if let Some(&other) = self.by_name.get(name) {
            if other != s {
                return Err(EngineError::DuplicateName(name.to_owned()));
            }
        }
        let new_parent = match parent {
            None => None,
            Some(pu) => Some(self.slot(&pu).ok_or(EngineError::ParentNotFound(pu))?),
        };
        if let Some(np) = new_parent {
            // np must not be s or one of s's descendants.
            let mut cur = Some(np);
            while let Some(c) = cur {
                if c == s {
                    return Err(EngineError::ParentLoop(*uuid));
                }
                cur = self.p(c).parent;
            }
        }
        // Rename.
        let old_name = self.p(s).name.clone();
        if &*old_name != name {
            self.by_name.remove(&old_name);
            let n: Arc<str> = Arc::from(name);
            self.by_name.insert(n.clone(), s);
            self.pm(s).name = n;
        }
        // Re-parent.
        let old_parent = self.p(s).parent;
        if old_parent != new_parent {
            if let Some(op) = old_parent {
                self.pm(op).children.retain(|&c| c != s);
                self.nested -= 1;
            }
            if let Some(np) = new_parent {
                self.pm(np).children.push(s);
                self.nested += 1;
            }
            self.pm(s).parent = new_parent;
            if new_parent.is_some() {
                self.roots.remove(s);
            } else {
                self.roots.insert(s);
            }
            let root = match new_parent {
                Some(np) => self.p(np).root,
                None => s,
            };
            let mut sub = Vec::new();
            self.walk_tree(s, &mut |c| sub.push(c));
            for c in sub {
                self.pm(c).root = root;
            }
        }
        Ok(())
    }

    /// Replaces all inventories (`PUT /resource_providers/{uuid}/inventories`).
    /// Removing a class that has usage fails with `InUse`. Returns the new generation.
    pub fn set_inventories(
        &mut self,
        uuid: &ProviderUuid,
        expected_generation: u32,
        inventories: &BTreeMap<String, Inventory>,
    ) -> Result<u32, EngineError> {
        let s = self.checked(uuid, expected_generation)?;
        for (rc, inv) in inventories {
            inv.validate(rc)?;
        }
        for e in &self.p(s).inv {
            let name = self.rcs.name(e.rc);
            if e.used > 0 && !inventories.contains_key(&**name) {
                return Err(EngineError::InUse {
                    uuid: *uuid,
                    resource_class: name.to_string(),
                });
            }
        }
        self.replace_inventories(s, inventories, None);
        Ok(self.bump(s))
    }

    /// Creates or replaces one inventory
    /// (`PUT /resource_providers/{uuid}/inventories/{rc}`). Returns the new generation.
    pub fn set_inventory(
        &mut self,
        uuid: &ProviderUuid,
        expected_generation: u32,
        resource_class: &str,
        inventory: Inventory,
    ) -> Result<u32, EngineError> {
        let s = self.checked(uuid, expected_generation)?;
        inventory.validate(resource_class)?;
        let rc = self.intern_rc(resource_class);
        let p = self.pm(s);
        match p.inv_mut(rc) {
            Some(e) => {
                e.inv = inventory;
                e.capacity = inventory.capacity();
            }
            None => {
                p.inv.push(InvEntry {
                    rc,
                    inv: inventory,
                    capacity: inventory.capacity(),
                    used: 0,
                });
                p.inv.sort_by_key(|e| e.rc);
                self.rc_providers[rc as usize].insert(s);
            }
        }
        Ok(self.bump(s))
    }

    /// Deletes one inventory; fails with `InUse` if it has usage.
    pub fn delete_inventory(
        &mut self,
        uuid: &ProviderUuid,
        expected_generation: u32,
        resource_class: &str,
    ) -> Result<u32, EngineError> {
        let s = self.checked(uuid, expected_generation)?;
        if let Some(rc) = self.rcs.get(resource_class) {
            if let Some(e) = self.p(s).inv(rc) {
                if e.used > 0 {
                    return Err(EngineError::InUse {
                        uuid: *uuid,
                        resource_class: resource_class.to_owned(),
                    });
                }
                self.pm(s).inv.retain(|e| e.rc != rc);
                self.rc_providers[rc as usize].remove(s);
            }
        }
        Ok(self.bump(s))
    }

    /// Replaces the provider's traits (`PUT /resource_providers/{uuid}/traits`).
    pub fn set_traits<S: AsRef<str>>(
        &mut self,
        uuid: &ProviderUuid,
        expected_generation: u32,
        traits: &[S],
    ) -> Result<u32, EngineError> {
        let s = self.checked(uuid, expected_generation)?;
        self.replace_traits(s, traits);
        Ok(self.bump(s))
    }

    /// Replaces the provider's aggregates (`PUT /resource_providers/{uuid}/aggregates`).
    /// From microversion 1.19 the generation is checked and bumped; pass
    /// `None` for older microversions (no check, no bump).
    pub fn set_aggregates(
        &mut self,
        uuid: &ProviderUuid,
        expected_generation: Option<u32>,
        aggregates: &[AggregateUuid],
    ) -> Result<u32, EngineError> {
        let s = match expected_generation {
            Some(g) => self.checked(uuid, g)?,
            None => self.slot_or_404(uuid)?,
        };
        self.replace_aggs(s, aggregates);
        Ok(match expected_generation {
            Some(_) => self.bump(s),
            None => self.p(s).generation,
        })
    }

    /// Applies allocation changes atomically: all deltas are validated
    /// before any is applied. With `check_capacity`, a positive delta must
    /// keep `used <= capacity` (a write path); without it (mirroring what
    /// the database already accepted) only unknown providers/classes and
    /// negative usage are refused. Every touched provider's generation is
    /// bumped once, as upstream does for allocation writes.
    pub fn apply_usage_deltas(
        &mut self,
        deltas: &[UsageDelta],
        check_capacity: bool,
    ) -> Result<(), EngineError> {
        // Net change per (slot, rc).
        let mut net: Vec<(Slot, RcId, i64, usize)> = Vec::with_capacity(deltas.len());
        for (i, d) in deltas.iter().enumerate() {
            let s = self.slot_or_404(&d.provider)?;
            let err = |reason| EngineError::CapacityExceeded {
                uuid: d.provider,
                resource_class: d.resource_class.clone(),
                amount: d.delta,
                reason,
            };
            let rc = self
                .rcs
                .get(&d.resource_class)
                .ok_or_else(|| err("no such inventory"))?;
            if self.p(s).inv(rc).is_none() {
                return Err(err("no such inventory"));
            }
            match net
                .iter_mut()
                .find(|(ns, nrc, _, _)| *ns == s && *nrc == rc)
            {
                Some(e) => e.2 += d.delta,
                None => net.push((s, rc, d.delta, i)),
            }
        }
        for &(s, rc, delta, i) in &net {
            let e = self
                .p(s)
                .inv(rc)
                .copied()
                .ok_or(EngineError::ProviderNotFound(deltas[i].provider))?;
            let new = e.used as i64 + delta;
            let d = &deltas[i];
            let err = |reason| EngineError::CapacityExceeded {
                uuid: d.provider,
                resource_class: d.resource_class.clone(),
                amount: delta,
                reason,
            };
            if new < 0 {
                return Err(err("usage would become negative"));
            }
            if check_capacity && delta > 0 && new as u64 > e.capacity {
                return Err(err("capacity exceeded"));
            }
        }
        let mut touched: Vec<Slot> = Vec::new();
        for &(s, rc, delta, _) in &net {
            if let Some(e) = self.pm(s).inv_mut(rc) {
                e.used = (e.used as i64 + delta) as u64;
            }
            if !touched.contains(&s) {
                touched.push(s);
            }
        }
        for s in touched {
            self.bump(s);
        }
        Ok(())
    }

    // ----- mirror updates (the database already decided) -----

    /// Inserts or replaces a provider exactly as the database holds it
    /// (generation included). Its parent must already be present. Children
    /// of a replaced provider are kept.
    pub fn upsert_provider(&mut self, rec: ProviderRecord) -> Result<(), EngineError> {
        match self.slot(&rec.uuid) {
            None => self.insert_record(rec).map(|_| ()),
            Some(s) => {
                self.update_provider(&rec.uuid, &rec.name, rec.parent)?;
                self.replace_inventories(s, &rec.inventories, Some(&rec.usages));
                self.replace_traits(s, &rec.traits);
                self.replace_aggs(s, &rec.aggregates);
                self.pm(s).generation = rec.generation;
                Ok(())
            }
        }
    }

    /// Removes a provider and (mirror semantics) its whole subtree.
    pub fn remove_provider(&mut self, uuid: &ProviderUuid) -> Result<(), EngineError> {
        let s = self.slot_or_404(uuid)?;
        let mut sub = Vec::new();
        self.walk_tree(s, &mut |c| sub.push(c));
        for c in sub.into_iter().rev() {
            self.remove_slot(c);
        }
        Ok(())
    }

    // ----- internals -----

    pub(crate) fn slot(&self, uuid: &ProviderUuid) -> Option<Slot> {
        self.by_uuid.get(uuid).copied()
    }

    fn slot_or_404(&self, uuid: &ProviderUuid) -> Result<Slot, EngineError> {
        self.slot(uuid).ok_or(EngineError::ProviderNotFound(*uuid))
    }

    fn checked(&self, uuid: &ProviderUuid, expected: u32) -> Result<Slot, EngineError> {
        let s = self.slot_or_404(uuid)?;
        let current = self.p(s).generation;
        if current != expected {
            return Err(EngineError::GenerationConflict {
                uuid: *uuid,
                expected,
                current,
            });
        }
        Ok(s)
    }

    fn bump(&mut self, s: Slot) -> u32 {
        let p = self.pm(s);
        p.generation = p.generation.wrapping_add(1);
        p.generation
    }

    #[inline]
    pub(crate) fn p(&self, s: Slot) -> &Provider {
        self.providers[s as usize].as_ref().expect("live slot")
    }

    fn pm(&mut self, s: Slot) -> &mut Provider {
        self.providers[s as usize].as_mut().expect("live slot")
    }

    pub(crate) fn iter_live(&self) -> impl Iterator<Item = (Slot, &Provider)> {
        self.providers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i as Slot, p)))
    }

    /// Pre-order walk of the subtree at `s`.
    pub(crate) fn walk_tree(&self, s: Slot, f: &mut dyn FnMut(Slot)) {
        let mut stack = vec![s];
        while let Some(c) = stack.pop() {
            f(c);
            let p = self.p(c);
            stack.extend(p.children.iter().rev().copied());
        }
    }

    fn record(&self, s: Slot) -> ProviderRecord {
        let p = self.p(s);
        ProviderRecord {
            uuid: p.uuid,
            name: p.name.to_string(),
            generation: p.generation,
            parent: p.parent.map(|ps| self.p(ps).uuid),
            inventories: p
                .inv
                .iter()
                .map(|e| (self.rcs.name(e.rc).to_string(), e.inv))
                .collect(),
            usages: p
                .inv
                .iter()
                .filter(|e| e.used > 0)
                .map(|e| (self.rcs.name(e.rc).to_string(), e.used))
                .collect(),
            traits: p
                .traits
                .iter()
                .map(|&t| self.traits.name(t).to_string())
                .collect(),
            aggregates: p.aggs.iter().map(|&a| self.aggs[a as usize]).collect(),
        }
    }

    fn intern_rc(&mut self, name: &str) -> RcId {
        let id = self.rcs.intern(name);
        if id as usize >= self.rc_providers.len() {
            self.rc_providers.resize(id as usize + 1, BitSet::new());
        }
        id
    }

    fn intern_trait(&mut self, name: &str) -> TraitId {
        let id = self.traits.intern(name);
        if id as usize >= self.trait_providers.len() {
            self.trait_providers.resize(id as usize + 1, BitSet::new());
        }
        id
    }

    fn intern_agg(&mut self, a: AggregateUuid) -> AggId {
        if let Some(&id) = self.agg_ids.get(&a) {
            return id;
        }
        let id = self.aggs.len() as AggId;
        self.aggs.push(a);
        self.agg_ids.insert(a, id);
        self.agg_providers.push(BitSet::new());
        id
    }

    pub(crate) fn agg_id(&self, a: &AggregateUuid) -> Option<AggId> {
        self.agg_ids.get(a).copied()
    }

    fn insert_record(&mut self, rec: ProviderRecord) -> Result<Slot, EngineError> {
        if self.by_uuid.contains_key(&rec.uuid) {
            return Err(EngineError::DuplicateUuid(rec.uuid));
        }
        if self.by_name.contains_key(rec.name.as_str()) {
            return Err(EngineError::DuplicateName(rec.name));
        }
        let parent = match rec.parent {
            None => None,
            Some(pu) => Some(self.slot(&pu).ok_or(EngineError::ParentNotFound(pu))?),
        };
        for (rc, inv) in &rec.inventories {
            inv.validate(rc)?;
        }
        if let Some((rc, _)) = rec
            .usages
            .iter()
            .find(|(rc, u)| **u > 0 && !rec.inventories.contains_key(*rc))
        {
            return Err(EngineError::InUse {
                uuid: rec.uuid,
                resource_class: rc.clone(),
            });
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                self.providers.push(None);
                (self.providers.len() - 1) as Slot
            }
        };
        let name: Arc<str> = Arc::from(rec.name.as_str());
        let root = match parent {
            Some(ps) => self.p(ps).root,
            None => s,
        };
        self.providers[s as usize] = Some(Provider {
            uuid: rec.uuid,
            name: name.clone(),
            generation: rec.generation,
            parent,
            root,
            children: Vec::new(),
            inv: Vec::new(),
            traits: Vec::new(),
            aggs: Vec::new(),
        });
        if let Some(ps) = parent {
            self.pm(ps).children.push(s);
            self.nested += 1;
        }
        self.by_uuid.insert(rec.uuid, s);
        self.by_name.insert(name, s);
        self.live.insert(s);
        if parent.is_none() {
            self.roots.insert(s);
        }
        self.replace_inventories(s, &rec.inventories, Some(&rec.usages));
        self.replace_traits(s, &rec.traits);
        self.replace_aggs(s, &rec.aggregates);
        Ok(s)
    }

    fn remove_slot(&mut self, s: Slot) {
        let p = self.providers[s as usize].take().expect("live slot");
        if let Some(ps) = p.parent {
            self.pm(ps).children.retain(|&c| c != s);
            self.nested -= 1;
        }
        for e in &p.inv {
            self.rc_providers[e.rc as usize].remove(s);
        }
        for &t in &p.traits {
            self.trait_providers[t as usize].remove(s);
        }
        for &a in &p.aggs {
            self.agg_providers[a as usize].remove(s);
        }
        self.by_uuid.remove(&p.uuid);
        self.by_name.remove(&p.name);
        self.live.remove(s);
        self.roots.remove(s);
        self.free.push(s);
    }

    /// Replaces inventories; usage is kept for classes that stay, or taken
    /// from `usages` when given.
    fn replace_inventories(
        &mut self,
        s: Slot,
        inventories: &BTreeMap<String, Inventory>,
        usages: Option<&BTreeMap<String, u64>>,
    ) {
        let old = std::mem::take(&mut self.pm(s).inv);
        for e in &old {
            self.rc_providers[e.rc as usize].remove(s);
        }
        let mut new = Vec::with_capacity(inventories.len());
        for (name, inv) in inventories {
            let rc = self.intern_rc(name);
            let used = match usages {
                Some(u) => u.get(name).copied().unwrap_or(0),
                None => old.iter().find(|e| e.rc == rc).map_or(0, |e| e.used),
            };
            new.push(InvEntry {
                rc,
                inv: *inv,
                capacity: inv.capacity(),
                used,
            });
            self.rc_providers[rc as usize].insert(s);
        }
        new.sort_by_key(|e| e.rc);
        self.pm(s).inv = new;
    }

    fn replace_traits<S: AsRef<str>>(&mut self, s: Slot, traits: &[S]) {
        let old = std::mem::take(&mut self.pm(s).traits);
        for t in old {
            self.trait_providers[t as usize].remove(s);
        }
        let mut new: Vec<TraitId> = traits
            .iter()
            .map(|t| self.intern_trait(t.as_ref()))
            .collect();
        new.sort_unstable();
        new.dedup();
        for &t in &new {
            self.trait_providers[t as usize].insert(s);
        }
        self.pm(s).traits = new;
    }

    fn replace_aggs(&mut self, s: Slot, aggs: &[AggregateUuid]) {
        let old = std::mem::take(&mut self.pm(s).aggs);
        for a in old {
            self.agg_providers[a as usize].remove(s);
        }
        let mut new: Vec<AggId> = aggs.iter().map(|a| self.intern_agg(*a)).collect();
        new.sort_unstable();
        new.dedup();
        for &a in &new {
            self.agg_providers[a as usize].insert(s);
        }
        self.pm(s).aggs = new;
    }
}
