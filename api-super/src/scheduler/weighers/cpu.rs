//! `CPUWeigher`: free VCPUs (placement capacity minus usage).

use super::Weigher;
use crate::scheduler::{Candidate, Request};

/// Weighs by free VCPU; multiplier `cpu_weight_multiplier`.
#[derive(Debug, Clone, Copy)]
pub struct CpuWeigher {
    /// > 0 spreads, < 0 packs.
    pub multiplier: f64,
}

impl Weigher for CpuWeigher {
    fn name(&self) -> &'static str {
        "CPUWeigher"
    }

    fn multiplier(&self) -> f64 {
        self.multiplier
    }

    fn weigh(&self, host: &Candidate, _req: &Request) -> f64 {
        host.free("VCPU")
    }
}
