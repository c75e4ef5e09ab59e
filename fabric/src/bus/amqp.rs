//! The RabbitMQ transport, through lapin on tokio.
//!
//! One transport is one AMQP connection to one vhost (one cell's broker):
//!
//! - casts and calls go through the default exchange to **durable queues**
//!   named like the target (`compute.<host>`, `conductor`), declared on first
//!   publish and on consume. Casts are **persistent and confirmed**: `cast`
//!   returns after the broker's publisher confirm (and fails if the message
//!   was refused or unroutable). Call requests are transient, carry an AMQP
//!   expiration equal to the call's timeout, and are not confirmed: a lost
//!   request ends in a timeout, which the caller sees anyway.
//! - replies go to a per-transport **exclusive, auto-delete reply queue**
//!   (`reply.<uuid>`) and are matched to calls by correlation id.
//! - fan-out goes through one non-durable `fanout` exchange per topic
//!   (`fanout.<topic>`); each subscription binds its own exclusive,
//!   server-named queue.
//! - consumers use manual acks with `basic.qos` prefetch
//!   ([`BusOptions::prefetch`]); fan-out consumers auto-ack.
//!
//! A supervisor task watches the connection. When it is lost (broker
//! restart, network), every call in flight fails with
//! [`BusError::Disconnected`] at once, and the supervisor reconnects with
//! exponential backoff ([`BusOptions::reconnect_min`] to
//! [`BusOptions::reconnect_max`]), re-declares the reply queue and restarts
//! every live subscription's consumer, so [`Subscription`]s keep working.
//! Publishes issued while the connection is down wait for it for at most
//! [`BusOptions::publish_wait`] (a call: at most its timeout, then
//! [`BusError::Unavailable`]). Unacked deliveries of the lost connection
//! are redelivered by the broker (at-least-once). The loss, each failed
//! attempt (every tenth at `warn`, the others at `debug`) and the
//! re-established connection are logged, without the URL's credentials.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{self, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;

use super::metrics::{self, Op};
use super::{
    reply_result, BusError, BusOptions, Delivery, DeliveryOps, Result, Settle, Subscription,
    Transport, TransportKind,
};
use crate::wire::Envelope;

const KIND: &str = "amqp";
/// Bound on one connection attempt (TCP + AMQP handshake + topology).
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the supervisor double-checks the connection status.
const HEALTH_CHECK: Duration = Duration::from_millis(500);
const CONTENT_TYPE: &str = "application/x-protobuf";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The RabbitMQ transport. Dropping it closes it.
pub struct AmqpTransport {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTransport")
            .field("connection_name", &self.inner.options.connection_name)
            .field("reply_queue", &self.inner.reply_queue)
            .finish()
    }
}

/// Connection state as seen by publishers.
#[derive(Clone)]
enum State {
    Down,
    Up(Arc<Live>),
    Closed,
}

/// One established connection ("generation") and its shared channels.
struct Live {
    generation: u64,
    conn: Connection,
    /// Publisher confirms on: casts.
    confirm_ch: Channel,
    /// No confirms: calls, replies, fan-out.
    fast_ch: Channel,
    /// Queues and exchanges already declared on this connection.
    declared: Mutex<HashSet<String>>,
    /// Signalled by anything that notices the connection died.
    lost: Arc<Notify>,
}

impl Live {
    /// Fails when the broker said `connection.blocked` and has not said
    /// `connection.unblocked` since: a publish would wait for its alarm.
    fn unblocked(&self) -> Result<()> {
        if self.conn.status().blocked() {
            return Err(BusError::Blocked);
        }
        Ok(())
    }

