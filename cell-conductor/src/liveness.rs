//! Liveness of the cell's compute services, in memory, written in batches.
//!
//! Why this shape (issue 31): a dead compute must show down within 5 s,
//! and at 10,000 hosts a heartbeat written to the database by each host
//! every second would be 10,000 writes a second. So a host casts a
//! heartbeat every second to [`rpc::CONDUCTOR_LIVENESS_QUEUE`], a queue of
//! its own (a backlog of builds on the `conductor` queue never delays a
//! heartbeat, which would make a live host look dead under load); every
//! conductor of the cell consumes it and only notes the time it saw each
//! host, in memory. Once every `flush_interval` each conductor writes what
//! it saw in one statement ([`CellDb::services_seen`]): the database sees
//! one write a second per conductor, whatever the number of hosts, and
//! `services.last_seen_up` is at most one heartbeat interval plus one flush
//! interval old for a live host. Everything that decides "down" keeps
//! reading `last_seen_up` against `service_down_time` (the API's
//! `os-services` and scheduler, this crate's healing), so `forced_down` and
//! `service_down_time` keep their meaning; the default `service_down_time`
//! is 5 s instead of Nova's 60.
//!
//! The broker's own knowledge (a consumer or connection gone) was the
//! other candidate: it notices a `kill -9` at once, but not a host whose
//! process hangs with its connection open, it differs between the two
//! transports, and it needs the management API; the heartbeat covers all
//! three and bounds the delay the same way everywhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fabric::bus::Subscription;
use fabric::rpc::{self, method};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::db::CellDb;
use crate::error::chain;

/// Most distinct services remembered between two flushes (a bound on the
/// map; past it, beats are dropped with a warning until the next flush).
pub const MAX_SERVICES: usize = 100_000;

/// Longest wait to acknowledge one heartbeat.
const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// Heartbeats seen since the last flush: `(host, binary)` → last seen.
#[derive(Debug, Default)]
pub struct Liveness {
    seen: Mutex<HashMap<(String, String), DateTime<Utc>>>,
    /// The last beat consumed, and since when beats have come without a
    /// gap longer than `gap`.
    flow: Mutex<Flow>,
    gap: Duration,
}

#[derive(Debug, Default)]
struct Flow {
    last_beat: Option<Instant>,
    since: Option<Instant>,
}

impl Liveness {
    /// A gap of more than `gap` between two consumed beats (the canary
    /// comes every flush interval, so `gap` is a few of those) means the
    /// liveness path itself was broken: see [`Liveness::flowing_for`].
    pub fn with_gap(gap: Duration) -> Self {
        Self {
            gap,
            ..Self::default()
        }
    }

    /// How long beats have been consumed without a gap longer than the
    /// configured one (`None`: not flowing now). After the broker or this
    /// conductor's consumer was away, the database's `last_seen_up` of
    /// every host is stale until each host has beaten again and the beat
    /// is written; until then, silence proves nothing.
    pub fn flowing_for(&self) -> Option<Duration> {
        let f = self.flow.lock().unwrap_or_else(|p| p.into_inner());
        match (f.last_beat, f.since) {
            (Some(last), Some(since)) if last.elapsed() <= self.gap => Some(since.elapsed()),
            _ => None,
        }
    }

    /// Notes a heartbeat of `(host, binary)` seen now. False when the map
    /// is full (the beat is dropped).
    pub fn saw(&self, host: &str, binary: &str) -> bool {
        let mut m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let key = (host.to_owned(), binary.to_owned());
        if m.len() >= MAX_SERVICES && !m.contains_key(&key) {
            return false;
        }
        m.insert(key, Utc::now());
        drop(m);
        let now = Instant::now();
        let mut f = self.flow.lock().unwrap_or_else(|p| p.into_inner());
        if f.last_beat.is_none_or(|t| now.duration_since(t) > self.gap) {
            f.since = Some(now);
        }
        f.last_beat = Some(now);
        true
    }

    /// How long since this conductor consumed any heartbeat (`None`:
    /// never). Silence from every host at once says more about the
    /// liveness path (the broker) than about the hosts.
    pub fn silent_for(&self) -> Option<Duration> {
        self.flow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_beat
            .map(|t| t.elapsed())
    }

    /// Whether a heartbeat of `(host, binary)` newer than `since` is held
    /// here, not yet written (a flush failed, or is due): the database's
    /// `last_seen_up` may say the host is down while this conductor knows
    /// it is not.
    pub fn unwritten_since(&self, host: &str, binary: &str, since: DateTime<Utc>) -> bool {
        let m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(host.to_owned(), binary.to_owned()))
            .is_some_and(|t| *t > since)
    }

    /// Takes what was seen since the last call.
    pub fn take(&self) -> Vec<(String, String, DateTime<Utc>)> {
        let mut m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *m)
            .into_iter()
            .map(|((h, b), t)| (h, b, t))
            .collect()
    }

    /// Writes what was seen; on failure puts it back (newer beats win).
    pub async fn flush(&self, db: &CellDb) {
        let batch = self.take();
        if batch.is_empty() {
            return;
        }
        match db.services_seen(&batch).await {
            Ok(n) => {
                debug!(beats = batch.len(), rows = n, "heartbeats written");
                crate::metrics::heartbeats_flushed(batch.len());
            }
            Err(e) => {
                warn!(beats = batch.len(), error = %chain(&e), "could not write the heartbeats; kept for the next flush");
                let mut m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                for (h, b, t) in batch {
                    m.entry((h, b)).or_insert(t);
                }
            }
        }
    }
}

