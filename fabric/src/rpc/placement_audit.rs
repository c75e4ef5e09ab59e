//! `placement_audit` and `heal_allocations`: calls to a cell's conductor,
//! made by `cell-manage placement audit` and `cell-manage placement
//! heal-allocations`. The conductor owns its cell database and its
//! placement client, so the reconciliation runs there, next to the data,
//! in every cell at once; the operator's command only gathers the answers.

/// What an audit or a heal found for one consumer on one provider.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct AllocationFinding {
    /// The consumer (an instance uuid, or whatever holds the allocation).
    #[prost(string, tag = "1")]
    pub consumer: String,
    /// The provider holding the allocation (for `missing`: the provider
    /// that should).
    #[prost(string, tag = "2")]
    pub provider: String,
    /// The provider's compute host.
    #[prost(string, tag = "3")]
    pub host: String,
    /// The provider's node.
    #[prost(string, tag = "4")]
    pub node: String,
    /// [`finding::ORPHANED`], [`finding::MISPLACED`] or
    /// [`finding::MISSING`].
    #[prost(string, tag = "5")]
    pub kind: String,
    /// What was done: [`finding::DELETED`], [`finding::MOVED`],
    /// [`finding::CREATED`], [`finding::FAILED`], or empty (reported only).
    #[prost(string, tag = "6")]
    pub action: String,
    /// Why an action failed; for `misplaced`: the provider the instance's
    /// claim belongs on.
    #[prost(string, tag = "7")]
    pub detail: String,
}

/// Kinds and actions of an [`AllocationFinding`].
pub mod finding {
    /// The consumer is no live instance of the cell (deleted, or unknown).
    pub const ORPHANED: &str = "orphaned";
    /// The consumer is a live instance of the cell on another node.
    pub const MISPLACED: &str = "misplaced";
    /// A settled instance of the node without an allocation.
    pub const MISSING: &str = "missing";
    /// The consumer's allocations were deleted.
    pub const DELETED: &str = "deleted";
    /// The instance's allocation was put on its own node.
    pub const MOVED: &str = "moved";
    /// The instance's allocation was created from its flavor.
    pub const CREATED: &str = "created";
    /// The action was tried and failed (see `detail`).
    pub const FAILED: &str = "failed";
}

/// `placement_audit`: orphaned and misplaced allocations on the cell's
/// compute node providers. A consumer counts as orphaned only when two
/// reads a moment apart both find no live instance for it, so a claim the
/// scheduler made for a build whose row is not written yet is not taken
/// for one.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct PlacementAudit {
    /// Delete orphaned allocations and put misplaced ones on the
    /// instance's own node (else: report only).
    #[prost(bool, tag = "1")]
    pub delete: bool,
    /// Only this provider (empty: every compute node of the cell).
    #[prost(string, tag = "2")]
    pub provider_uuid: String,
}

/// `heal_allocations`: settled instances of the cell without an
/// allocation get one from their flavor.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HealAllocations {
    /// Report what would be created, create nothing.
    #[prost(bool, tag = "1")]
    pub dry_run: bool,
    /// Only this instance (empty: every instance of the cell).
    #[prost(string, tag = "2")]
    pub instance_uuid: String,
    /// At most this many allocations (0: no limit).
    #[prost(uint32, tag = "3")]
    pub max_count: u32,
}

/// The answer to [`PlacementAudit`] and [`HealAllocations`].
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct AllocationReport {
    /// Providers read.
    #[prost(uint32, tag = "1")]
    pub providers: u32,
    /// What was found, and done.
    #[prost(message, repeated, tag = "2")]
    pub findings: Vec<AllocationFinding>,
    /// Heal: more instances need an allocation than `max_count` allowed.
    #[prost(bool, tag = "3")]
    pub more: bool,
    /// Heal: the named instance is on a host and node without a compute
    /// node record in the cell (its allocation has no provider to go to).
    #[prost(bool, tag = "4")]
    pub no_node: bool,
    /// Providers that could not be read (with the reason), skipped.
    #[prost(string, repeated, tag = "5")]
    pub unread: Vec<String>,
    /// Placement is not configured for this conductor: nothing was read.
    #[prost(bool, tag = "6")]
    pub no_placement: bool,
}
