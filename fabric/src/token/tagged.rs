//! The key and revocation documents every validating service polls (every
//! 2 s by default), served with an entity tag: a poll that sends the tag
//! it holds (`If-None-Match`) is answered `304 Not Modified` with no body
//! while the document is unchanged, so a fleet of pollers downloads a
//! document only when it changes, whatever its (bounded) size. The tag is
//! a digest of the document's bytes, the same in every identity process
//! serving the same state, so pollers behind a load balancer agree.

use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// A document serialized once, with its entity tag.
#[derive(Debug, Clone)]
pub struct Tagged {
    body: Bytes,
    etag: String,
}

impl Default for Tagged {
    fn default() -> Self {
        Self::from_bytes(Bytes::from_static(b"{}"))
    }
}

impl Tagged {
    /// `doc` as JSON, tagged.
    pub fn of<T: Serialize>(doc: &T) -> Self {
        // Serializing plain data (strings, numbers, lists) cannot fail.
        let body = serde_json::to_vec(doc).unwrap_or_default();
        Self::from_bytes(Bytes::from(body))
    }

    fn from_bytes(body: Bytes) -> Self {
        let digest = Sha256::digest(&body);
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Self {
            body,
            etag: format!("\"{hex}\""),
        }
    }

    /// The entity tag, quoted as in an `ETag` header.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The JSON body.
    pub fn body(&self) -> Bytes {
        self.body.clone()
    }

    /// Whether a request's `If-None-Match` names this version (a list of
    /// tags, weak ones compared weakly, or `*`): answer 304 then.
    pub fn unchanged_for(&self, if_none_match: Option<&str>) -> bool {
        if_none_match.is_some_and(|v| {
            v.split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.trim_start_matches("W/") == self.etag)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_content_and_match_if_none_match() {
        let a = Tagged::of(&serde_json::json!({"revocations": []}));
        let same = Tagged::of(&serde_json::json!({"revocations": []}));
        let b = Tagged::of(&serde_json::json!({"revocations": [{"user_id": "u"}]}));
        assert_eq!(a.etag(), same.etag());
        assert_ne!(a.etag(), b.etag());
        assert!(a.etag().starts_with('"') && a.etag().ends_with('"') && a.etag().len() == 34);
        assert!(a.unchanged_for(Some(a.etag())));
        assert!(a.unchanged_for(Some(&format!("\"x\", W/{}", a.etag()))));
        assert!(a.unchanged_for(Some("*")));
        assert!(!a.unchanged_for(Some(b.etag())));
        assert!(!a.unchanged_for(None));
        assert_eq!(&a.body()[..], br#"{"revocations":[]}"#);
    }
}
