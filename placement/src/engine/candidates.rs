//! `GET /allocation_candidates` over the index.
//!
//! Mirrors upstream's algorithm: each request group yields per-group
//! candidates keyed by their *anchor* (the root of the tree they serve; a
//! sharing provider serves every tree it shares an aggregate with); the
//! groups are then combined per anchor (cartesian product) and filtered by
//! `group_policy`, `same_subtree`, and a final capacity check on the merged
//! amounts. A fast path handles the common case (one unsuffixed group, no
//! nested or sharing providers anywhere); the general path visits anchors in
//! slot order, builds every group's candidates for one anchor at a time and
//! stops at `limit` (the same answer as enumerating everything and
//! truncating; `tests/it/engine_limit.rs` checks that on random fleets).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use fabric::ids::ProviderUuid;

use super::bitset::BitSet;
use super::error::EngineError;
use super::index::{Index, RcId, Slot, TraitId};
use super::request::{CandidateOrder, CandidatesRequest, GroupPolicy, RequestGroup};

/// The answer to `GET /allocation_candidates`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllocationCandidates {
    /// One entry per candidate.
    pub allocation_requests: Vec<AllocationRequest>,
    /// Every provider of every tree involved in the returned candidates.
    pub provider_summaries: Vec<ProviderSummary>,
}

/// One way to satisfy the whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationRequest {
    /// Amounts per provider, providers in index order.
    pub allocations: Vec<ProviderAllocation>,
    /// Request group suffix (`""` for unsuffixed) → providers satisfying it
    /// (microversion 1.34 `mappings`).
    pub mappings: BTreeMap<Arc<str>, Vec<ProviderUuid>>,
}

/// Amounts taken from one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderAllocation {
    /// The provider.
    pub provider: ProviderUuid,
    /// Resource class → amount.
    pub resources: Vec<(Arc<str>, u64)>,
}

/// `provider_summaries` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSummary {
    /// The provider.
    pub provider: ProviderUuid,
    /// Its parent (1.29).
    pub parent: Option<ProviderUuid>,
    /// Its root (1.29).
    pub root: ProviderUuid,
    /// Every inventory class (1.27 shows all; older microversions show only
    /// the requested classes — the HTTP layer filters).
    pub resources: Vec<SummaryResource>,
    /// Trait names (1.17).
    pub traits: Vec<Arc<str>>,
}

/// Capacity and usage of one class on one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryResource {
    /// Resource class.
    pub resource_class: Arc<str>,
    /// `(total - reserved) * allocation_ratio`.
    pub capacity: u64,
    /// Current usage.
    pub used: u64,
}

/// A group compiled against the index.
pub(crate) struct Compiled {
    pub(crate) same_provider: bool,
    /// Sorted by class id.
    pub(crate) resources: Vec<(RcId, u64)>,
    /// AND of any-of sets (unknown traits dropped; an empty set means
    /// unsatisfiable, recorded in `impossible`).
    pub(crate) required: Vec<Vec<TraitId>>,
    pub(crate) forbidden: Vec<TraitId>,
    /// Providers whose own aggregates satisfy `member_of`.
    pub(crate) member: Option<BitSet>,
    /// Providers in any forbidden aggregate.
    pub(crate) bad_aggs: Option<BitSet>,
    pub(crate) in_tree_root: Option<Slot>,
    pub(crate) impossible: bool,
}

/// A candidate for one group, anchored to a tree root.
#[derive(Debug, Clone)]
struct GroupCand {
    anchor: Slot,
    /// (provider, class, amount).
    allocs: Vec<(Slot, RcId, u64)>,
    /// Providers satisfying the group (sorted, deduplicated).
    providers: Vec<Slot>,
}

/// A merged candidate before it is turned into UUIDs and names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Merged {
    /// Sorted by (provider, class), summed.
    allocs: Vec<(Slot, RcId, u64)>,
    /// Per group (request order): providers.
    mappings: Vec<Vec<Slot>>,
}

