//! The message bus: one [`Transport`] trait, two implementations.
//!
//! - [`amqp::AmqpTransport`]: RabbitMQ through lapin, one vhost per cell
//!   (`amqp://user:pass@host:5672/<vhost>`).
//! - [`inproc::InprocTransport`]: tokio channels inside one process
//!   (`inproc://<name>`; every [`connect`] with the same name in the same
//!   process shares one bus), for the embedded region and for tests.
//!
//! One transport value is one cell's broker. The operations:
//!
//! - **cast** to a named queue (`compute.<host>`, `conductor`, ...): work
//!   queue semantics, competing consumers, each message goes to one of them.
//! - **call**: a cast that carries a correlation id and a reply address, then
//!   waits for the matching reply, at most for a timeout. The envelope's
//!   deadline is set to the timeout, and consumers drop messages whose
//!   deadline has passed (nobody waits for their answer any more).
//! - **fan-out** to a topic: every current subscriber gets a copy.
//!
//! # Delivery guarantees, honestly
//!
//! - **Cast is at-least-once once it returned `Ok`.** Over RabbitMQ the
//!   queue is durable, the message persistent, and `cast` returns only after
//!   the broker's publisher confirm, so a confirmed cast survives a broker
//!   restart. Consumers ack manually after the handler took the message
//!   ([`Delivery::ack`], [`Delivery::reply`]); a delivery dropped unsettled, or
//!   whose channel died, is redelivered. Hence duplicates are possible and
//!   handlers must be idempotent (or deduplicate on the request id). A cast
//!   that returned an error may or may not have been delivered.
//!   In-process, a cast is kept until consumed but dies with the process.
//! - **Call is at-most-once from the caller's view**: the request is not
//!   persistent, expires with its deadline, and the reply queue belongs to
//!   the calling connection. When that connection drops, every call in
//!   flight fails at once with [`BusError::Disconnected`] (the remote side
//!   may or may not have executed it); a call that finds the connection
//!   down waits for it until its timeout and then fails with
//!   [`BusError::Unavailable`] (nothing was sent); otherwise a call without
//!   a reply fails with [`BusError::Timeout`]. Calls never hang past their
//!   timeout. [`BusError::is_connection_loss`] tells the first two apart.
//!   After `Disconnected` or `Timeout` the remote side may have executed
//!   the call (a timed-out request may even still be executed, if it was
//!   taken before its deadline); a caller whose method is safe to repeat
//!   may call again after any of the three (the compute agent does, see
//!   its conductor client).
//! - **Fan-out is best-effort**: not durable, not confirmed; subscribers that
//!   are disconnected (or lag too far behind in-process) miss messages.
//! - No ordering guarantee across redeliveries or reconnections.
//!
//! While the RabbitMQ connection is down, publishers wait for it to come
//! back for at most [`BusOptions::publish_wait`], then fail with
//! [`BusError::Unavailable`]; subscriptions survive reconnections.

pub mod amqp;
pub mod inproc;
pub mod metrics;

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, Stream, StreamExt};

use crate::wire::Envelope;

pub use amqp::AmqpTransport;
pub use inproc::InprocTransport;

