//! Keeping a [`TokenValidator`] current: the identity service's public keys
//! and revocations, fetched once or polled.

use std::sync::Arc;
use std::time::Duration;

use super::{
    http_get_json, KeysDocument, RefreshError, RevocationsDocument, SharedToken, TokenValidator,
};

impl TokenValidator {
    /// Fetches keys and revocations from the identity service once.
    /// `identity_url` is its base (`http://127.0.0.1:5000` or `…/v3`);
    /// `token` (of the `service` role) reads the revocations.
    pub async fn refresh_from(&self, identity_url: &str, token: &str) -> Result<(), RefreshError> {
        let base = identity_url.trim_end_matches('/').trim_end_matches("/v3");
        let keys: KeysDocument = http_get_json(&format!("{base}/v3/auth/keys"), &[]).await?;
        let revs: RevocationsDocument = http_get_json(
            &format!("{base}/v3/auth/revocations"),
            &[("x-auth-token", token)],
        )
        .await?;
        if keys.keys.is_empty() {
            return Err(RefreshError::Protocol("identity published no keys".into()));
        }
        self.set_keys(&keys.keys);
        self.set_revocations(&revs.revocations);
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
