//! Service credentials: how a service that is not the identity service
//! (a cell conductor, a compute agent, api-super's scheduler) gets a token
//! for placement and keeps it fresh.
//!
//! The service logs in with a password (Keystone v3 password method,
//! project scope), holds the token in a [`SharedToken`] that its HTTP
//! clients read on every request, and logs in again at half the token's
//! lifetime (10 s after a failure). The password never appears in a log
//! line or in `Debug` output.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::token::{http_request, RefreshError, SharedToken};

/// A service user's credentials (the `[placement]` sections of the
/// conductor and compute configuration files, api-super's service user).
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceCredentials {
    /// The identity service, e.g. `http://127.0.0.1:5000` (with or without `/v3`).
    pub auth_url: String,
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// Project the token is scoped to.
    pub project_name: String,
    /// Domain of the user (by name).
    pub user_domain_name: String,
    /// Domain of the project (by name).
    pub project_domain_name: String,
    /// Send the password over plain `http://` to another machine (default
    /// `false`: a login to an `auth_url` that is plain http and not this
    /// machine's loopback is refused before anything is sent, since
    /// whoever is on the path would read the password).
    pub allow_plain_http: bool,
}

impl std::fmt::Debug for ServiceCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceCredentials")
            .field("auth_url", &self.auth_url)
            .field("username", &self.username)
            .field("password", &"***")
            .field("project_name", &self.project_name)
            .finish()
    }
}

impl ServiceCredentials {
    /// Whether a user name is configured (else: a fixed token, or none).
    pub fn is_set(&self) -> bool {
        !self.username.is_empty()
    }

    /// Refuses an `auth_url` the password must not be sent to (see
    /// `allow_plain_http`); binaries call it at start, and every login
    /// does too.
    pub fn check(&self) -> Result<(), crate::http::PlainHttpRefused> {
        crate::http::refuse_plain_http_off_loopback(
            "auth_url",
            &self.auth_url,
            self.allow_plain_http,
        )
    }

    fn domain(name: &str) -> &str {
        if name.is_empty() {
            "Default"
        } else {
            name
        }
    }
}

/// Why a login failed.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The identity service could not be reached or answered nonsense.
    #[error(transparent)]
    Transport(#[from] RefreshError),
    /// The identity service refused the credentials.
    #[error("the identity service refused the service login (HTTP {0})")]
    Refused(u16),
    /// `auth_url` is plain http to another machine (and that is not
    /// allowed): nothing was sent.
    #[error("the service login was not sent")]
    PlainHttp(#[from] crate::http::PlainHttpRefused),
}

/// Logs in once; the token and how long it lives.
pub async fn password_token(c: &ServiceCredentials) -> Result<(String, Duration), LoginError> {
    c.check()?;
    let base = c.auth_url.trim_end_matches('/').trim_end_matches("/v3");
    let body = serde_json::json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": c.username,
            "domain": {"name": ServiceCredentials::domain(&c.user_domain_name)},
            "password": c.password}}},
        "scope": {"project": {"name": c.project_name,
            "domain": {"name": ServiceCredentials::domain(&c.project_domain_name)}}}
    }});
    let body = serde_json::to_vec(&body).map_err(|e| RefreshError::Protocol(e.to_string()))?;
    let a = http_request("POST", &format!("{base}/v3/auth/tokens"), Some(&body)).await?;
    if a.status != 201 {
        return Err(LoginError::Refused(a.status));
    }
    let token = a
        .header("x-subject-token")
        .ok_or_else(|| RefreshError::Protocol("no X-Subject-Token".into()))?
        .to_owned();
    #[derive(Deserialize)]
    struct Doc {
        token: Tok,
    }
    #[derive(Deserialize)]
    struct Tok {
        expires_at: String,
    }
    let doc: Doc =
        serde_json::from_slice(&a.body).map_err(|e| RefreshError::Protocol(e.to_string()))?;
    let lifetime = parse_lifetime(&doc.token.expires_at).unwrap_or(Duration::from_secs(600));
    Ok((token, lifetime))
}