    /// Resolves once the broker has said `connection.blocked` (lapin
    /// keeps it as a flag of the connection's status, without a
    /// notification: looked at every 50 ms).
    async fn until_blocked(&self) {
        while !self.conn.status().blocked() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn is_healthy(&self) -> bool {
        self.conn.status().connected()
            && self.confirm_ch.status().connected()
            && self.fast_ch.status().connected()
    }
}

#[derive(Clone, Debug)]
enum Target {
    Queue(String),
    Topic(String),
}

/// A subscription to (re)start on every connection.
struct SubSpec {
    target: Target,
    tx: mpsc::Sender<Delivery>,
}

struct Inner {
    uri: String,
    options: BusOptions,
    reply_queue: String,
    state: watch::Sender<State>,
    closed: watch::Sender<bool>,
    /// Set once a close has finished (the connection closed with the
    /// broker), which is what [`AmqpTransport::close`] waits for.
    finished: watch::Sender<bool>,
    pending: Mutex<HashMap<String, oneshot::Sender<Result<Envelope>>>>,
    /// Held while starting consumers, so a new subscription and a
    /// reconnection never both (or neither) start one.
    subs: tokio::sync::Mutex<Vec<SubSpec>>,
}

impl AmqpTransport {
    /// Connects to `uri` (`amqp://user:pass@host:port/vhost`, or `amqps://`
    /// for TLS, port 5671 by default). The first
    /// connection attempt must succeed; later losses are retried forever.
    pub async fn connect(uri: &str, options: BusOptions) -> Result<Self> {
        let inner = Arc::new(Inner {
            uri: uri.to_owned(),
            reply_queue: format!("reply.{}", uuid::Uuid::new_v4().simple()),
            options,
            state: watch::channel(State::Down).0,
            closed: watch::channel(false).0,
            finished: watch::channel(false).0,
            pending: Mutex::default(),
            subs: tokio::sync::Mutex::default(),
        });
        let live = inner.establish(1).await?;
        tokio::spawn(inner.clone().supervise(live));
        Ok(Self { inner })
    }
}

impl Drop for AmqpTransport {
    fn drop(&mut self) {
        self.inner.closed.send_replace(true);
    }
}

impl Inner {
    /// Opens a connection with its channels, reply queue and consumers, and
    /// publishes it as the current state.
    async fn establish(self: &Arc<Self>, generation: u64) -> Result<Arc<Live>> {
        match tokio::time::timeout(ESTABLISH_TIMEOUT, self.try_establish(generation)).await {
            Ok(res) => res,
            Err(_) => Err(BusError::Unavailable(ESTABLISH_TIMEOUT)),
        }
    }