impl Index {
    /// Answers `GET /allocation_candidates`.
    pub fn allocation_candidates(
        &self,
        req: &CandidatesRequest,
    ) -> Result<AllocationCandidates, EngineError> {
        validate(req)?;
        let groups: Vec<Compiled> = req.groups.iter().map(|g| self.compile(g)).collect();
        if groups.iter().any(|g| g.impossible) {
            return Ok(AllocationCandidates::default());
        }
        let anchors = self.anchor_filter(req);
        if anchors.as_ref().is_some_and(|a| a.is_empty()) {
            return Ok(AllocationCandidates::default());
        }
        let early_limit = match req.order {
            CandidateOrder::Deterministic => req.limit,
            CandidateOrder::Shuffle { .. } => None,
        };

        let has_sharing = !self.trait_providers[self.sharing_trait as usize].is_empty();
        let mut merged = if groups.len() == 1 && self.nested == 0 && !has_sharing {
            self.fast_single(&groups[0], anchors.as_ref(), early_limit)
        } else {
            self.general(req, &groups, anchors.as_ref(), early_limit)
        };

        if let CandidateOrder::Shuffle { seed } = req.order {
            let mut rng = SplitMix64(seed);
            let n = merged.len();
            let k = req.limit.unwrap_or(n).min(n);
            // Partial Fisher-Yates: a uniform random sample of k, in random order.
            for i in 0..k {
                let j = i + (rng.next() % (n - i) as u64) as usize;
                merged.swap(i, j);
            }
            merged.truncate(k);
        } else if let Some(l) = req.limit {
            merged.truncate(l);
        }
        Ok(self.materialize(&req.groups, merged, req.nested_aware))
    }

    pub(crate) fn compile(&self, g: &RequestGroup) -> Compiled {
        let mut impossible = false;
        let mut resources = Vec::with_capacity(g.resources.len());
        for (name, &amount) in &g.resources {
            match self.rcs.get(name) {
                Some(rc) => resources.push((rc, amount)),
                None => impossible = true,
            }
        }
        resources.sort_unstable();
        let mut required = Vec::with_capacity(g.required.len());
        for any in &g.required {
            let ids: Vec<TraitId> = any
                .iter()
                .filter_map(|t| self.traits.get(t))
                .filter(|&t| !self.trait_providers[t as usize].is_empty())
                .collect();
            if ids.is_empty() {
                impossible = true;
            }
            required.push(ids);
        }
        let forbidden = g
            .forbidden
            .iter()
            .filter_map(|t| self.traits.get(t))
            .collect();
        let member = if g.member_of.is_empty() {
            None
        } else {
            let mut acc = self.live.clone();
            for any in &g.member_of {
                let mut u = BitSet::new();
                for a in any {
                    if let Some(id) = self.agg_id(a) {
                        u.union_with(&self.agg_providers[id as usize]);
                    }
                }
                acc.intersect_with(&u);
            }
            if acc.is_empty() {
                impossible = true;
            }
            Some(acc)
        };
        let bad_aggs = if g.forbidden_aggregates.is_empty() {
            None
        } else {
            let mut u = BitSet::new();
            for a in &g.forbidden_aggregates {
                if let Some(id) = self.agg_id(a) {
                    u.union_with(&self.agg_providers[id as usize]);
                }
            }
            Some(u)
        };
        let in_tree_root = match &g.in_tree {
            None => None,
            Some(u) => match self.slot(u) {
                Some(s) => Some(self.p(s).root),
                None => {
                    impossible = true;
                    None
                }
            },
        };
        Compiled {
            same_provider: g.use_same_provider(),
            resources,
            required,
            forbidden,
            member,
            bad_aggs,
            in_tree_root,
            impossible,
        }
    }

    /// Roots allowed by `root_required` / `root_forbidden`; `None` = all.
    fn anchor_filter(&self, req: &CandidatesRequest) -> Option<BitSet> {
        if req.root_required.is_empty() && req.root_forbidden.is_empty() {
            return None;
        }
        let mut roots = self.roots.clone();
        for t in &req.root_required {
            match self.traits.get(t) {
                Some(id) => roots.intersect_with(&self.trait_providers[id as usize]),
                None => return Some(BitSet::new()),
            }
        }
        for t in &req.root_forbidden {
            if let Some(id) = self.traits.get(t) {
                roots.difference_with(&self.trait_providers[id as usize]);
            }
        }
        Some(roots)
    }

