//! Connections kept out of the pool between single statements.
//!
//! sqlx 0.8 pings every connection it takes back into its pool (a `Sync`
//! and its `ReadyForQuery`, in a task spawned on release): one more round
//! trip to the server, and a connection unavailable until it returns, for
//! every statement. On the boot path, where every write is one statement,
//! that was a round trip per statement for nothing: a statement that ran
//! to completion leaves its connection ready for the next one.
//!
//! A [`PgStash`] keeps up to `keep` connections taken from the pool, each
//! handed back only by [`Stashed::keep`] after its statement completed.
//! A [`Stashed`] dropped any other way (an error, a future cancelled
//! mid-statement) goes back to the pool the usual way, with sqlx's ping and
//! rollback, so nothing half-done is reused. A stashed connection idle for
//! [`crate::PG_PING_AFTER_IDLE`] or more goes back to the pool (pinged
//! there) instead of being used, and a sweep every
//! [`crate::PG_PING_AFTER_IDLE`] hands back those left idle, so a quiet
//! stash holds nothing the pool's other users could use. The pool still
//! bounds the connections: a stashed one counts as in use, so `keep` is at
//! most half the pool.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, Postgres};
use sqlx::PgPool;

/// A PostgreSQL pool with connections kept ready between single statements.
#[derive(Debug)]
pub struct PgStash {
    pool: PgPool,
    idle: Arc<Idle>,
    keep: usize,
}

type Idle = Mutex<Vec<(PoolConnection<Postgres>, Instant)>>;

/// Hands back the connections kept for [`crate::PG_PING_AFTER_IDLE`] or
/// more (they go back to the pool, pinged there).
fn hand_back_stale(idle: &Idle) {
    let stale: Vec<_> = {
        let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
        let (fresh, stale) = std::mem::take(&mut *idle)
            .into_iter()
            .partition(|(_, since)| since.elapsed() < crate::PG_PING_AFTER_IDLE);
        *idle = fresh;
        stale
    };
    drop(stale);
}

impl PgStash {
    /// Keeps up to half of `pool`'s connections (at least one). Inside a
    /// tokio runtime a sweep hands back the idle ones until the stash is
    /// dropped.
    pub fn new(pool: PgPool) -> Self {
        let keep = (pool.options().get_max_connections() / 2).max(1) as usize;
        let idle: Arc<Idle> = Arc::new(Mutex::new(Vec::with_capacity(keep)));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&idle);
            rt.spawn(async move {
                let mut tick = tokio::time::interval(crate::PG_PING_AFTER_IDLE);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(idle) = weak.upgrade() else { return };
                    hand_back_stale(&idle);
                }
            });
        }
        Self { pool, idle, keep }
    }

    /// The pool itself (for transactions and everything else).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A connection for one statement: a kept one if any is fresh, else one
    /// from the pool (its acquire timeout applies).
    pub async fn conn(&self) -> Result<Stashed<'_>, sqlx::Error> {
        loop {
            let next = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match next {
                Some((c, since)) if since.elapsed() < crate::PG_PING_AFTER_IDLE => {
                    return Ok(Stashed {
                        conn: Some(c),
                        stash: self,
                    })
                }
                // Stale: back to the pool, which pings it before reuse.
                Some((c, _)) => drop(c),
                None => break,
            }
        }
        Ok(Stashed {
            conn: Some(self.pool.acquire().await?),
            stash: self,
        })
    }

    /// Hands the kept connections back and closes the pool (which waits for
    /// the connections in use).
    pub async fn close(&self) {
        drop(self.take_kept());
        self.pool.close().await;
    }

    /// Every kept connection, out of the stash (dropped, they go back to
    /// the pool; taken out first so the lock is not held meanwhile).
    fn take_kept(&self) -> Vec<(PoolConnection<Postgres>, Instant)> {
        std::mem::take(&mut *self.idle.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Connections kept now (for tests and metrics).
    pub fn kept(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// One connection out of a [`PgStash`].
#[derive(Debug)]
pub struct Stashed<'a> {
    conn: Option<PoolConnection<Postgres>>,
    stash: &'a PgStash,
}

impl Stashed<'_> {
    /// The connection, to run a statement on.
    pub fn get(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .expect("a stashed connection until kept or dropped")
    }

    /// Hands the connection back for the next statement: only after a
    /// statement that completed (its answer read in full). It goes back to
    /// the pool instead when `keep` are kept already, or, with every kept
    /// one, when the pool has no connection left for its other users (every
    /// one open and in use: someone may be waiting).
    pub fn keep(mut self) {
        let Some(c) = self.conn.take() else { return };
        let pool = &self.stash.pool;
        let saturated = pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections();
        if saturated {
            // The kept ones too: whoever waits gets them.
            drop((self.stash.take_kept(), c));
            return;
        }
        let mut idle = self.stash.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.stash.keep {
            idle.push((c, Instant::now()));
        }
    }
}