    async fn try_establish(self: &Arc<Self>, generation: u64) -> Result<Arc<Live>> {
        let props = ConnectionProperties::default()
            .with_connection_name(self.options.connection_name.clone().into())
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio);
        // `amqps://`: TLS through the system's OpenSSL, trusting the
        // process's CA (`http::trust_ca_file`) besides the system's roots.
        let tls = lapin::tcp::OwnedTLSConfig {
            identity: None,
            cert_chain: match crate::http::process_ca_file() {
                Some(path) if self.uri.starts_with("amqps://") => Some(
                    std::fs::read_to_string(&path)
                        .map_err(|e| BusError::Tls(format!("{}: {e}", path.display())))?,
                ),
                _ => None,
            },
        };
        let conn = Connection::connect_with_config(&self.uri, props, tls)
            .await
            .map_err(BusError::Broker)?;
        let lost = Arc::new(Notify::new());
        {
            let lost = lost.clone();
            conn.on_error(move |err| {
                tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "broker connection error"
                );
                lost.notify_one();
            });
        }
        let confirm_ch = conn.create_channel().await.map_err(BusError::Broker)?;
        confirm_ch
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(BusError::Broker)?;
        let fast_ch = conn.create_channel().await.map_err(BusError::Broker)?;
        let live = Arc::new(Live {
            generation,
            conn,
            confirm_ch,
            fast_ch,
            declared: Mutex::default(),
            lost,
        });
        if let Err(e) = self.start_reply_consumer(&live).await {
            let _ = live.conn.close(200, "setup failed").await;
            return Err(e);
        }
        let mut subs = self.subs.lock().await;
        subs.retain(|s| !s.tx.is_closed());
        for spec in subs.iter() {
            if let Err(e) = self
                .start_consumer(&live, &spec.target, spec.tx.clone())
                .await
            {
                drop(subs);
                let _ = live.conn.close(200, "setup failed").await;
                return Err(e);
            }
        }
        self.state.send_replace(State::Up(live.clone()));
        drop(subs);
        Ok(live)
    }

    async fn start_reply_consumer(self: &Arc<Self>, live: &Arc<Live>) -> Result<()> {
        let ch = live.conn.create_channel().await.map_err(BusError::Broker)?;
        let opts = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..Default::default()
        };
        ch.queue_declare(&self.reply_queue, opts, FieldTable::default())
            .await
            .map_err(BusError::Broker)?;
        let mut consumer = ch
            .basic_consume(
                &self.reply_queue,
                &consumer_tag(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(BusError::Broker)?;
        let inner = Arc::downgrade(self);
        let lost = live.lost.clone();
        tokio::spawn(async move {
            while let Some(Ok(d)) = consumer.next().await {
                let Some(inner) = inner.upgrade() else { return };
                match Envelope::from_bytes(&d.data) {
                    Ok(reply) => {
                        let waiter = lock(&inner.pending).remove(&reply.correlation_id);
                        match waiter {
                            Some(tx) => {
                                let _ = tx.send(reply_result(reply));
                            }
                            None => {
                                tracing::debug!(correlation_id = %reply.correlation_id, "reply for a call nobody waits for any more")
                            }
                        }
                    }
                    Err(e) => tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "undecodable reply dropped"
                    ),
                }
            }
            // The reply consumer only ends with its channel or connection.
            lost.notify_one();
        });
        Ok(())
    }

    /// Starts one consumer on `live` that feeds `tx` until the subscription
    /// is dropped, the transport closed, or the connection lost.
    async fn start_consumer(
        self: &Arc<Self>,
        live: &Arc<Live>,
        target: &Target,
        tx: mpsc::Sender<Delivery>,
    ) -> Result<()> {
        let ch = live.conn.create_channel().await.map_err(BusError::Broker)?;
        let (queue, no_ack) = match target {
            Target::Queue(name) => {
                ch.basic_qos(self.options.prefetch, BasicQosOptions::default())
                    .await
                    .map_err(BusError::Broker)?;
                ch.queue_declare(name, durable_queue(), FieldTable::default())
                    .await
                    .map_err(BusError::Broker)?;
                (name.clone(), false)
            }
            Target::Topic(topic) => {
                let exchange = fanout_exchange(topic);
                ch.exchange_declare(
                    &exchange,
                    ExchangeKind::Fanout,
                    ExchangeDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(BusError::Broker)?;
                let opts = QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..Default::default()
                };
                let q = ch
                    .queue_declare("", opts, FieldTable::default())
                    .await
                    .map_err(BusError::Broker)?;
                let qname = q.name().as_str().to_owned();
                ch.queue_bind(
                    &qname,
                    &exchange,
                    "",
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(BusError::Broker)?;
                (qname, true)
            }
        };
        let mut consumer = ch
            .basic_consume(
                &queue,
                &consumer_tag(),
                BasicConsumeOptions {
                    no_ack,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(BusError::Broker)?;
        let inner = Arc::downgrade(self);
        let mut closed = self.closed.subscribe();
        let target = target.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = consumer.next() => next,
                    _ = tx.closed() => break,
                    _ = super::until_closed(&mut closed) => break,
                };
                let d = match next {
                    Some(Ok(d)) => d,
                    Some(Err(e)) => {
                        tracing::debug!(
                            error = &e as &dyn std::error::Error,
                            ?target,
                            "consumer ended"
                        );
                        return;
                    }
                    None => return,
                };
                let Some(inner) = inner.upgrade() else { break };
                let env = match Envelope::from_bytes(&d.data) {
                    Ok(env) => env,
                    Err(e) => {
                        tracing::warn!(
                            error = &e as &dyn std::error::Error,
                            ?target,
                            "undecodable message dropped"
                        );
                        if !no_ack {
                            let _ = d.acker.reject(BasicRejectOptions { requeue: false }).await;
                        }
                        continue;
                    }
                };
                let ops = Box::new(AmqpOps {
                    acker: (!no_ack).then_some(d.acker),
                    inner,
                });
                if tx
                    .send(Delivery::new(env, d.redelivered, ops))
                    .await
                    .is_err()
                {
                    break; // the unsent delivery requeues itself on drop
                }
            }
            // Closing the channel hands its unacked messages back to the queue.
            let _ = ch.close(200, "subscription ended").await;
        });
        Ok(())
    }

    /// Watches the connection; on loss fails the calls in flight and
    /// reconnects with backoff, until the transport is closed.
    async fn supervise(self: Arc<Self>, mut live: Arc<Live>) {
        let mut closed = self.closed.subscribe();
        loop {
            // Up: wait for loss or close.
            let shutdown = loop {
                tokio::select! {
                    _ = live.lost.notified() => break false,
                    _ = super::until_closed(&mut closed) => break true,
                    _ = tokio::time::sleep(HEALTH_CHECK) => {
                        if !live.is_healthy() { break false; }
                    }
                }
            };
            if shutdown {
                self.shut_down(Some(&live)).await;
                return;
            }
            tracing::warn!(
                generation = live.generation,
                "broker connection lost; reconnecting"
            );
            self.state.send_replace(State::Down);
            self.fail_pending(|| BusError::Disconnected);
            let _ = live.conn.close(200, "reconnecting").await;
            // Down: reconnect with exponential backoff.
            let mut delay = self.options.reconnect_min;
            let generation = live.generation + 1;
            let down_since = Instant::now();
            let mut attempts = 0u32;
            live = loop {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = super::until_closed(&mut closed) => {
                        self.shut_down(None).await;
                        return;
                    }
                }
                attempts += 1;
                match self.establish(generation).await {
                    Ok(new) => break new,
                    Err(e) => {
                        if attempts.is_multiple_of(10) {
                            tracing::warn!(
                                error = &e as &dyn std::error::Error,
                                attempts,
                                down_for = ?down_since.elapsed(),
                                "broker still unreachable; reconnecting"
                            );
                        } else {
                            tracing::debug!(
                                error = &e as &dyn std::error::Error,
                                ?delay,
                                "reconnect failed"
                            );
                        }
                        delay = (delay * 2).min(self.options.reconnect_max);
                    }
                }
            };
            metrics::reconnected(KIND);
            tracing::info!(
                generation,
                attempts,
                down_for = ?down_since.elapsed(),
                "broker connection re-established; consumers restarted"
            );
        }
    }

    async fn shut_down(&self, live: Option<&Arc<Live>>) {
        self.state.send_replace(State::Closed);
        self.fail_pending(|| BusError::Closed);
        self.subs.lock().await.clear();
        if let Some(live) = live {
            // Bounded: a broker that does not answer the close must not
            // hold the caller's shutdown.
            let _ = tokio::time::timeout(
                Duration::from_secs(3),
                live.conn.close(200, "transport closed"),
            )
            .await;
        }
        self.finished.send_replace(true);
    }

    fn fail_pending(&self, err: impl Fn() -> BusError) {
        let waiters: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in waiters {
            let _ = tx.send(Err(err()));
        }
    }

    /// The current connection, waiting until `deadline` for one that is not
    /// generation `not` (a connection we just saw fail).
    async fn live(&self, not: Option<u64>, deadline: Instant) -> Result<Arc<Live>> {
        let mut rx = self.state.subscribe();
        let wait = rx.wait_for(|s| match s {
            State::Down => false,
            State::Up(l) => Some(l.generation) != not,
            State::Closed => true,
        });
        let res = match tokio::time::timeout_at(deadline, wait).await {
            Err(_) => Err(BusError::Unavailable(self.options.publish_wait)),
            Ok(Err(_)) => Err(BusError::Closed),
            Ok(Ok(state)) => match &*state {
                State::Up(l) => Ok(l.clone()),
                _ => Err(BusError::Closed),
            },
        };
        res
    }

    /// Declares `queue` (durable) or the fan-out exchange of `topic` once per
    /// connection, on a throwaway channel so that a refused declaration
    /// cannot break the shared publishing channels.
    async fn declare(&self, live: &Live, target: &Target) -> Result<()> {
        let key = match target {
            Target::Queue(q) => format!("q:{q}"),
            Target::Topic(t) => format!("x:{t}"),
        };
        if lock(&live.declared).contains(&key) {
            return Ok(());
        }
        let ch = live.conn.create_channel().await.map_err(BusError::Broker)?;
        let res = match target {
            Target::Queue(q) => ch
                .queue_declare(q, durable_queue(), FieldTable::default())
                .await
                .map(drop),
            Target::Topic(t) => {
                ch.exchange_declare(
                    &fanout_exchange(t),
                    ExchangeKind::Fanout,
                    ExchangeDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await
            }
        };
        if ch.status().connected() {
            let _ = ch.close(200, "declared").await;
        }
        res.map_err(BusError::Broker)?;
        lock(&live.declared).insert(key);
        Ok(())
    }

    async fn cast_once(
        &self,
        live: &Live,
        queue: &str,
        payload: &[u8],
        ttl: Option<Duration>,
    ) -> Result<()> {
        self.declare(live, &Target::Queue(queue.to_owned())).await?;
        let mut props = BasicProperties::default()
            .with_content_type(CONTENT_TYPE.into())
            .with_delivery_mode(2);
        // The broker drops a copy that outlives its deadline in the queue
        // (the subscription would drop it on delivery anyway).
        if let Some(ttl) = ttl {
            let ms = ttl.as_millis().max(1);
            props = props.with_expiration(ShortString::from(ms.to_string()));
        }
        let confirm = live
            .confirm_ch
            .basic_publish(
                "",
                queue,
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                payload,
                props,
            )
            .await
            .map_err(BusError::Broker)?
            .await
            .map_err(BusError::Broker)?;
        match confirm {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(_)) | Confirmation::Nack(_) => Err(BusError::Refused),
            Confirmation::NotRequested => unreachable!("confirms are enabled on this channel"),
        }
    }

    async fn cast(&self, queue: &str, env: &Envelope) -> Result<()> {
        let payload = env.to_bytes();
        let deadline = Instant::now() + self.options.publish_wait;
        let mut failed_generation = None;
        loop {
            let live = self.live(failed_generation, deadline).await?;
            live.unblocked()?;
            // Bounded as a whole: a publish or its confirm on a channel
            // that broke without saying so would otherwise wait forever
            // (seen after a vhost's connections were closed: heartbeat
            // casts hung from then on).
            let once = self.cast_once(&live, queue, &payload, env.remaining());
            let res = tokio::select! {
                r = tokio::time::timeout_at(deadline, once) => match r {
                    Ok(r) => r,
                    // A blocked broker reads nothing until its alarm
                    // clears: the connection is not lost.
                    // Sent (or being sent): its outcome is not known.
                    Err(_) if live.conn.status().blocked() => return Err(BusError::BlockedInFlight),
                    Err(_) => {
                        live.lost.notify_one();
                        return Err(BusError::Timeout(self.options.publish_wait));
                    }
                },
                // Blocked while this publish waited for its confirm.
                () = live.until_blocked() => return Err(BusError::BlockedInFlight),
            };
            match res {
                Ok(()) => {
                    metrics::published(KIND, Op::Cast, queue);
                    return Ok(());
                }
                // The connection broke under us: retry on the next one.
                Err(e) if !live.is_healthy() && Instant::now() < deadline => {
                    tracing::debug!(
                        error = &e as &dyn std::error::Error,
                        "cast failed on a dying connection; retrying"
                    );
                    live.lost.notify_one();
                    failed_generation = Some(live.generation);
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn call(&self, queue: &str, mut env: Envelope, timeout: Duration) -> Result<Envelope> {
        let deadline = Instant::now() + timeout;
        // Down for the whole timeout: `Unavailable` (nothing was sent).
        let live = self.live(None, deadline).await.map_err(|e| match e {
            BusError::Unavailable(_) => BusError::Unavailable(timeout),
            e => e,
        })?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        env.correlation_id = id.clone();
        env.reply_to = self.reply_queue.clone();
        env.set_deadline_in(timeout);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), tx);
        let _guard = PendingGuard {
            inner: self,
            id: &id,
        };
        if !live.is_healthy() {
            return Err(BusError::Disconnected);
        }
        live.unblocked()?;
        self.declare(&live, &Target::Queue(queue.to_owned()))
            .await
            .map_err(|e| {
                if live.is_healthy() {
                    e
                } else {
                    BusError::Disconnected
                }
            })?;
        let expiration = env.remaining().unwrap_or(timeout).as_millis().max(1);
        let props = BasicProperties::default()
            .with_content_type(CONTENT_TYPE.into())
            .with_expiration(ShortString::from(expiration.to_string()));
        let bytes = env.to_bytes();
        let publish =
            live.fast_ch
                .basic_publish("", queue, BasicPublishOptions::default(), &bytes, props);
        tokio::time::timeout_at(deadline, publish)
            .await
            .map_err(|_| BusError::Timeout(timeout))?
            .map_err(|e| {
                if live.is_healthy() {
                    BusError::Broker(e)
                } else {
                    BusError::Disconnected
                }
            })?;
        metrics::published(KIND, Op::Call, queue);
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(res)) => res,
            Ok(Err(_)) => Err(BusError::Disconnected),
            Err(_) => Err(BusError::Timeout(timeout)),
        }
    }

    async fn fanout(&self, topic: &str, env: &Envelope) -> Result<()> {
        let deadline = Instant::now() + self.options.publish_wait;
        let live = self.live(None, deadline).await?;
        live.unblocked()?;
        let target = Target::Topic(topic.to_owned());
        self.declare(&live, &target).await?;
        let props = BasicProperties::default().with_content_type(CONTENT_TYPE.into());
        let exchange = fanout_exchange(topic);
        let bytes = env.to_bytes();
        let publish = live.fast_ch.basic_publish(
            &exchange,
            "",
            BasicPublishOptions::default(),
            &bytes,
            props,
        );
        tokio::time::timeout_at(deadline, publish)
            .await
            .map_err(|_| BusError::Timeout(self.options.publish_wait))?
            .map_err(BusError::Broker)?;
        metrics::published(KIND, Op::Fanout, topic);
        Ok(())
    }

    async fn reply(&self, to: &str, reply: &Envelope) -> Result<()> {
        let deadline = Instant::now() + self.options.publish_wait;
        let live = self.live(None, deadline).await?;
        live.unblocked()?;
        let props = BasicProperties::default().with_content_type(CONTENT_TYPE.into());
        let bytes = reply.to_bytes();
        let publish =
            live.fast_ch
                .basic_publish("", to, BasicPublishOptions::default(), &bytes, props);
        tokio::time::timeout_at(deadline, publish)
            .await
            .map_err(|_| BusError::Timeout(self.options.publish_wait))?
            .map_err(BusError::Broker)?;
        metrics::published(KIND, Op::Reply, to);
        Ok(())
    }

    async fn subscription(self: &Arc<Self>, target: Target) -> Result<Subscription> {
        if *self.closed.borrow() {
            return Err(BusError::Closed);
        }
        let (tx, rx) = mpsc::channel(usize::from(self.options.prefetch.max(1)));
        let mut subs = self.subs.lock().await;
        subs.retain(|s| !s.tx.is_closed());
        let state = self.state.borrow().clone();
        match state {
            State::Closed => return Err(BusError::Closed),
            State::Up(live) => {
                if let Err(e) = self.start_consumer(&live, &target, tx.clone()).await {
                    if live.is_healthy() {
                        return Err(e);
                    }
                    // Lost meanwhile: the reconnection starts it.
                    live.lost.notify_one();
                }
            }
            State::Down => {} // the reconnection starts it
        }
        let name = match &target {
            Target::Queue(n) | Target::Topic(n) => n.clone(),
        };
        subs.push(SubSpec { target, tx });
        drop(subs);
        let inner = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|d| (d, rx)) });
        Ok(Subscription::new(&name, TransportKind::Amqp, inner.boxed()))
    }
}

