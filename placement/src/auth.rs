//! Authentication strategies and the policy check.
//!
//! `noauth2` is upstream's development and conformance mode: any
//! `X-Auth-Token` is accepted; a token whose user part (before an optional
//! `:project`) is `admin` is an administrator, any other a plain user.
//!
//! `keystone` validates the region's Ed25519-signed tokens locally with
//! `fabric::token::TokenValidator` (public keys and revocations polled from
//! the identity service every two seconds, the revocations with the token
//! of the service user `[keystone_remote.auth]`; no database or identity
//! round trip per request). Unscoped, forged, expired and revoked tokens
//! are 401.
//!
//! `keystone_remote` asks a Keystone over HTTP (`GET /v3/auth/tokens`) for
//! each token, with a service user's token, and caches answers for
//! `keystone_remote.cache_ttl_secs` (`fabric::token::ExternalKeystone`): for
//! deployments whose identity is an external Keystone.
//!
//! Policy: upstream Placement's defaults make every API but the version
//! document an administrator's API (roles `admin`, or `service` for the
//! services' own users); anyone else gets 403. A policy file
//! (`policy_file`) changes that ([`crate::policy`]). Under `noauth2` the
//! caller holds the roles `admin`, `member` and `reader` when its user is
//! `admin`, else `member` and `reader`.

use std::sync::Arc;

use fabric::policy::Policy;
use fabric::token::{Authenticator, Claims, ExternalKeystone, Named, ProjectScope, TokenValidator};

use axum::http::{HeaderMap, StatusCode};

use crate::error::{ErrorCode, PlacementError};

/// How the service authenticates requests.
#[derive(Debug, Clone)]
pub enum AuthStrategy {
    /// Upstream's `noauth2`.
    NoAuth2,
    /// The region's identity tokens, validated locally.
    Keystone(Arc<TokenValidator>),
    /// Any Keystone, asked over HTTP with a cache.
    Remote(Arc<Remote>),
}

/// `keystone_remote`: the validator and the service login it uses.
pub struct Remote {
    validator: ExternalKeystone,
    _login: fabric::login::KeptToken,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.validator.fmt(f)
    }
}

const AUTH_REQUIRED: &str = "The request you have made requires authentication.";

impl AuthStrategy {
    /// Builds the configured strategy: for `keystone`, fetches the identity
    /// service's keys from `identity_url` (retrying for a few seconds) and
    /// keeps them current in the background.
    pub async fn from_config(name: &str, identity_url: &str) -> Result<Self, String> {
        Self::from_config_with(name, identity_url, &Default::default()).await
    }

