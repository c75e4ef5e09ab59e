//! `RAMWeigher`: free RAM (placement capacity minus usage).

use super::Weigher;
use crate::scheduler::{Candidate, Request};

/// Weighs by free MEMORY_MB; multiplier `ram_weight_multiplier`.
#[derive(Debug, Clone, Copy)]
pub struct RamWeigher {
    /// > 0 spreads, < 0 packs.
    pub multiplier: f64,
}

impl Weigher for RamWeigher {
    fn name(&self) -> &'static str {
        "RAMWeigher"
    }

    fn multiplier(&self) -> f64 {
        self.multiplier
    }

    fn weigh(&self, host: &Candidate, _req: &Request) -> f64 {
        host.free("MEMORY_MB")
    }
}
