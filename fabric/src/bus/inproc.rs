//! The in-process transport: tokio primitives inside one process.
//!
//! A bus is a set of named queues (a deque plus a wake-up signal; messages
//! cast before any consumer exists wait in the deque), named broadcast topics
//! and a table of calls waiting for replies. [`InprocTransport::named`] (and
//! `inproc://<name>` URLs) share one bus per name across the whole process,
//! so an embedded region's components find each other the way they would on
//! a broker vhost; [`InprocTransport::new`] makes a private bus.
//!
//! Guarantees: a cast is kept until a consumer takes it (but not across a
//! process restart); a delivery dropped unsettled goes back to the front of
//! its queue; fan-out is a broadcast channel of 1024 messages per topic, and
//! a subscriber lagging further behind loses the oldest ones.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{self, StreamExt};
use tokio::sync::{broadcast, oneshot, watch, Notify};

use super::metrics::{self, Op};
use super::{
    reply_result, BusError, Delivery, DeliveryOps, Result, Settle, Subscription, Transport,
    TransportKind,
};
use crate::wire::Envelope;

const KIND: &str = "inproc";
const TOPIC_CAPACITY: usize = 1024;

/// One queue: waiting messages (with their "redelivered" flag) and a signal.
#[derive(Default)]
struct Queue {
    items: Mutex<VecDeque<(Envelope, bool)>>,
    notify: Notify,
}

impl Queue {
    fn push_back(&self, env: Envelope) {
        lock(&self.items).push_back((env, false));
        self.notify.notify_waiters();
    }

    fn push_front(&self, env: Envelope) {
        lock(&self.items).push_front((env, true));
        self.notify.notify_waiters();
    }

    fn pop(&self) -> Option<(Envelope, bool)> {
        lock(&self.items).pop_front()
    }
}

/// One named in-process bus, shared by every transport connected to it.
struct Bus {
    name: String,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    topics: Mutex<HashMap<String, broadcast::Sender<Envelope>>>,
    pending: Mutex<HashMap<String, oneshot::Sender<Envelope>>>,
    next_call: AtomicU64,
}

impl Bus {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            queues: Mutex::default(),
            topics: Mutex::default(),
            pending: Mutex::default(),
            next_call: AtomicU64::new(0),
        }
    }

    fn queue(&self, name: &str) -> Arc<Queue> {
        lock(&self.queues)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    fn topic(&self, name: &str) -> broadcast::Sender<Envelope> {
        lock(&self.topics)
            .entry(name.to_owned())
            .or_insert_with(|| broadcast::channel(TOPIC_CAPACITY).0)
            .clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn registry() -> &'static Mutex<HashMap<String, Arc<Bus>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<Bus>>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// The in-process transport. Each value has its own "closed" state; values
/// connected to the same name share queues, topics and replies.
pub struct InprocTransport {
    bus: Arc<Bus>,
    closed: watch::Sender<bool>,
}

impl std::fmt::Debug for InprocTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InprocTransport")
            .field("bus", &self.bus.name)
            .finish()
    }
}

impl Default for InprocTransport {
    fn default() -> Self {
        Self::new()
    }
}

impl InprocTransport {
    /// A transport on a fresh, private bus.
    pub fn new() -> Self {
        Self::on(Arc::new(Bus::new("private")))
    }

    /// A transport on the process-wide bus called `name` (created on first use;
    /// it lives as long as the process).
    pub fn named(name: &str) -> Self {
        let bus = lock(registry())
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Bus::new(name)))
            .clone();
        Self::on(bus)
    }

    /// Another transport on the same bus (with its own "closed" state).
    pub fn sibling(&self) -> Self {
        Self::on(self.bus.clone())
    }

    fn on(bus: Arc<Bus>) -> Self {
        Self {
            bus,
            closed: watch::channel(false).0,
        }
    }

    fn check_open(&self) -> Result<()> {
        if *self.closed.borrow() {
            Err(BusError::Closed)
        } else {
            Ok(())
        }
    }

    async fn do_call(&self, queue: &str, mut env: Envelope, timeout: Duration) -> Result<Envelope> {
        self.check_open()?;
        let n = self.bus.next_call.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{n}", uuid::Uuid::new_v4().simple());
        env.correlation_id = id.clone();
        env.reply_to = format!("reply.inproc.{}", self.bus.name);
        env.set_deadline_in(timeout);
        let (tx, rx) = oneshot::channel();
        lock(&self.bus.pending).insert(id.clone(), tx);
        let _guard = PendingGuard {
            bus: &self.bus,
            id: &id,
        };
        self.bus.queue(queue).push_back(env);
        metrics::published(KIND, Op::Call, queue);
        let mut closed = self.closed.subscribe();
        tokio::select! {
            reply = rx => reply.map_err(|_| BusError::Closed).and_then(reply_result),
            _ = tokio::time::sleep(timeout) => Err(BusError::Timeout(timeout)),
            _ = super::until_closed(&mut closed) => Err(BusError::Closed),
        }
    }
}