/// Unix milliseconds of an RFC 3339 UTC instant
/// (`2026-11-29T21:00:00.000000Z`, or with `+00:00`); `None` if malformed.
pub(crate) fn rfc3339_ms(at: &str) -> Option<i64> {
    let s = at.trim_end_matches('Z').trim_end_matches("+00:00");
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec = t.next()?.parse::<f64>().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || sec >= 61.0 {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), after H. Hinnant.
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60) * 1000 + (sec * 1000.0) as i64)
}

/// How long from now until an RFC 3339 UTC instant (zero if past).
fn parse_lifetime(expires_at: &str) -> Option<Duration> {
    let at = rfc3339_ms(expires_at)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis() as i64;
    Some(Duration::from_millis((at - now).max(0) as u64))
}

/// A token kept fresh in the background; stops renewing when dropped.
pub struct KeptToken {
    /// The current token.
    pub token: SharedToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KeptToken {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Logs in (failing at once if that is refused) and renews the token at
/// half its lifetime, retrying every 10 s after a failure.
pub async fn keep_token(c: ServiceCredentials) -> Result<KeptToken, LoginError> {
    let (token, lifetime) = password_token(&c).await?;
    let shared = SharedToken::fixed(token);
    let st = shared.clone();
    let task = tokio::spawn(async move {
        let mut wait = lifetime / 2;
        loop {
            tokio::time::sleep(wait.max(Duration::from_secs(5))).await;
            match password_token(&c).await {
                Ok((t, l)) => {
                    st.set(t);
                    wait = l / 2;
                }
                Err(e) => {
                    tracing::warn!(error = %e, user = %c.username, "service token renewal failed; retrying in 10 s");
                    wait = Duration::from_secs(10);
                }
            }
        }
    });
    Ok(KeptToken {
        token: shared,
        task,
    })
}

/// The token a service sends to placement: one logged in with `auth` and
/// kept fresh when a user name is set (keep the [`KeptToken`] alive), else
/// the `fixed` one.
pub async fn service_token(
    fixed: &str,
    auth: &ServiceCredentials,
) -> Result<(SharedToken, Option<KeptToken>), LoginError> {
    if auth.is_set() {
        let kept = keep_token(auth.clone()).await?;
        Ok((kept.token.clone(), Some(kept)))
    } else {
        Ok((SharedToken::fixed(fixed), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_parse_and_passwords_stay_hidden() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        // 2030-01-01T00:00:00Z is day 21915 since the epoch.
        let at = 21_915 * 86_400 + 30;
        let got = parse_lifetime("2030-01-01T00:00:30.000000Z").unwrap();
        let want = (at - now) as f64;
        assert!(want > 0.0);
        assert!((got.as_secs_f64() - want).abs() < 2.0, "{got:?} vs {want}");
        assert!(parse_lifetime("not a date").is_none());
        let c = ServiceCredentials {
            username: "svc".into(),
            password: "hunter2".into(),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn a_password_is_never_sent_over_plain_http_to_another_machine() {
        let c = |url: &str, allow| ServiceCredentials {
            auth_url: url.into(),
            username: "svc".into(),
            password: "hunter2".into(),
            allow_plain_http: allow,
            ..Default::default()
        };
        // 192.0.2.0/24 is TEST-NET-1: were anything sent, it would hang or fail otherwise.
        let e = password_token(&c("http://192.0.2.1:5000/v3", false))
            .await
            .unwrap_err();
        assert!(matches!(e, LoginError::PlainHttp(_)), "{e:?}");
        let why = std::error::Error::source(&e).unwrap().to_string();
        assert!(
            why.contains("auth_url = http://192.0.2.1:5000/v3") && why.contains("allow_plain_http"),
            "{why}"
        );
        assert!(c("http://192.0.2.1:5000", false).check().is_err());
        assert!(c("http://192.0.2.1:5000", true).check().is_ok());
        assert!(c("https://192.0.2.1:5000", false).check().is_ok());
        assert!(c("http://127.0.0.1:5000", false).check().is_ok());
        assert!(c("http://localhost:5000/v3", false).check().is_ok());
    }
}
