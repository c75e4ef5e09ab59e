//! How fast this machine's cores are right now, so that runs taken at
//! different hours can be told apart: the same code on a shared host can
//! run at half the speed an hour later, and a boot rate means little
//! without it.

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