/// Removes a call's pending entry however the call ends.
struct PendingGuard<'a> {
    inner: &'a Inner,
    id: &'a str,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.inner.pending).remove(self.id);
    }
}

/// Settles and replies for AMQP deliveries.
struct AmqpOps {
    /// `None` for auto-acked (fan-out) deliveries.
    acker: Option<lapin::acker::Acker>,
    inner: Arc<Inner>,
}

impl DeliveryOps for AmqpOps {
    fn settle(
        self: Box<Self>,
        how: Settle,
        _envelope: &Envelope,
    ) -> BoxFuture<'static, Result<()>> {
        let Some(acker) = self.acker else {
            return futures_util::future::ready(Ok(())).boxed();
        };
        async move {
            match how {
                Settle::Ack => acker.ack(BasicAckOptions::default()).await,
                Settle::Requeue => {
                    acker
                        .nack(BasicNackOptions {
                            requeue: true,
                            ..Default::default()
                        })
                        .await
                }
                Settle::Discard => acker.reject(BasicRejectOptions { requeue: false }).await,
            }
            .map_err(BusError::Broker)
        }
        .boxed()
    }

    fn reply(&self, to: &str, reply: Envelope) -> BoxFuture<'static, Result<()>> {
        let inner = self.inner.clone();
        let to = to.to_owned();
        async move { inner.reply(&to, &reply).await }.boxed()
    }
}