/// Errors of the message bus.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// No reply came within the call's timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The broker connection was lost while the call was in flight.
    #[error("broker connection lost while the call was in flight")]
    Disconnected,
    /// The transport was closed.
    #[error("transport closed")]
    Closed,
    /// The broker could not be reached within the wait bound.
    #[error("broker unavailable for {0:?}")]
    Unavailable(Duration),
    /// The remote method failed and said why.
    #[error("remote error {code}: {message}")]
    Remote {
        /// Machine-readable code.
        code: String,
        /// Human-readable message.
        message: String,
    },
    /// A message on the wire was not a valid envelope.
    #[error("could not decode envelope")]
    Decode(#[source] prost::DecodeError),
    /// The broker refused a publish (negative confirm or unroutable).
    #[error("broker refused the message")]
    Refused,
    /// The CA to trust for `amqps://` could not be read.
    #[error("cannot read the CA file for amqps: {0}")]
    Tls(String),
    /// The broker is blocking publishers (`connection.blocked`: a memory
    /// or disk alarm); nothing was sent. Fails at once instead of waiting
    /// for a broker that reads nothing until its alarm clears.
    #[error("the broker is blocking publishers (connection.blocked: a memory or disk alarm); nothing was sent")]
    Blocked,
    /// The broker began blocking publishers while this publish was on its
    /// way (sent, its confirm not yet in): it may have been taken, and is
    /// then routed once the alarm clears. The sender cannot tell, so it
    /// must treat the message as possibly delivered.
    #[error("the broker began blocking publishers (connection.blocked) while this publish awaited its confirm; it may have been delivered")]
    BlockedInFlight,
    /// The bus URL is not one we understand.
    #[error("invalid bus url {0:?} (expected amqp://... or inproc://<name>)")]
    InvalidUrl(String),
    /// The broker client reported an error.
    #[error("broker error")]
    Broker(#[source] lapin::Error),
}

impl BusError {
    /// Whether the call (or publish) failed because the broker connection
    /// was lost or could not be re-established in time, rather than because
    /// the remote side refused it or did not answer on a live connection.
    /// Such a call may be repeated once the connection is back, if its
    /// method is safe to repeat (the remote side may have executed it).
    pub fn is_connection_loss(&self) -> bool {
        matches!(self, Self::Disconnected | Self::Unavailable(_))
    }
}

/// Result type of the message bus.
pub type Result<T, E = BusError> = std::result::Result<T, E>;

/// Tunables of a transport; the defaults suit services and tests.
#[derive(Debug, Clone)]
pub struct BusOptions {
    /// Unacknowledged deliveries per consumer (AMQP `basic.qos`).
    pub prefetch: u16,
    /// How long a publish waits for a lost broker connection to come back.
    pub publish_wait: Duration,
    /// First delay between reconnection attempts.
    pub reconnect_min: Duration,
    /// Largest delay between reconnection attempts (exponential backoff).
    pub reconnect_max: Duration,
    /// Name shown for the connection in the broker's management tools.
    pub connection_name: String,
}

impl Default for BusOptions {
    fn default() -> Self {
        Self {
            prefetch: 32,
            publish_wait: Duration::from_secs(10),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            connection_name: "fabric".to_owned(),
        }
    }
}

/// Which implementation a transport is (also the `transport` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// RabbitMQ.
    Amqp,
    /// In-process channels.
    Inproc,
}

impl TransportKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Amqp => "amqp",
            Self::Inproc => "inproc",
        }
    }
}

/// One cell's message bus. Object safe: services hold an `Arc<dyn Transport>`.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Which implementation this is.
    fn kind(&self) -> TransportKind;

    /// Sends `env` to one consumer of `queue`. Returns once the message is
    /// safely queued (over RabbitMQ: confirmed by the broker).
    fn cast<'a>(&'a self, queue: &'a str, env: Envelope) -> BoxFuture<'a, Result<()>>;

    /// Sends `env` to one consumer of `queue` and waits at most `timeout` for
    /// its reply. Sets the envelope's correlation id, reply address and
    /// deadline. A reply carrying an error becomes [`BusError::Remote`].
    fn call<'a>(
        &'a self,
        queue: &'a str,
        env: Envelope,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Envelope>>;

    /// Sends `env` to every current subscriber of `topic` (best effort).
    fn fanout<'a>(&'a self, topic: &'a str, env: Envelope) -> BoxFuture<'a, Result<()>>;

    /// Starts consuming `queue` (creating it if needed). Several consumers of
    /// one queue compete: each message goes to one of them. When this
    /// returns, the consumer is registered.
    fn consume<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<Subscription>>;

    /// Subscribes to fan-out `topic`. When this returns, the subscription is
    /// registered and sees every later fan-out.
    fn subscribe<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<Subscription>>;

    /// Closes the transport: calls in flight fail with [`BusError::Closed`],
    /// subscriptions end, later operations fail.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// Connects to the bus at `url` with default options: `amqp://...` is
/// RabbitMQ (the path is the cell's vhost), `inproc://<name>` is the
/// in-process bus called `<name>` (shared by every caller in the process).
pub async fn connect(url: &str) -> Result<Arc<dyn Transport>> {
    connect_with(url, BusOptions::default()).await
}

/// Like [`connect`], with explicit options. Over RabbitMQ the first
/// connection attempt must succeed; later losses are retried forever.
pub async fn connect_with(url: &str, options: BusOptions) -> Result<Arc<dyn Transport>> {
    if url.starts_with("amqp://") || url.starts_with("amqps://") {
        Ok(Arc::new(AmqpTransport::connect(url, options).await?))
    } else if let Some(name) = url.strip_prefix("inproc://") {
        if name.is_empty() {
            return Err(BusError::InvalidUrl(url.to_owned()));
        }
        Ok(Arc::new(InprocTransport::named(name)))
    } else {
        Err(BusError::InvalidUrl(url.to_owned()))
    }
}

/// How a delivery is settled with the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Done with it: remove it from the queue.
    Ack,
    /// Put it back for another consumer.
    Requeue,
    /// Drop it without processing (poison or expired).
    Discard,
}

/// Transport-specific side of a [`Delivery`].
pub(crate) trait DeliveryOps: Send + Sync + 'static {
    /// Settles the delivery. Work that needs no I/O is done before the
    /// future is returned, so dropping the future is fine for it.
    fn settle(self: Box<Self>, how: Settle, envelope: &Envelope) -> BoxFuture<'static, Result<()>>;
    /// Sends `reply` to the caller's reply address `to`.
    fn reply(&self, to: &str, reply: Envelope) -> BoxFuture<'static, Result<()>>;
}

