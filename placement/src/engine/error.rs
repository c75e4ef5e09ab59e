//! Errors of the in-memory engine.

use fabric::ids::ProviderUuid;

/// What can go wrong in the engine. The HTTP layer maps these to Placement's
/// error codes (409 for conflicts and in-use, 404 for missing, 400 otherwise).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The caller's provider generation is stale (409 `placement.concurrent_update`).
    #[error(
        "resource provider {uuid} generation conflict: expected {expected}, current {current}"
    )]
    GenerationConflict {
        /// The provider.
        uuid: ProviderUuid,
        /// The generation the caller sent.
        expected: u32,
        /// The generation the index holds.
        current: u32,
    },
    /// No such provider (404).
    #[error("resource provider {0} not found")]
    ProviderNotFound(ProviderUuid),
    /// The named parent does not exist (400).
    #[error("parent resource provider {0} not found")]
    ParentNotFound(ProviderUuid),
    /// A provider with this UUID already exists (409).
    #[error("resource provider {0} already exists")]
    DuplicateUuid(ProviderUuid),
    /// A provider with this name already exists (409).
    #[error("resource provider name {0:?} already exists")]
    DuplicateName(String),
    /// The provider still has child providers (409).
    #[error("resource provider {0} has child providers")]
    HasChildren(ProviderUuid),
    /// The provider (or the named class of it) has allocations (409).
    #[error("resource provider {uuid} has allocations against {resource_class}")]
    InUse {
        /// The provider.
        uuid: ProviderUuid,
        /// The class with usage.
        resource_class: String,
    },
    /// Re-parenting would create a loop (400).
    #[error("re-parenting {0} under one of its descendants would create a loop")]
    ParentLoop(ProviderUuid),
    /// An inventory record is not valid (400).
    #[error("invalid inventory for {resource_class}: {reason}")]
    InvalidInventory {
        /// The class.
        resource_class: String,
        /// Why.
        reason: &'static str,
    },
    /// A usage change does not fit (409 `placement.allocation.conflict` / capacity exceeded).
    #[error("unable to allocate {amount} {resource_class} on {uuid}: {reason}")]
    CapacityExceeded {
        /// The provider.
        uuid: ProviderUuid,
        /// The class.
        resource_class: String,
        /// The delta that was requested.
        amount: i64,
        /// Why.
        reason: &'static str,
    },
    /// The candidate request is malformed (400).
    #[error("invalid allocation candidates request: {0}")]
    InvalidRequest(String),
    /// A requested feature is not implemented by the engine yet (501/400).
    #[error("not implemented in the candidate engine: {0}")]
    Unsupported(&'static str),
}