    /// Providers that alone satisfy the group's traits and aggregates and
    /// have an inventory of every requested class (capacity not yet checked).
    pub(crate) fn single_provider_set(&self, g: &Compiled) -> BitSet {
        let mut set = match g.resources.first() {
            Some(&(rc, _)) => self.rc_providers[rc as usize].clone(),
            None => self.live.clone(),
        };
        for &(rc, _) in g.resources.iter().skip(1) {
            set.intersect_with(&self.rc_providers[rc as usize]);
        }
        for any in &g.required {
            if let [t] = any.as_slice() {
                set.intersect_with(&self.trait_providers[*t as usize]);
            } else {
                let mut u = BitSet::new();
                for &t in any {
                    u.union_with(&self.trait_providers[t as usize]);
                }
                set.intersect_with(&u);
            }
        }
        if let Some(m) = &g.member {
            set.intersect_with(m);
        }
        for &t in &g.forbidden {
            set.difference_with(&self.trait_providers[t as usize]);
        }
        if let Some(b) = &g.bad_aggs {
            set.difference_with(b);
        }
        set
    }

    #[inline]
    pub(crate) fn fits_all(&self, s: Slot, resources: &[(RcId, u64)]) -> bool {
        let p = self.p(s);
        resources
            .iter()
            .all(|&(rc, amount)| p.inv(rc).is_some_and(|e| e.fits(amount)))
    }

    /// One unsuffixed group, every provider a root, no sharing providers.
    fn fast_single(
        &self,
        g: &Compiled,
        anchors: Option<&BitSet>,
        limit: Option<usize>,
    ) -> Vec<Merged> {
        let set = self.single_provider_set(g);
        let mut out = Vec::with_capacity(limit.unwrap_or(64).min(set.len()));
        for s in set.iter() {
            if g.in_tree_root.is_some_and(|r| r != s) || anchors.is_some_and(|a| !a.contains(s)) {
                continue;
            }
            if !self.fits_all(s, &g.resources) {
                continue;
            }
            out.push(Merged {
                allocs: g.resources.iter().map(|&(rc, a)| (s, rc, a)).collect(),
                mappings: vec![vec![s]],
            });
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
        }
        out
    }

