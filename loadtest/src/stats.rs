//! Latency samples and their summary.

use std::time::Duration;

use serde::Serialize;

/// Summary of a set of latency samples, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// Summarises `samples` (nearest-rank percentiles).
pub fn summarize(samples: &mut [Duration]) -> Summary {
    samples.sort_unstable();
    let pick = |q: f64| -> f64 {
        if samples.is_empty() {
            return 0.0;
        }
        let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1].as_secs_f64() * 1000.0
    };
    Summary {
        count: samples.len(),
        p50_ms: pick(0.50),
        p95_ms: pick(0.95),
        p99_ms: pick(0.99),
        max_ms: samples
            .last()
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let sum = summarize(&mut s);
        assert_eq!(sum.count, 100);
        assert_eq!(sum.p50_ms, 50.0);
        assert_eq!(sum.p95_ms, 95.0);
        assert_eq!(sum.p99_ms, 99.0);
        assert_eq!(sum.max_ms, 100.0);
        assert_eq!(summarize(&mut []).count, 0);
    }
}