/// Removes a call's pending entry however the call ends.
struct PendingGuard<'a> {
    bus: &'a Bus,
    id: &'a str,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.bus.pending).remove(self.id);
    }
}

/// Settles and replies for in-process deliveries.
struct Ops {
    bus: Arc<Bus>,
    /// The queue to requeue into; `None` for fan-out deliveries.
    queue: Option<Arc<Queue>>,
}

impl DeliveryOps for Ops {
    fn settle(self: Box<Self>, how: Settle, envelope: &Envelope) -> BoxFuture<'static, Result<()>> {
        if let (Settle::Requeue, Some(q)) = (how, &self.queue) {
            q.push_front(envelope.clone());
        }
        futures_util::future::ready(Ok(())).boxed()
    }

    fn reply(&self, _to: &str, reply: Envelope) -> BoxFuture<'static, Result<()>> {
        metrics::published(KIND, Op::Reply, "reply");
        match lock(&self.bus.pending).remove(&reply.correlation_id) {
            Some(tx) => {
                let _ = tx.send(reply);
            }
            None => {
                tracing::debug!(correlation_id = %reply.correlation_id, "reply for a call nobody waits for any more")
            }
        }
        futures_util::future::ready(Ok(())).boxed()
    }
}

impl Transport for InprocTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Inproc
    }

    fn cast<'a>(&'a self, queue: &'a str, env: Envelope) -> BoxFuture<'a, Result<()>> {
        async move {
            self.check_open()?;
            self.bus.queue(queue).push_back(env);
            metrics::published(KIND, Op::Cast, queue);
            Ok(())
        }
        .boxed()
    }

    fn call<'a>(
        &'a self,
        queue: &'a str,
        env: Envelope,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Envelope>> {
        async move {
            let res = self.do_call(queue, env, timeout).await;
            if let Err(e) = &res {
                metrics::call_failed(KIND, e);
            }
            res
        }
        .boxed()
    }

    fn fanout<'a>(&'a self, topic: &'a str, env: Envelope) -> BoxFuture<'a, Result<()>> {
        async move {
            self.check_open()?;
            // No subscriber is not an error: fan-out is best effort.
            let _ = self.bus.topic(topic).send(env);
            metrics::published(KIND, Op::Fanout, topic);
            Ok(())
        }
        .boxed()
    }

    fn consume<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<Subscription>> {
        async move {
            self.check_open()?;
            let q = self.bus.queue(queue);
            let bus = self.bus.clone();
            let closed = self.closed.subscribe();
            let inner = stream::unfold((q, bus, closed), |(q, bus, mut closed)| async move {
                loop {
                    let popped = {
                        let notified = q.notify.notified();
                        tokio::pin!(notified);
                        // Register before looking, so a push in between wakes us.
                        notified.as_mut().enable();
                        if *closed.borrow() {
                            return None;
                        }
                        match q.pop() {
                            Some(item) => Some(item),
                            None => {
                                tokio::select! {
                                    _ = &mut notified => None,
                                    _ = super::until_closed(&mut closed) => return None,
                                }
                            }
                        }
                    };
                    if let Some((env, redelivered)) = popped {
                        let ops = Box::new(Ops {
                            bus: bus.clone(),
                            queue: Some(q.clone()),
                        });
                        let d = Delivery::new(env, redelivered, ops);
                        return Some((d, (q, bus, closed)));
                    }
                }
            });
            Ok(Subscription::new(
                queue,
                TransportKind::Inproc,
                inner.boxed(),
            ))
        }
        .boxed()
    }

    fn subscribe<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<Subscription>> {
        async move {
            self.check_open()?;
            let rx = self.bus.topic(topic).subscribe();
            let bus = self.bus.clone();
            let closed = self.closed.subscribe();
            let name = topic.to_owned();
            let inner = stream::unfold(
                (rx, bus, closed, name),
                |(mut rx, bus, mut closed, name)| async move {
                    loop {
                        let got = tokio::select! {
                            got = rx.recv() => got,
                            _ = super::until_closed(&mut closed) => return None,
                        };
                        match got {
                            Ok(env) => {
                                let ops = Box::new(Ops {
                                    bus: bus.clone(),
                                    queue: None,
                                });
                                let d = Delivery::new(env, false, ops);
                                return Some((d, (rx, bus, closed, name)));
                            }
                            Err(broadcast::error::RecvError::Lagged(n)) => {
                                tracing::warn!(topic = %name, missed = n, "fan-out subscriber lagged behind");
                            }
                            Err(broadcast::error::RecvError::Closed) => return None,
                        }
                    }
                },
            );
            Ok(Subscription::new(topic, TransportKind::Inproc, inner.boxed()))
        }
        .boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.closed.send_replace(true);
        futures_util::future::ready(()).boxed()
    }
}