/// One message taken from a [`Subscription`].
///
/// Settle it with [`ack`](Self::ack) (or [`reply`](Self::reply) for a call)
/// once the handler has taken responsibility for it. A delivery dropped
/// unsettled goes back to the queue for another consumer.
pub struct Delivery {
    envelope: Envelope,
    redelivered: bool,
    ops: Option<Box<dyn DeliveryOps>>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("envelope", &self.envelope)
            .field("redelivered", &self.redelivered)
            .field("settled", &self.ops.is_none())
            .finish()
    }
}

impl Delivery {
    pub(crate) fn new(envelope: Envelope, redelivered: bool, ops: Box<dyn DeliveryOps>) -> Self {
        Self {
            envelope,
            redelivered,
            ops: Some(ops),
        }
    }

    /// The message.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// Whether the broker delivered this message before (to a consumer that
    /// did not ack it): the handler may already have seen it.
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }

    /// Whether this is a call that expects a reply.
    pub fn expects_reply(&self) -> bool {
        !self.envelope.reply_to.is_empty()
    }

    async fn settle(&mut self, how: Settle) -> Result<()> {
        match self.ops.take() {
            Some(ops) => ops.settle(how, &self.envelope).await,
            None => Ok(()),
        }
    }

    /// Acknowledges the message: it is removed from the queue. An error means
    /// the broker did not get the ack (e.g. the connection dropped); the
    /// message will then be delivered again.
    pub async fn ack(mut self) -> Result<()> {
        self.settle(Settle::Ack).await
    }

    /// Gives the message back to the queue for another consumer.
    pub async fn requeue(mut self) -> Result<()> {
        self.settle(Settle::Requeue).await
    }

    /// Drops the message without processing it (it will not come back).
    pub async fn reject(mut self) -> Result<()> {
        self.settle(Settle::Discard).await
    }

    /// Answers a call with `reply` (its correlation id is set from the
    /// request), then acknowledges the request. Build the reply with
    /// [`Envelope::reply`] or [`Envelope::error_reply`]. On a cast (no reply
    /// address) this only acknowledges.
    pub async fn reply(mut self, mut reply: Envelope) -> Result<()> {
        if self.expects_reply() {
            reply.correlation_id = self.envelope.correlation_id.clone();
            if let Some(ops) = &self.ops {
                ops.reply(&self.envelope.reply_to, reply).await?;
            }
        }
        self.settle(Settle::Ack).await
    }

    /// Settles without waiting: used for expired messages.
    fn settle_detached(mut self, how: Settle) {
        if let Some(ops) = self.ops.take() {
            let fut = ops.settle(how, &self.envelope);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(fut);
            }
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(ops) = self.ops.take() {
            // Unsettled: back to the queue. Without a runtime the broker
            // requeues it anyway when the channel closes.
            let fut = ops.settle(Settle::Requeue, &self.envelope);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(fut);
            }
        }
    }
}

/// A stream of [`Delivery`]s from one queue or topic. Messages whose deadline
/// passed are dropped (and counted) instead of being handed out. Ends when
/// the transport is closed.
pub struct Subscription {
    name: String,
    transport: TransportKind,
    inner: BoxStream<'static, Delivery>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .finish()
    }
}

impl Subscription {
    pub(crate) fn new(
        name: &str,
        transport: TransportKind,
        inner: BoxStream<'static, Delivery>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            transport,
            inner,
        }
    }

    /// The queue or topic this subscription reads.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next delivery; `None` once the transport is closed.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.next().await
    }
}

impl Stream for Subscription {
    type Item = Delivery;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let this = &mut *self;
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(d)) if d.envelope.is_expired() => {
                    metrics::expired(this.transport.as_str(), &this.name);
                    tracing::debug!(queue = %this.name, method = %d.envelope.method, request_id = %d.envelope.request_id, "dropping expired message");
                    d.settle_detached(Settle::Discard);
                }
                Poll::Ready(Some(d)) => {
                    metrics::consumed(this.transport.as_str(), &this.name);
                    return Poll::Ready(Some(d));
                }
                other => return other,
            }
        }
    }
}

/// Resolves once `closed` says closed (or its sender, the transport, is gone).
pub(crate) async fn until_closed(closed: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = closed.wait_for(|c| *c).await;
}

/// Turns a reply envelope into the call's result.
pub(crate) fn reply_result(reply: Envelope) -> Result<Envelope> {
    match reply.error {
        Some(e) => Err(BusError::Remote {
            code: e.code,
            message: e.message,
        }),
        None => Ok(reply),
    }
}
