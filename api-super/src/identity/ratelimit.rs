//! Slows password guessing: failures are counted per (user, source address);
//! after `free_attempts` failures in a row, each further attempt from that
//! pair must wait a delay that doubles with every failure, up to
//! `max_delay`. A success clears the count; a pair left alone for
//! `forget_after` is forgotten. Nobody is locked out for longer than
//! `max_delay`, and an attacker at one address does not delay the real user
//! at another.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Failures allowed before delays start.
    pub free_attempts: u32,
    /// Delay after the first failure beyond the free ones.
    pub base_delay: Duration,
    /// Longest delay.
    pub max_delay: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    not_before: Instant,
    last: Instant,
}

/// Failure counts by (user, source).
#[derive(Debug)]
pub struct RateLimiter {
    limits: Limits,
    entries: Mutex<HashMap<(String, IpAddr), Entry>>,
}

impl RateLimiter {
    /// An empty limiter.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn forget_after(&self) -> Duration {
        (self.limits.max_delay * 4).max(Duration::from_secs(60))
    }

    /// `Err(wait)` when `user` from `source` must wait before trying again.
    pub fn check(&self, user: &str, source: IpAddr) -> Result<(), Duration> {
        let now = Instant::now();
        let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&(user.to_owned(), source)) {
            Some(e) if e.not_before > now => Err(e.not_before - now),
            _ => Ok(()),
        }
    }

    /// Records a failed attempt.
    pub fn failed(&self, user: &str, source: IpAddr) {
        let now = Instant::now();
        let forget = self.forget_after();
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 100_000 {
            map.retain(|_, e| now.duration_since(e.last) < forget);
        }
        let e = map.entry((user.to_owned(), source)).or_insert(Entry {
            failures: 0,
            not_before: now,
            last: now,
        });
        if now.duration_since(e.last) >= forget {
            e.failures = 0;
        }
        e.failures += 1;
        e.last = now;
        if e.failures >= self.limits.free_attempts {
            let over = (e.failures - self.limits.free_attempts).min(20);
            let delay = self
                .limits
                .base_delay
                .saturating_mul(1 << over)
                .min(self.limits.max_delay);
            e.not_before = now + delay;
        }
    }

    /// Records a success (clears the count).
    pub fn succeeded(&self, user: &str, source: IpAddr) {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&(user.to_owned(), source));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_capped_and_are_per_source() {
        let l = RateLimiter::new(Limits {
            free_attempts: 2,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(300),
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        l.failed("alice", a);
        assert!(l.check("alice", a).is_ok());
        l.failed("alice", a);
        let wait = l.check("alice", a).unwrap_err();
        assert!(wait <= Duration::from_millis(100));
        for _ in 0..10 {
            l.failed("alice", a);
        }
        assert!(l.check("alice", a).unwrap_err() <= Duration::from_millis(300));
        // Another source, another user: unaffected.
        assert!(l.check("alice", b).is_ok());
        assert!(l.check("bob", a).is_ok());
        std::thread::sleep(Duration::from_millis(320));
        assert!(l.check("alice", a).is_ok());
        l.succeeded("alice", a);
        l.failed("alice", a);
        assert!(l.check("alice", a).is_ok());
    }
}
