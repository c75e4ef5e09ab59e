//! Host weighers: each one a [`Weigher`] in its own file. As in Nova, each
//! weigher's raw values are normalized to 0..1 over the candidates, then
//! multiplied by the weigher's multiplier and summed; the highest total
//! wins. A positive multiplier spreads, a negative one packs.

pub mod affinity;
pub mod build_failure;
pub mod cpu;
pub mod disk;
pub mod ram;

use super::{Candidate, Request};

/// A host weigher.
pub trait Weigher: Send + Sync + std::fmt::Debug {
    /// Its name (`RAMWeigher`, ...).
    fn name(&self) -> &'static str;
    /// The multiplier.
    fn multiplier(&self) -> f64;
    /// The raw weight of `host` for `req`.
    fn weigh(&self, host: &Candidate, req: &Request) -> f64;
}

/// Normalizes `v` to 0..1 (all equal: all 0).
pub fn normalize(v: &[f64]) -> Vec<f64> {
    let (min, max) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(*x), b.max(*x))
        });
    if max.partial_cmp(&min) != Some(std::cmp::Ordering::Greater) {
        return vec![0.0; v.len()];
    }
    v.iter().map(|x| (x - min) / (max - min)).collect()
}
