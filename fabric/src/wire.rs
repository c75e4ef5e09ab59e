//! Protobuf messages that cross the broker.
//!
//! Every broker message travels in an [`Envelope`]: the method name, the
//! request id of the component that sent it, the global request id of the
//! user request it belongs to, an absolute deadline, call plumbing
//! (correlation id, reply queue) and the method's own payload, itself a
//! protobuf message encoded into bytes. A reply is an envelope too; a failed
//! call answers with [`Envelope::error`] set.
//!
//! # Why hand-written `prost` structs and no `.proto` files
//!
//! The messages are plain Rust structs with `#[derive(prost::Message)]`
//! instead of code generated from `.proto` files by `prost-build`. That needs
//! no `protoc` binary and no `build.rs` (nothing to install on a build
//! machine, nothing regenerated on each build), and the structs are read like
//! any other Rust code. The encoding is ordinary protobuf: field tags are the
//! contract, so a tag, once released, is never reused or renumbered; new
//! fields get new tags and old readers skip them. If a non-Rust client ever
//! needs these messages, a `.proto` file can be written to match the tags.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;

/// The message every broker message travels in.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Envelope {
    /// Name of the remote method, e.g. `build_and_run_instance`.
    #[prost(string, tag = "1")]
    pub method: String,
    /// Request id of the component that sent this message (`req-<uuid>`).
    #[prost(string, tag = "2")]
    pub request_id: String,
    /// Request id of the user request this message belongs to, carried
    /// unchanged through every hop so one request can be followed end to end.
    #[prost(string, tag = "3")]
    pub global_request_id: String,
    /// Absolute deadline in milliseconds since the Unix epoch; `0` = none.
    /// Consumers drop messages whose deadline has passed.
    #[prost(uint64, tag = "4")]
    pub deadline_unix_ms: u64,
    /// Matches a reply to its call; set by the transport on `call`.
    #[prost(string, tag = "5")]
    pub correlation_id: String,
    /// Where the reply to a call goes; set by the transport on `call`, empty
    /// for a cast.
    #[prost(string, tag = "6")]
    pub reply_to: String,
    /// The method's own protobuf message, encoded.
    #[prost(bytes = "bytes", tag = "7")]
    pub payload: Bytes,
    /// Set on a reply when the remote method failed.
    #[prost(message, optional, tag = "8")]
    pub error: Option<RemoteError>,
}

/// A failure reported by the remote side of a call.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RemoteError {
    /// Machine-readable code, e.g. `NotFound`, `Conflict`.
    #[prost(string, tag = "1")]
    pub code: String,
    /// Human-readable message.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Envelope {
    /// A new envelope for `method` with an empty payload and no deadline.
    pub fn new(method: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            ..Self::default()
        }
    }

    /// Sets the request ids (builder style).
    pub fn with_request_ids(
        mut self,
        request_id: impl Into<String>,
        global_request_id: impl Into<String>,
    ) -> Self {
        self.request_id = request_id.into();
        self.global_request_id = global_request_id.into();
        self
    }

    /// Sets the payload to already-encoded bytes (builder style).
    pub fn with_payload(mut self, payload: impl Into<Bytes>) -> Self {
        self.payload = payload.into();
        self
    }

    /// Sets the payload to the encoding of a protobuf message (builder style).
    pub fn with_message<M: Message>(mut self, msg: &M) -> Self {
        self.payload = Bytes::from(msg.encode_to_vec());
        self
    }

    /// Sets the deadline to `timeout` from now (builder style).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.set_deadline_in(timeout);
        self
    }

    /// Sets the deadline to `timeout` from now unless an earlier one is set.
    pub fn set_deadline_in(&mut self, timeout: Duration) {
        let at = now_unix_ms().saturating_add(timeout.as_millis() as u64);
        if self.deadline_unix_ms == 0 || at < self.deadline_unix_ms {
            self.deadline_unix_ms = at;
        }
    }

    /// Time left until the deadline (`None` if there is no deadline; zero if
    /// it has passed).
    pub fn remaining(&self) -> Option<Duration> {
        (self.deadline_unix_ms != 0)
            .then(|| Duration::from_millis(self.deadline_unix_ms.saturating_sub(now_unix_ms())))
    }

    /// Whether the deadline is set and has passed at `now_ms`.
    pub fn is_expired_at(&self, now_ms: u64) -> bool {
        self.deadline_unix_ms != 0 && now_ms >= self.deadline_unix_ms
    }

    /// Whether the deadline is set and has passed.
    pub fn is_expired(&self) -> bool {
        self.is_expired_at(now_unix_ms())
    }

    /// Decodes the payload as protobuf message `M`.
    pub fn decode_message<M: Message + Default>(&self) -> Result<M, prost::DecodeError> {
        M::decode(self.payload.clone())
    }

    /// A successful reply to this request carrying `payload`: same method,
    /// request ids and correlation id; no deadline, no reply queue.
    pub fn reply(&self, payload: impl Into<Bytes>) -> Envelope {
        Envelope {
            method: self.method.clone(),
            request_id: self.request_id.clone(),
            global_request_id: self.global_request_id.clone(),
            deadline_unix_ms: 0,
            correlation_id: self.correlation_id.clone(),
            reply_to: String::new(),
            payload: payload.into(),
            error: None,
        }
    }

    /// A failed reply to this request.
    pub fn error_reply(&self, code: impl Into<String>, message: impl Into<String>) -> Envelope {
        let mut reply = self.reply(Bytes::new());
        reply.error = Some(RemoteError {
            code: code.into(),
            message: message.into(),
        });
        reply
    }

    /// Encodes the envelope into bytes for the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Decodes an envelope from wire bytes.
    pub fn from_bytes(buf: &[u8]) -> Result<Self, prost::DecodeError> {
        Self::decode(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_reply() {
        let req = Envelope::new("ping")
            .with_request_ids("req-1", "req-g")
            .with_payload(&b"abc"[..])
            .with_timeout(Duration::from_secs(5));
        let back = Envelope::from_bytes(&req.to_bytes()).unwrap();
        assert_eq!(back, req);
        assert!(!back.is_expired());
        assert!(back.remaining().unwrap() <= Duration::from_secs(5));

        let err = back.error_reply("NotFound", "no such thing");
        assert_eq!(err.request_id, "req-1");
        assert_eq!(err.error.unwrap().code, "NotFound");
    }

    #[test]
    fn expiry() {
        let mut e = Envelope::new("x");
        assert!(!e.is_expired());
        assert_eq!(e.remaining(), None);
        e.deadline_unix_ms = 1;
        assert!(e.is_expired());
        e.set_deadline_in(Duration::from_secs(60));
        assert_eq!(e.deadline_unix_ms, 1, "an earlier deadline is kept");
    }
}