    /// As [`Self::from_config`], with `keystone_remote`'s settings.
    pub async fn from_config_with(
        name: &str,
        identity_url: &str,
        remote: &crate::config::KeystoneRemoteConfig,
    ) -> Result<Self, String> {
        match name {
            "noauth2" => Ok(Self::NoAuth2),
            "keystone_remote" => {
                let login = service_login(name, identity_url, remote, "").await?;
                let validator = ExternalKeystone::new(
                    identity_url,
                    std::time::Duration::from_secs(remote.cache_ttl_secs),
                    login.token.clone(),
                );
                Ok(Self::Remote(Arc::new(Remote {
                    validator,
                    _login: login,
                })))
            }
            "keystone" => {
                let why =
                    " (the service user whose token reads the identity service's revocation list)";
                let login = service_login(name, identity_url, remote, why).await?;
                let validator = Arc::new(TokenValidator::new());
                let mut last = String::new();
                for _ in 0..20 {
                    match validator
                        .refresh_from(identity_url, &login.token.get())
                        .await
                    {
                        Ok(()) => {
                            let poll = validator.spawn_refresh(
                                identity_url.to_owned(),
                                fabric::token::DEFAULT_REFRESH,
                                login.token.clone(),
                            );
                            // The login is renewed for as long as the poll runs.
                            tokio::spawn(async move {
                                let _login = login;
                                let _ = poll.await;
                            });
                            return Ok(Self::Keystone(validator));
                        }
                        Err(e) => last = e.to_string(),
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                Err(format!(
                    "cannot fetch token keys from the identity service at {identity_url}: {last}"
                ))
            }
            other => Err(format!(
                "unknown auth_strategy {other:?}: expected noauth2, keystone or keystone_remote"
            )),
        }
    }

    /// Authenticates a request from its headers, or says why not (401);
    /// the caller is held to `policy`.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        policy: &Arc<Policy>,
    ) -> Result<Caller, String> {
        let token = headers
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| AUTH_REQUIRED.to_owned())?;
        match self {
            Self::Keystone(v) => {
                let claims = v.validate_scoped(token).map_err(|e| {
                    tracing::warn!(reason = %e, "token refused");
                    AUTH_REQUIRED.to_owned()
                })?;
                Ok(Caller::new(claims, policy))
            }
            Self::Remote(r) => {
                let claims = r.validator.authenticate(token).await.map_err(|e| {
                    tracing::warn!(reason = %e, "token refused");
                    AUTH_REQUIRED.to_owned()
                })?;
                Ok(Caller::new(claims, policy))
            }
            Self::NoAuth2 => {
                let (user, project) = token.split_once(':').unwrap_or((token, token));
                Ok(Caller::new(noauth_claims(user, project), policy))
            }
        }
    }
}

/// Placement's service user logged in (`[keystone_remote.auth]`, its
/// `auth_url` defaulting to `identity_url`), its token kept fresh; the
/// strategy `name` refuses to start without it, saying `why` it needs one.
async fn service_login(
    name: &str,
    identity_url: &str,
    remote: &crate::config::KeystoneRemoteConfig,
    why: &str,
) -> Result<fabric::login::KeptToken, String> {
    if identity_url.is_empty() || !remote.auth.is_set() {
        return Err(format!(
            "auth_strategy {name:?} needs identity_url and keystone_remote.auth.username/password/project_name{why}"
        ));
    }
    let mut creds = remote.auth.clone();
    if creds.auth_url.is_empty() {
        creds.auth_url = identity_url.to_owned();
    }
    fabric::login::keep_token(creds)
        .await
        .map_err(|e| format!("the service login at {identity_url} failed: {e}"))
}

/// The claims `noauth2` gives `user` on `project`.
fn noauth_claims(user: &str, project: &str) -> Claims {
    let named = |s: &str| Named {
        id: s.to_owned(),
        name: s.to_owned(),
    };
    let mut roles = vec![named("member"), named("reader")];
    if user == "admin" {
        roles.insert(0, named("admin"));
    }
    Claims {
        user: named(user),
        user_domain: named("default"),
        project: Some(ProjectScope {
            project: named(project),
            domain: named("default"),
        }),
        roles,
        methods: vec!["token".to_owned()],
        issued_at_ms: 0,
        expires_at_ms: i64::MAX,
        audit_id: String::new(),
        parent_audit_id: None,
    }
}

/// Who is calling, and the policy it is held to.
#[derive(Debug, Clone)]
pub struct Caller {
    /// What its token says.
    pub claims: Claims,
    policy: Arc<Policy>,
}

impl Caller {
    /// A caller with `claims` held to `policy`.
    pub fn new(claims: Claims, policy: &Arc<Policy>) -> Self {
        Self {
            claims,
            policy: policy.clone(),
        }
    }

    /// Enforces `rule` (a policy name such as
    /// `placement:resource_providers:list`); 403 when denied.
    pub fn authorize(&self, rule: &'static str) -> Result<(), PlacementError> {
        if self.policy.enforce(rule, &self.claims, &[], "-") {
            return Ok(());
        }
        Err(PlacementError::client(
            StatusCode::FORBIDDEN,
            ErrorCode::Undefined,
            format!("Policy does not allow {rule} to be performed."),
        ))
    }
}
