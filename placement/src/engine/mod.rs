//! The in-memory allocation-candidates engine.
//!
//! A pure data structure (no HTTP, no SQL): an [`Index`] mirrors the
//! placement database — providers and their trees, inventories, usages,
//! traits and aggregates — with class, trait and aggregate names interned
//! to small integers and inverted indexes as bitsets over provider slots.
//! The database is the source of truth: build the index with
//! [`Index::from_snapshot`], then feed it single changes, either
//! generation-checked as the API does them (`set_inventories`,
//! `set_traits`, `apply_usage_deltas`, …) or as mirror updates
//! ([`Index::upsert_provider`], [`Index::remove_provider`]).
//!
//! [`Index::allocation_candidates`] answers `GET /allocation_candidates`
//! with upstream Placement's semantics up to microversion 1.39; see
//! `candidates.rs` for the algorithm. [`Index::list_providers`] answers the
//! `GET /resource_providers` filters.

mod bitset;
mod candidates;
mod error;
mod index;
mod list;
mod request;

pub use candidates::{
    AllocationCandidates, AllocationRequest, ProviderAllocation, ProviderSummary, SummaryResource,
};
pub use error::EngineError;
pub use index::{
    AggregateUuid, Index, Inventory, ProviderRecord, UsageDelta, MISC_SHARES_VIA_AGGREGATE,
};
pub use list::ProviderFilter;
pub use request::{
    parse_member_of, parse_required, AggregateFilter, CandidateOrder, CandidatesRequest,
    GroupPolicy, RequestGroup, TraitFilter,
};