fn durable_queue() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn fanout_exchange(topic: &str) -> String {
    format!("fanout.{topic}")
}

fn consumer_tag() -> String {
    format!("fabric-{}", uuid::Uuid::new_v4().simple())
}

impl Transport for AmqpTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Amqp
    }

    fn cast<'a>(&'a self, queue: &'a str, env: Envelope) -> BoxFuture<'a, Result<()>> {
        async move { self.inner.cast(queue, &env).await }.boxed()
    }

    fn call<'a>(
        &'a self,
        queue: &'a str,
        env: Envelope,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Envelope>> {
        async move {
            let res = self.inner.call(queue, env, timeout).await;
            if let Err(e) = &res {
                metrics::call_failed(KIND, e);
            }
            res
        }
        .boxed()
    }

    fn fanout<'a>(&'a self, topic: &'a str, env: Envelope) -> BoxFuture<'a, Result<()>> {
        async move { self.inner.fanout(topic, &env).await }.boxed()
    }

    fn consume<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<Subscription>> {
        self.inner
            .subscription(Target::Queue(queue.to_owned()))
            .boxed()
    }

    fn subscribe<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<Subscription>> {
        self.inner
            .subscription(Target::Topic(topic.to_owned()))
            .boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            self.inner.closed.send_replace(true);
            // Until the connection is closed with the broker, not only
            // marked closed: a process that exits right after must not
            // leave the close half-done (the broker logs an abrupt
            // disconnect, lapin an I/O error on the stopping runtime).
            let mut rx = self.inner.finished.subscribe();
            let finished = rx.wait_for(|f| *f);
            let _ = tokio::time::timeout(Duration::from_secs(5), finished).await;
        }
        .boxed()
    }
}
