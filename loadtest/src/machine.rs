//! How fast this machine is right now, so that runs taken at different
//! hours can be told apart: the same code on a shared host can run at
//! half the speed an hour later, and a boot rate means little without it.
//!
//! Two figures: [`calibration_ms`], a core's speed on a loop that touches
//! no memory, and [`cache_probe_ns`], how long a load from a working set
//! of a few MiB takes — which is what the control plane's processes
//! (PostgreSQL's backends, the region's heap) live on. On a host whose
//! last-level cache is shared with other tenants the second figure moves
//! with their load while the first barely does (see docs/BENCHMARKS.md).

use std::hint::black_box;
use std::time::Instant;

/// Iterations of the fixed loop ([`calibration_ms`]).
const ROUNDS: u64 = 10_000_000;

/// Milliseconds one core takes for a fixed integer loop (a xorshift,
/// 10 million rounds; ~17 ms on this project's machines in a release
/// build), the best of three (the least disturbed). Lower is faster; two
/// runs compare when their figures are close. Take it before the load
/// starts.
pub fn calibration_ms() -> f64 {
    (0..3).map(|_| one_pass()).fold(f64::INFINITY, f64::min)
}

fn one_pass() -> f64 {
    let start = Instant::now();
    let mut x: u64 = black_box(0x9E37_79B9_7F4A_7C15);
    for _ in 0..black_box(ROUNDS) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x);
    start.elapsed().as_secs_f64() * 1000.0
}

/// Bytes the cache probe walks: inside the L3 of the machines this
/// project runs on (32 MiB, shared with the host's other tenants), well
/// outside their L2 (1 MiB per core).
const PROBE_BYTES: usize = 8 << 20;

/// Dependent loads per pass of the probe.
const PROBE_STEPS: usize = 500_000;

/// Nanoseconds per dependent load while walking a random cycle through an
/// 8 MiB array (each load's address is the value of the one before, so
/// neither prefetching nor overlap hides a miss), the best of three
/// passes. Served from the last-level cache it is a few tens of
/// nanoseconds; when other tenants of the host have that cache it is a
/// trip to memory, 100 ns and more. Lower is faster. Takes about half a
/// second at worst; take it before the load starts.
pub fn cache_probe_ns() -> f64 {
    let ring = cycle(PROBE_BYTES / std::mem::size_of::<u32>());
    (0..3).map(|_| walk(&ring)).fold(f64::INFINITY, f64::min)
}

/// One random cycle through `n` slots (Sattolo's shuffle): following
/// `ring[i]` from any slot visits every slot before coming back.
fn cycle(n: usize) -> Vec<u32> {
    let mut ring: Vec<u32> = (0..u32::try_from(n).expect("probe fits in u32")).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // i < n fits in u64 and the remainder is below i.
        let j = usize::try_from(x % i as u64).expect("below i");
        ring.swap(i, j);
    }
    ring
}

fn walk(ring: &[u32]) -> f64 {
    let start = Instant::now();
    let mut at = 0usize;
    for _ in 0..black_box(PROBE_STEPS) {
        at = ring[at] as usize;
    }
    black_box(at);
    start.elapsed().as_secs_f64() * 1e9 / PROBE_STEPS as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_ring_is_one_cycle_through_every_slot() {
        let n = 10_000;
        let ring = cycle(n);
        let mut seen = vec![false; n];
        let mut at = 0usize;
        for _ in 0..n {
            assert!(!seen[at], "slot {at} visited twice before the cycle closed");
            seen[at] = true;
            at = ring[at] as usize;
        }
        assert_eq!(at, 0, "back at the start after n steps");
        assert!(seen.iter().all(|s| *s));
    }
}
