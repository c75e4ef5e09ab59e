//! Slows password guessing. Attempts are counted per (user, source
//! address) and per user across all sources, and counted *before* the
//! password is checked: an attempt is reserved ([`RateLimiter::begin`]),
//! so that many guesses sent at once cannot all reach the (costly) hash
//! check before the first failure is recorded. Within a key's free
//! attempts, guesses may run side by side up to what is left of them;
//! past it, one at a time, each after a delay that doubles with every
//! failure, up to `max_delay`. A success clears the (user, source) count
//! and the user's; a key left alone long enough is forgotten. Nobody is
//! locked out for longer than `max_delay`; the per-source count keeps an
//! attacker at one address from delaying the real user at another, and
//! the per-user count (a larger budget) slows guessing spread over many
//! addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Failures allowed per (user, source) before delays start.
    pub free_attempts: u32,
    /// Failures allowed per user, all sources together, before delays
    /// start.
    pub user_free_attempts: u32,
    /// Delay after the first failure beyond the free ones.
    pub base_delay: Duration,
    /// Longest delay.
    pub max_delay: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    /// Attempts reserved and not finished.
    pending: u32,
    not_before: Instant,
    last: Instant,
}

/// A (user, source) key, or the user's own (`None`).
type Key = (String, Option<IpAddr>);

/// Failure counts by (user, source) and by user.
#[derive(Debug)]
pub struct RateLimiter {
    limits: Limits,
    entries: Mutex<HashMap<Key, Entry>>,
}

/// An attempt reserved by [`RateLimiter::begin`]: say how it ended. One
/// dropped without a word counts as a failure; [`Attempt::abandon`]
/// releases it without counting (the password was never checked).
#[derive(Debug)]
pub struct Attempt<'a> {
    limiter: &'a RateLimiter,
    user: String,
    source: IpAddr,
    done: bool,
}

impl Attempt<'_> {
    /// The password was right.
    pub fn succeeded(mut self) {
        self.done = true;
        self.limiter.finish(&self.user, self.source, Some(true));
    }

    /// The password was wrong.
    pub fn failed(mut self) {
        self.done = true;
        self.limiter.finish(&self.user, self.source, Some(false));
    }

    /// The password was not checked.
    pub fn abandon(mut self) {
        self.done = true;
        self.limiter.finish(&self.user, self.source, None);
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.limiter.finish(&self.user, self.source, Some(false));
        }
    }
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

    fn free(&self, key: &Key) -> u32 {
        match key.1 {
            Some(_) => self.limits.free_attempts.max(1),
            None => self.limits.user_free_attempts.max(1),
        }
    }

    fn keys(user: &str, source: IpAddr) -> [Key; 2] {
        [(user.to_owned(), Some(source)), (user.to_owned(), None)]
    }

    /// Reserves an attempt for `user` from `source`, or `Err(wait)` when
    /// it must wait: a delay after failures is running, or the free
    /// attempts are used up by failures and attempts under way.
    pub fn begin(&self, user: &str, source: IpAddr) -> Result<Attempt<'_>, Duration> {
        let now = Instant::now();
        let forget = self.forget_after();
        let keys = Self::keys(user, source);
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 100_000 {
            map.retain(|_, e| e.pending > 0 || now.duration_since(e.last) < forget);
        }
        for k in &keys {
            if let Some(e) = map.get(k) {
                if e.not_before > now {
                    return Err(e.not_before - now);
                }
                let failures = if now.duration_since(e.last) >= forget {
                    0
                } else {
                    e.failures
                };
                if failures + e.pending >= self.free(k) && e.pending > 0 {
                    return Err(self.limits.base_delay.max(Duration::from_secs(1)));
                }
            }
        }
        for k in keys {
            let e = map.entry(k).or_insert(Entry {
                failures: 0,
                pending: 0,
                not_before: now,
                last: now,
            });
            if now.duration_since(e.last) >= forget {
                e.failures = 0;
            }
            e.pending += 1;
            e.last = now;
        }
        Ok(Attempt {
            limiter: self,
            user: user.to_owned(),
            source,
            done: false,
        })
    }

    fn finish(&self, user: &str, source: IpAddr, ok: Option<bool>) {
        let now = Instant::now();
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for k in Self::keys(user, source) {
            let free = self.free(&k);
            let Some(e) = map.get_mut(&k) else { continue };
            e.pending = e.pending.saturating_sub(1);
            e.last = now;
            match ok {
                Some(true) => {
                    e.failures = 0;
                    e.not_before = now;
                }
                Some(false) => {
                    e.failures += 1;
                    if e.failures >= free {
                        let over = (e.failures - free).min(20);
                        let delay = self
                            .limits
                            .base_delay
                            .saturating_mul(1 << over)
                            .min(self.limits.max_delay);
                        e.not_before = now + delay;
                    }
                }
                None => {}
            }
            if e.pending == 0 && e.failures == 0 {
                map.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(free: u32, user_free: u32) -> RateLimiter {
        RateLimiter::new(Limits {
            free_attempts: free,
            user_free_attempts: user_free,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(300),
        })
    }

    #[test]
    fn delays_grow_are_capped_and_are_per_source() {
        let l = limiter(2, 100);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        l.begin("alice", a).unwrap().failed();
        l.begin("alice", a).unwrap().failed();
        let wait = l.begin("alice", a).unwrap_err();
        assert!(wait <= Duration::from_millis(100));
        // Another source, another user: unaffected.
        l.begin("alice", b).unwrap().abandon();
        l.begin("bob", a).unwrap().abandon();
        // The delay doubles with each failure, up to the cap.
        std::thread::sleep(Duration::from_millis(110));
        l.begin("alice", a).unwrap().failed();
        let wait = l.begin("alice", a).unwrap_err();
        assert!(wait > Duration::from_millis(100) && wait <= Duration::from_millis(200));
        std::thread::sleep(Duration::from_millis(210));
        l.begin("alice", a).unwrap().failed();
        let wait = l.begin("alice", a).unwrap_err();
        assert!(wait > Duration::from_millis(200) && wait <= Duration::from_millis(300));
        // After the capped delay the real user gets in; the count resets.
        std::thread::sleep(Duration::from_millis(310));
        l.begin("alice", a).unwrap().succeeded();
        l.begin("alice", a).unwrap().failed();
        l.begin("alice", a).unwrap().abandon();
    }

    #[test]
    fn attempts_are_counted_before_the_check() {
        let l = limiter(3, 100);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        // Three at once may run; the fourth waits until they end.
        let running: Vec<_> = (0..3).map(|_| l.begin("alice", a).unwrap()).collect();
        assert!(l.begin("alice", a).is_err());
        drop(running); // dropped unanswered: three failures
        assert!(l.begin("alice", a).is_err(), "now in the delay");
    }

    #[test]
    fn guesses_spread_over_sources_meet_the_users_own_budget() {
        let l = limiter(100, 4);
        for i in 0..4u8 {
            let src = IpAddr::from([10, 0, 1, i]);
            l.begin("alice", src).unwrap().failed();
        }
        let other = IpAddr::from([10, 0, 2, 1]);
        assert!(
            l.begin("alice", other).is_err(),
            "the user's budget is spent"
        );
        assert!(l.begin("bob", other).is_ok());
    }
}
