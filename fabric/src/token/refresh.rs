//! Keeping a [`TokenValidator`] current: the identity service's public keys
//! and revocations, fetched once or polled.

use std::sync::Arc;
use std::time::Duration;

use super::http::{http_get_json_if_changed, Fetched};
use super::{KeysDocument, RefreshError, RevocationsDocument, SharedToken, TokenValidator};

/// The entity tags of the documents a validator last installed
/// ([`super::Tagged`]): sent back on the next poll, which is answered 304
/// with no body while they are current.
#[derive(Debug, Default)]
pub(crate) struct PollTags {
    keys: Option<String>,
    revocations: Option<String>,
}

impl TokenValidator {
    /// Fetches keys and revocations from the identity service once, each
    /// only if it changed since the last fetch (conditional GETs).
    /// `identity_url` is its base (`http://127.0.0.1:5000` or `…/v3`);
    /// `token` (of the `service` role) reads the revocations.
    pub async fn refresh_from(&self, identity_url: &str, token: &str) -> Result<(), RefreshError> {
        let base = identity_url.trim_end_matches('/').trim_end_matches("/v3");
        let tags = |f: fn(&PollTags) -> Option<String>| {
            f(&self.poll_tags.lock().unwrap_or_else(|p| p.into_inner()))
        };
        let keys = http_get_json_if_changed::<KeysDocument>(
            &format!("{base}/v3/auth/keys"),
            &[],
            tags(|t| t.keys.clone()).as_deref(),
        )
        .await?;
        let revs = http_get_json_if_changed::<RevocationsDocument>(
            &format!("{base}/v3/auth/revocations"),
            &[("x-auth-token", token)],
            tags(|t| t.revocations.clone()).as_deref(),
        )
        .await?;
        if let Fetched::Changed(keys, _) = &keys {
            if keys.keys.is_empty() {
                return Err(RefreshError::Protocol("identity published no keys".into()));
            }
        }
        let mut held = self.poll_tags.lock().unwrap_or_else(|p| p.into_inner());
        if let Fetched::Changed(keys, tag) = keys {
            self.set_keys(&keys.keys);
            held.keys = tag;
        }
        if let Fetched::Changed(revs, tag) = revs {
            self.set_revocations(&revs.revocations);
            held.revocations = tag;
        }
        Ok(())
    }

    /// Polls the identity service every `every` and keeps this validator
    /// current. A failed poll keeps the last known state (and is logged once
    /// per failure streak). Abort the handle to stop.
    pub fn spawn_refresh(
        self: &Arc<Self>,
        identity_url: String,
        every: Duration,
        token: SharedToken,
    ) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                match me.refresh_from(&identity_url, &token.get()).await {
                    Ok(()) => {
                        if failing {
                            tracing::info!("token key and revocation refresh recovered");
                        }
                        failing = false;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %e, "token key and revocation refresh failed; keeping the last known state");
                        }
                        failing = true;
                    }
                }
                tokio::time::sleep(every).await;
            }
        })
    }
}