/// Consumes the liveness queue: notes each heartbeat, acknowledges it.
/// Never touches the database, so it keeps up with any number of hosts.
pub(crate) async fn consume(
    liveness: Arc<Liveness>,
    mut sub: Subscription,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let d = tokio::select! {
            d = sub.recv() => match d {
                Some(d) => d,
                None => break,
            },
            _ = crate::stopped(&mut shutdown) => break,
        };
        let env = d.envelope();
        if env.method == method::SERVICE_HEARTBEAT {
            match env.decode_message::<rpc::Heartbeat>() {
                Ok(h) if !h.host.is_empty() && !h.binary.is_empty() => {
                    if !liveness.saw(&h.host, &h.binary) {
                        warn!(host = %h.host, "too many services seen since the last flush; heartbeat dropped");
                    }
                }
                Ok(_) => debug!("heartbeat without host or binary dropped"),
                Err(e) => debug!(error = %e, "undecodable heartbeat dropped"),
            }
        } else {
            debug!(method = %env.method, "unexpected method on the liveness queue dropped");
        }
        // Bounded: a settle that never completes (a channel lost under
        // it) must not stop the queue being read.
        match tokio::time::timeout(ACK_TIMEOUT, d.ack()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(error = %chain(&e), "could not acknowledge a heartbeat"),
            Err(_) => warn!("acknowledging a heartbeat timed out"),
        }
    }
}

/// Casts this conductor's own heartbeat to the liveness queue every
/// `every`: the canary that tells "every host went silent" (the healing
/// acts) from "the liveness path is broken" (it does not). Whichever
/// conductor of the cell reads it, the path from the broker works.
pub(crate) async fn canary(
    bus: Arc<dyn fabric::bus::Transport>,
    host: String,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let beat = rpc::Heartbeat {
        host,
        binary: rpc::CONDUCTOR_BINARY.to_owned(),
    };
    let ttl = every * 2;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::stopped(&mut shutdown) => break,
        }
        let ids = rpc::RequestIds::default();
        let cast = rpc::cast(
            bus.as_ref(),
            rpc::CONDUCTOR_LIVENESS_QUEUE,
            method::SERVICE_HEARTBEAT,
            &beat,
            &ids,
            ttl,
        );
        match tokio::time::timeout(ttl, cast).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(error = %chain(&e), "canary heartbeat not sent"),
            Err(_) => debug!("canary heartbeat timed out"),
        }
    }
}

/// Flushes every `every` until shutdown, then once more.
pub(crate) async fn flush_loop(
    liveness: Arc<Liveness>,
    db: CellDb,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => liveness.flush(&db).await,
            _ = crate::stopped(&mut shutdown) => break,
        }
    }
    liveness.flush(&db).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_is_kept_once_per_service_and_taken_once() {
        let l = Liveness::default();
        assert!(l.saw("h1", "nova-compute"));
        assert!(l.saw("h1", "nova-compute"));
        assert!(l.saw("h2", "nova-compute"));
        let mut got: Vec<String> = l.take().into_iter().map(|(h, _, _)| h).collect();
        got.sort();
        assert_eq!(got, ["h1", "h2"]);
        assert!(l.take().is_empty(), "taken beats are gone");
    }

    #[test]
    fn an_unwritten_beat_says_the_host_is_alive_until_it_is_taken() {
        let l = Liveness::default();
        let before = Utc::now() - chrono::Duration::seconds(5);
        assert!(!l.unwritten_since("h1", "nova-compute", before));
        assert!(l.saw("h1", "nova-compute"));
        assert!(l.unwritten_since("h1", "nova-compute", before));
        assert!(!l.unwritten_since(
            "h1",
            "nova-compute",
            Utc::now() + chrono::Duration::seconds(1)
        ));
        assert!(!l.unwritten_since("h2", "nova-compute", before));
        l.take();
        assert!(
            !l.unwritten_since("h1", "nova-compute", before),
            "written: the row says"
        );
    }

    #[test]
    fn beats_flow_from_the_first_after_a_gap() {
        let l = Liveness::with_gap(Duration::from_millis(100));
        assert_eq!(l.flowing_for(), None);
        l.saw("h1", "nova-compute");
        std::thread::sleep(Duration::from_millis(50));
        l.saw("h1", "nova-compute");
        let flowing = l.flowing_for().expect("flowing");
        assert!(flowing >= Duration::from_millis(50), "{flowing:?}");
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(l.flowing_for(), None, "a gap: not flowing");
        l.saw("h1", "nova-compute");
        assert!(l.flowing_for().expect("flowing again") < Duration::from_millis(50));
    }
}