    /// Roots of every tree that has a provider sharing an aggregate with `s`.
    fn sharing_anchors(&self, s: Slot) -> Vec<Slot> {
        let mut out = Vec::new();
        for &a in &self.p(s).aggs {
            for q in self.agg_providers[a as usize].iter() {
                out.push(self.p(q).root);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Sharing providers by the anchors they serve: `(anchor, provider)`
    /// pairs, sorted, for the sharing providers that can matter to `groups`
    /// (an inventory of a requested class, or any when a group is
    /// resourceless). A sharing provider never serves its own tree this way.
    fn shared_by_anchor(&self, groups: &[Compiled]) -> Vec<(Slot, Slot)> {
        let sharing = &self.trait_providers[self.sharing_trait as usize];
        let any_resourceless = groups.iter().any(|g| g.resources.is_empty());
        let mut pairs = Vec::new();
        for s in sharing.iter() {
            let p = self.p(s);
            let relevant = any_resourceless
                || groups
                    .iter()
                    .any(|g| g.resources.iter().any(|&(rc, _)| p.inv(rc).is_some()));
            if !relevant {
                continue;
            }
            for anchor in self.sharing_anchors(s) {
                if anchor != p.root {
                    pairs.push((anchor, s));
                }
            }
        }
        pairs.sort_unstable();
        pairs
    }

    /// The general (nested/sharing-aware) path. Anchors (tree roots) are
    /// visited in slot order; for each, every group's candidates for that
    /// anchor are built and combined, and the walk stops once `limit`
    /// distinct candidates exist. The order is the same as a full
    /// enumeration followed by truncation.
    fn general(
        &self,
        req: &CandidatesRequest,
        groups: &[Compiled],
        anchors: Option<&BitSet>,
        limit: Option<usize>,
    ) -> Vec<Merged> {
        let mut out = Vec::new();
        if groups.is_empty() || limit == Some(0) {
            return out;
        }
        let sets: Vec<Option<BitSet>> = groups
            .iter()
            .map(|g| g.same_provider.then(|| self.single_provider_set(g)))
            .collect();
        if sets.iter().flatten().any(BitSet::is_empty) {
            return out;
        }
        let shared = self.shared_by_anchor(groups);
        let granular = groups.iter().filter(|g| g.same_provider).count();
        let subtree_sets: Vec<Vec<usize>> = req
            .same_subtree
            .iter()
            .map(|sfx| {
                sfx.iter()
                    .filter_map(|s| req.groups.iter().position(|g| &g.suffix == s))
                    .collect()
            })
            .collect();
        let mut visit = self.roots.clone();
        if let Some(a) = anchors {
            visit.intersect_with(a);
        }
        // When a group is pinned to one tree and cannot reach others
        // through sharing providers, only that tree can anchor.
        for g in groups {
            if let (Some(r), false) = (g.in_tree_root, g.same_provider) {
                let only = visit.contains(r);
                visit = BitSet::new();
                if only {
                    visit.insert(r);
                }
            }
        }

        // Cheap superset of the anchors that can satisfy each group: the
        // roots of its possible providers, plus every anchor a relevant
        // sharing provider serves. The per-anchor walk below decides.
        let mut served = BitSet::new();
        for &(anchor, _) in &shared {
            served.insert(anchor);
        }
        for (g, set) in groups.iter().zip(&sets) {
            let mut possible = match set {
                Some(set) => self.roots_of(set),
                None => {
                    let mut acc = self.roots.clone();
                    for &(rc, _) in &g.resources {
                        acc.intersect_with(&self.roots_of(&self.rc_providers[rc as usize]));
                    }
                    for any in &g.required {
                        let mut holders = BitSet::new();
                        for &t in any {
                            holders.union_with(&self.trait_providers[t as usize]);
                        }
                        acc.intersect_with(&self.roots_of(&holders));
                    }
                    if let Some(m) = &g.member {
                        acc.intersect_with(&self.roots_of(m));
                    }
                    acc
                }
            };
            possible.union_with(&served);
            visit.intersect_with(&possible);
        }

        let sharing = &self.trait_providers[self.sharing_trait as usize];
        let mut seen: HashSet<Merged> = HashSet::new();
        let mut cands: Vec<Vec<GroupCand>> = groups.iter().map(|_| Vec::new()).collect();
        let mut lists: Vec<Vec<Slot>> = Vec::new();
        let mut tree: Vec<Slot> = Vec::new();
        let mut sh: Vec<Slot> = Vec::new();
        let mut cursor = 0usize;
        'anchors: for anchor in visit.iter() {
            while cursor < shared.len() && shared[cursor].0 < anchor {
                cursor += 1;
            }
            sh.clear();
            while cursor < shared.len() && shared[cursor].0 == anchor {
                sh.push(shared[cursor].1);
                cursor += 1;
            }
            self.subtree_into(anchor, &mut tree);
            for (gi, g) in groups.iter().enumerate() {
                let c = &mut cands[gi];
                c.clear();
                match &sets[gi] {
                    Some(set) => self.anchor_same_provider(g, set, anchor, &tree, &sh, c),
                    None => self.anchor_tree(g, anchor, &tree, &sh, &mut lists, c),
                }
                if c.is_empty() {
                    continue 'anchors;
                }
            }
            let mut idx = vec![0usize; cands.len()];
            let mut combo: Vec<&GroupCand> = Vec::with_capacity(cands.len());
            loop {
                combo.clear();
                combo.extend(idx.iter().zip(&cands).map(|(&i, l)| &l[i]));
                if let Some(m) = self.combine(req, groups, granular, &subtree_sets, &combo) {
                    // Candidates of one anchor are distinct; only one that
                    // uses no non-sharing provider of this tree can also come
                    // from another anchor.
                    let local = m
                        .mappings
                        .iter()
                        .flatten()
                        .any(|&s| self.p(s).root == anchor && !sharing.contains(s));
                    if local || (!seen.contains(&m) && seen.insert(m.clone())) {
                        out.push(m);
                        if limit.is_some_and(|l| out.len() >= l) {
                            break 'anchors;
                        }
                    }
                }
                if !advance(&mut idx, |k| cands[k].len()) {
                    break;
                }
            }
        }
        out
    }

    /// The roots of the trees of the providers in `set`.
    fn roots_of(&self, set: &BitSet) -> BitSet {
        if self.nested == 0 {
            return set.clone();
        }
        let mut out = BitSet::new();
        for s in set.iter() {
            out.insert(self.p(s).root);
        }
        out
    }

    /// The providers of the tree rooted at `root`, in slot order.
    fn subtree_into(&self, root: Slot, out: &mut Vec<Slot>) {
        out.clear();
        out.push(root);
        let mut i = 0;
        while i < out.len() {
            let s = out[i];
            out.extend_from_slice(&self.p(s).children);
            i += 1;
        }
        if out.len() > 1 {
            out.sort_unstable();
        }
    }

    /// A granular group's candidates for `anchor`: each one provider of the
    /// anchor's tree or a sharing provider serving it, in slot order.
    fn anchor_same_provider(
        &self,
        g: &Compiled,
        set: &BitSet,
        anchor: Slot,
        tree: &[Slot],
        sh: &[Slot],
        out: &mut Vec<GroupCand>,
    ) {
        for (s, shared) in merge_sorted(tree, sh) {
            if !set.contains(s) {
                continue;
            }
            let root = if shared { self.p(s).root } else { anchor };
            if g.in_tree_root.is_some_and(|r| r != root) || !self.fits_all(s, &g.resources) {
                continue;
            }
            out.push(GroupCand {
                anchor,
                allocs: g.resources.iter().map(|&(rc, a)| (s, rc, a)).collect(),
                providers: vec![s],
            });
        }
    }

    /// The unsuffixed group's candidates for `anchor`: resources may come
    /// from any providers of the tree plus sharing providers serving it;
    /// one class is taken whole from one provider.
    fn anchor_tree(
        &self,
        g: &Compiled,
        anchor: Slot,
        tree: &[Slot],
        sh: &[Slot],
        lists: &mut Vec<Vec<Slot>>,
        out: &mut Vec<GroupCand>,
    ) {
        let n = g.resources.len();
        if lists.len() < n {
            lists.resize_with(n, Vec::new);
        }
        for (i, &(rc, amount)) in g.resources.iter().enumerate() {
            let l = &mut lists[i];
            l.clear();
            for (s, shared) in merge_sorted(tree, sh) {
                if self.tree_entry_ok(g, rc, amount, s, anchor, shared) {
                    l.push(s);
                }
            }
            if l.is_empty() {
                return;
            }
        }
        let lists = &lists[..n];
        let mut idx = vec![0usize; n];
        let mut combo: Vec<Slot> = Vec::with_capacity(n);
        loop {
            combo.clear();
            combo.extend(idx.iter().zip(lists).map(|(&i, l)| l[i]));
            if self.traits_satisfied(&combo, &g.required) {
                let mut providers = combo.clone();
                providers.sort_unstable();
                providers.dedup();
                out.push(GroupCand {
                    anchor,
                    allocs: combo
                        .iter()
                        .zip(&g.resources)
                        .map(|(&s, &(rc, a))| (s, rc, a))
                        .collect(),
                    providers,
                });
            }
            if !advance(&mut idx, |k| lists[k].len()) {
                break;
            }
        }
    }

    /// Whether provider `s` (of the anchor's tree, or a sharing provider
    /// serving it when `shared`) may supply `amount` of `rc` to the
    /// unsuffixed group anchored at `anchor`.
    #[inline]
    fn tree_entry_ok(
        &self,
        g: &Compiled,
        rc: RcId,
        amount: u64,
        s: Slot,
        anchor: Slot,
        shared: bool,
    ) -> bool {
        if shared {
            // Sharing providers serve other trees only without `in_tree`
            // and when they are themselves in the `member_of` aggregates.
            if g.in_tree_root.is_some() || g.member.as_ref().is_some_and(|m| !m.contains(s)) {
                return false;
            }
        } else if g.in_tree_root.is_some_and(|r| r != anchor) {
            return false;
        }
        if !self.p(s).inv(rc).is_some_and(|e| e.fits(amount)) {
            return false;
        }
        // A provider with a forbidden trait can never be part of a
        // candidate of this group.
        if g.forbidden
            .iter()
            .any(|&t| self.trait_providers[t as usize].contains(s))
        {
            return false;
        }
        // Aggregates on a root span its whole tree.
        if g.member
            .as_ref()
            .is_some_and(|m| !m.contains(s) && !m.contains(anchor))
        {
            return false;
        }
        !g.bad_aggs
            .as_ref()
            .is_some_and(|b| b.contains(s) || b.contains(anchor))
    }

    /// Whether the union of the providers' traits meets every any-of set.
    fn traits_satisfied(&self, providers: &[Slot], required: &[Vec<TraitId>]) -> bool {
        required.iter().all(|any| {
            any.iter().any(|&t| {
                let holders = &self.trait_providers[t as usize];
                providers.iter().any(|&s| holders.contains(s))
            })
        })
    }

    fn combine(
        &self,
        req: &CandidatesRequest,
        groups: &[Compiled],
        granular: usize,
        subtree_sets: &[Vec<usize>],
        combo: &[&GroupCand],
    ) -> Option<Merged> {
        debug_assert!(combo.iter().all(|c| c.anchor == combo[0].anchor));
        if req.group_policy == GroupPolicy::Isolate && granular > 1 {
            let mut used: Vec<Slot> = combo
                .iter()
                .zip(groups)
                .filter(|(_, g)| g.same_provider)
                .flat_map(|(c, _)| c.providers.iter().copied())
                .collect();
            used.sort_unstable();
            used.dedup();
            if used.len() != granular {
                return None;
            }
        }
        for set in subtree_sets {
            let mut rps: Vec<Slot> = set
                .iter()
                .flat_map(|&gi| combo[gi].providers.iter().copied())
                .collect();
            rps.sort_unstable();
            rps.dedup();
            if rps.len() > 1
                && !rps
                    .iter()
                    .any(|&top| rps.iter().all(|&x| self.is_ancestor_or_self(top, x)))
            {
                return None;
            }
        }
        let mut allocs: Vec<(Slot, RcId, u64)> = combo
            .iter()
            .flat_map(|c| c.allocs.iter().copied())
            .collect();
        allocs.sort_unstable_by_key(|&(s, rc, _)| (s, rc));
        allocs.dedup_by(|b, a| {
            if a.0 == b.0 && a.1 == b.1 {
                a.2 += b.2;
                true
            } else {
                false
            }
        });
        if combo.len() > 1 {
            for &(s, rc, amount) in &allocs {
                let e = self.p(s).inv(rc)?;
                if e.used + amount > e.capacity || amount > e.inv.max_unit {
                    return None;
                }
            }
        }
        if !req.nested_aware && self.nested > 0 {
            let mut roots: Vec<(Slot, Slot)> = allocs
                .iter()
                .map(|&(s, _, _)| (self.p(s).root, s))
                .collect();
            roots.sort_unstable();
            roots.dedup();
            if roots.windows(2).any(|w| w[0].0 == w[1].0) {
                return None;
            }
        }
        Some(Merged {
            allocs,
            mappings: combo.iter().map(|c| c.providers.clone()).collect(),
        })
    }

    fn is_ancestor_or_self(&self, top: Slot, mut x: Slot) -> bool {
        loop {
            if x == top {
                return true;
            }
            match self.p(x).parent {
                Some(p) => x = p,
                None => return false,
            }
        }
    }

    fn materialize(
        &self,
        groups: &[RequestGroup],
        merged: Vec<Merged>,
        nested_aware: bool,
    ) -> AllocationCandidates {
        let suffixes: Vec<Arc<str>> = groups
            .iter()
            .map(|g| Arc::from(g.suffix.as_str()))
            .collect();
        let mut roots: Vec<Slot> = Vec::new();
        let mut root_seen = BitSet::new();
        let mut requests = Vec::with_capacity(merged.len());
        for m in merged {
            let mut allocations: Vec<ProviderAllocation> = Vec::new();
            let mut last: Option<Slot> = None;
            for &(s, rc, amount) in &m.allocs {
                if last != Some(s) {
                    let p = self.p(s);
                    if !root_seen.contains(p.root) {
                        root_seen.insert(p.root);
                        roots.push(p.root);
                    }
                    allocations.push(ProviderAllocation {
                        provider: p.uuid,
                        resources: Vec::with_capacity(2),
                    });
                    last = Some(s);
                }
                if let Some(a) = allocations.last_mut() {
                    a.resources.push((self.rcs.name(rc).clone(), amount));
                }
            }
            let mut mappings: BTreeMap<Arc<str>, Vec<ProviderUuid>> = BTreeMap::new();
            for (gi, provs) in m.mappings.iter().enumerate() {
                let e = mappings.entry(suffixes[gi].clone()).or_default();
                e.extend(provs.iter().map(|&s| self.p(s).uuid));
            }
            requests.push(AllocationRequest {
                allocations,
                mappings,
            });
        }
        let mut summaries = Vec::with_capacity(roots.len());
        if nested_aware {
            for r in roots {
                self.walk_tree(r, &mut |s| summaries.push(self.summary(s)));
            }
        } else {
            // Below 1.29 only the providers that appear in a candidate.
            let mut used = BitSet::new();
            for r in &requests {
                for a in &r.allocations {
                    if let Some(s) = self.slot(&a.provider) {
                        used.insert(s);
                    }
                }
            }
            summaries.extend(used.iter().map(|s| self.summary(s)));
        }
        AllocationCandidates {
            allocation_requests: requests,
            provider_summaries: summaries,
        }
    }

    pub(crate) fn summary(&self, s: Slot) -> ProviderSummary {
        let p = self.p(s);
        ProviderSummary {
            provider: p.uuid,
            parent: p.parent.map(|ps| self.p(ps).uuid),
            root: self.p(p.root).uuid,
            resources: p
                .inv
                .iter()
                .map(|e| SummaryResource {
                    resource_class: self.rcs.name(e.rc).clone(),
                    capacity: e.capacity,
                    used: e.used,
                })
                .collect(),
            traits: p
                .traits
                .iter()
                .map(|&t| self.traits.name(t).clone())
                .collect(),
        }
    }
}

/// Merges two ascending, disjoint slot lists; `true` marks items of `b`.
fn merge_sorted<'a>(a: &'a [Slot], b: &'a [Slot]) -> impl Iterator<Item = (Slot, bool)> + 'a {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || match (a.get(i), b.get(j)) {
        (Some(&x), Some(&y)) if x < y => {
            i += 1;
            Some((x, false))
        }
        (_, Some(&y)) => {
            j += 1;
            Some((y, true))
        }
        (Some(&x), None) => {
            i += 1;
            Some((x, false))
        }
        (None, None) => None,
    })
}

/// Odometer step over `idx` with per-position lengths; false when done.
fn advance(idx: &mut [usize], len: impl Fn(usize) -> usize) -> bool {
    for k in (0..idx.len()).rev() {
        idx[k] += 1;
        if idx[k] < len(k) {
            return true;
        }
        idx[k] = 0;
    }
    false
}

fn validate(req: &CandidatesRequest) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::InvalidRequest(m));
    if !req.groups.iter().any(|g| !g.resources.is_empty()) {
        return bad("there must be at least one resources or resources[$S] parameter".into());
    }
    let mut suffixes = HashSet::new();
    for g in &req.groups {
        if !suffixes.insert(g.suffix.as_str()) {
            return bad(format!("duplicate request group suffix {:?}", g.suffix));
        }
        if let Some((rc, _)) = g.resources.iter().find(|(_, &a)| a == 0) {
            return bad(format!("amount of {rc} must be at least 1"));
        }
        if g.required.iter().any(|any| any.is_empty()) {
            return bad("empty any-of trait set".into());
        }
        if g.member_of.iter().any(|any| any.is_empty()) {
            return bad("empty member_of set".into());
        }
        if g.resources.is_empty() {
            if g.suffix.is_empty() {
                return bad("unsuffixed required/member_of/in_tree without resources".into());
            }
            if !req.same_subtree.iter().flatten().any(|s| s == &g.suffix) {
                return bad(
                    "Resourceless suffixed group request should be specified in `same_subtree` query param"
                        .into(),
                );
            }
        }
    }
    for s in req.same_subtree.iter().flatten() {
        if !suffixes.contains(s.as_str()) {
            return bad(format!(
                "Real suffixes should be specified in `same_subtree`: {s:?} not found"
            ));
        }
    }
    Ok(())
}

/// Small deterministic PRNG for `CandidateOrder::Shuffle`.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
