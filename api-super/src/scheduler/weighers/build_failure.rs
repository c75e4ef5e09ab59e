//! `BuildFailureWeigher`: hosts whose recent builds failed weigh less, as
//! Nova's. The raw weight is minus the node's consecutive build failures
//! (counted by the cell conductor, reset by a successful build); with the
//! default multiplier (1,000,000) one failure outweighs every other
//! weigher, so a host that keeps failing is chosen only when nothing else
//! fits.

use super::Weigher;
use crate::scheduler::{Candidate, Request};

/// Weighs down failing hosts; multiplier `build_failure_weight_multiplier`.
#[derive(Debug, Clone, Copy)]
pub struct BuildFailureWeigher {
    /// >= 0 (0 disables it).
    pub multiplier: f64,
}

impl Weigher for BuildFailureWeigher {
    fn name(&self) -> &'static str {
        "BuildFailureWeigher"
    }

    fn multiplier(&self) -> f64 {
        self.multiplier
    }

    fn weigh(&self, host: &Candidate, _req: &Request) -> f64 {
        -(host.info.failed_builds as f64)
    }
}
