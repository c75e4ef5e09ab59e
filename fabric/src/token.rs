//! Signed tokens: the format, the signer and the validator every API uses.
//!
//! A token is `e1.<kid>.<payload>.<signature>`: `payload` is the base64url
//! (no padding) JSON of [`Claims`], `signature` the base64url Ed25519
//! signature over `e1.<kid>.<payload>`, made with the identity service's
//! signing key `kid`. Anyone holding the public keys can check a token with
//! no database and no network round trip; only the identity service holds
//! private keys.
//!
//! [`TokenValidator`] holds a key ring (every public key still in use, by key
//! id, so keys rotate without invalidating tokens signed with the previous
//! key) and a revocation set (audit ids and per-user "issued before" marks,
//! each kept until the tokens it covers would have expired anyway). A
//! service outside the identity process keeps both current with
//! [`TokenValidator::spawn_refresh`], which polls the identity service's
//! `GET /v3/auth/keys` and `GET /v3/auth/revocations` (every 2 s by
//! default): a revocation reaches every process within one poll interval.
//!
//! [`Authenticator`] is the trait an API's request frame calls; the local
//! validator implements it, and so does [`ExternalKeystone`], which asks a
//! Keystone over HTTP for each token and caches the answers.
//!
//! Nothing here logs a token: errors say why a token was refused, never what
//! it was.
//!
//! May depend on: ed25519-dalek, base64, serde, tokio. No sqlx, no axum.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

mod http;
mod refresh;
mod revoked;
mod tagged;
pub(crate) use http::{http_request, http_request_with};
use revoked::Revoked;
pub use tagged::Tagged;

/// Version prefix of our tokens (Keystone's Fernet tokens start with `gAAAA`).
pub const PREFIX: &str = "e1";
/// Longest token accepted; anything longer is malformed.
pub const MAX_TOKEN_LEN: usize = 8192;
/// Default poll interval of [`TokenValidator::spawn_refresh`].
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(2);

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A name with its id (domains, projects, roles).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    /// Id.
    #[serde(rename = "i")]
    pub id: String,
    /// Name.
    #[serde(rename = "n")]
    pub name: String,
}

/// The project a token is scoped to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectScope {
    /// The project.
    #[serde(rename = "p")]
    pub project: Named,
    /// Its domain.
    #[serde(rename = "d")]
    pub domain: Named,
}

/// What a token says. Field names on the wire are short: the payload is
/// carried in every request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user.
    #[serde(rename = "u")]
    pub user: Named,
    /// The user's domain.
    #[serde(rename = "ud")]
    pub user_domain: Named,
    /// The project scope; `None` for an unscoped token.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectScope>,
    /// Effective roles on the project (implied roles expanded: an admin also
    /// holds member and reader). Empty when unscoped.
    #[serde(rename = "r", default)]
    pub roles: Vec<Named>,
    /// Authentication methods (`password`, `token`).
    #[serde(rename = "m")]
    pub methods: Vec<String>,
    /// Issued at, Unix milliseconds.
    #[serde(rename = "ia")]
    pub issued_at_ms: i64,
    /// Expires at, Unix milliseconds.
    #[serde(rename = "ea")]
    pub expires_at_ms: i64,
    /// This token's audit id (what revocation names).
    #[serde(rename = "a")]
    pub audit_id: String,
    /// The audit id of the token this one was re-scoped from, if any.
    #[serde(rename = "pa", default, skip_serializing_if = "Option::is_none")]
    pub parent_audit_id: Option<String>,
}

impl Claims {
    /// Whether the token carries the role `name`.
    pub fn has_role(&self, name: &str) -> bool {
        self.roles.iter().any(|r| r.name == name)
    }

    /// The project id, if project-scoped.
    pub fn project_id(&self) -> Option<&str> {
        self.project.as_ref().map(|p| p.project.id.as_str())
    }

    /// Keystone's `audit_ids`: this token's, then its parent's.
    pub fn audit_ids(&self) -> Vec<String> {
        std::iter::once(self.audit_id.clone())
            .chain(self.parent_audit_id.clone())
            .collect()
    }
}

/// Why a token was refused. Every variant is a 401 to the client; the
/// variant is for logs (it never contains the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token of ours at all (wrong shape, bad base64, bad JSON).
    #[error("malformed token")]
    Malformed,
    /// Signed with a key we do not know (forged, or a key retired long ago).
    #[error("token signed with unknown key {0:?}")]
    UnknownKey(String),
    /// The signature does not verify (forged or tampered).
    #[error("token signature does not verify")]
    BadSignature,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
    /// Revoked (by audit id, or all the user's tokens issued before a time).
    #[error("token revoked")]
    Revoked,
    /// Not scoped to a project, where a service API needs one.
    #[error("token not scoped to a project")]
    Unscoped,
    /// The validator cannot decide (e.g. the external Keystone is not reachable).
    #[error("token validation unavailable: {0}")]
    Unavailable(String),
}

/// One revocation: every token with `audit_id`, or every token of `user_id`
/// issued at or before `issued_before_ms`. Kept until `expires_at_ms`, after
/// which every token it covers has expired anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// Audit id of the revoked token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<String>,
    /// User whose tokens are revoked (with `project_id`: only those scoped
    /// to that project, as when a grant is removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Project whose tokens are revoked (without `user_id`: everybody's, as
    /// when the project is deleted or disabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Tokens issued at or before this (Unix ms) are revoked.
    pub issued_before_ms: i64,
    /// When the event may be forgotten (Unix ms).
    pub expires_at_ms: i64,
}

/// A public key as published by `GET /v3/auth/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicKey {
    /// Key id.
    pub kid: String,
    /// Always `EdDSA`.
    pub alg: String,
    /// The 32-byte Ed25519 public key, base64url without padding.
    pub public_key: String,
}

impl PublicKey {
    fn decode(&self) -> Option<VerifyingKey> {
        if self.alg != "EdDSA" {
            return None;
        }
        let bytes: [u8; 32] = B64.decode(&self.public_key).ok()?.try_into().ok()?;
        VerifyingKey::from_bytes(&bytes).ok()
    }
}

/// `GET /v3/auth/keys` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeysDocument {
    /// Every key a valid token may be signed with.
    pub keys: Vec<PublicKey>,
}

/// `GET /v3/auth/revocations` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RevocationsDocument {
    /// Every revocation not yet expired.
    pub revocations: Vec<Revocation>,
}

/// A private signing key with its id (held by the identity service only).
pub struct TokenSigner {
    kid: String,
    key: SigningKey,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl TokenSigner {
    /// A signer from a 32-byte secret seed. The key id must not contain `.`.
    pub fn from_seed(kid: impl Into<String>, seed: &[u8; 32]) -> Self {
        let kid = kid.into();
        assert!(!kid.contains('.'), "key ids must not contain '.'");
        Self {
            kid,
            key: SigningKey::from_bytes(seed),
        }
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public half, as published.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            kid: self.kid.clone(),
            alg: "EdDSA".to_owned(),
            public_key: B64.encode(self.key.verifying_key().as_bytes()),
        }
    }

    /// Encodes and signs `claims`.
    pub fn sign(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        let mut token = format!("{PREFIX}.{}.{}", self.kid, B64.encode(payload));
        let sig = self.key.sign(token.as_bytes());
        token.push('.');
        token.push_str(&B64.encode(sig.to_bytes()));
        token
    }
}

/// Validates tokens with public keys and a revocation set; cheap to share
/// (`Arc`), safe to call from any thread.
#[derive(Default)]
pub struct TokenValidator {
    keys: RwLock<HashMap<String, VerifyingKey>>,
    revoked: RwLock<Revoked>,
    /// Tokens whose signature was checked, with their claims: a token is
    /// presented many times (every request of a client, every call of a
    /// service), and its Ed25519 check and JSON decoding were about 5 % of
    /// the region's CPU time under boots. Keyed by the whole token, so a hit
    /// is exactly the bytes that were verified; expiry and revocation are
    /// still checked on every use; emptied when the key ring changes and
    /// when it holds [`VERIFIED_CACHE_MAX`] tokens.
    verified: RwLock<HashMap<Box<str>, Claims>>,
    /// The tags of the documents last polled ([`refresh`]).
    poll_tags: std::sync::Mutex<refresh::PollTags>,
}

/// Largest number of verified tokens a [`TokenValidator`] remembers.
pub const VERIFIED_CACHE_MAX: usize = 4096;

impl std::fmt::Debug for TokenValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = self
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        f.debug_struct("TokenValidator")
            .field("kids", &keys)
            .finish_non_exhaustive()
    }
}

impl TokenValidator {
    /// An empty validator (refuses every token until keys are set).
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the key ring. Keys that do not decode are skipped (logged).
    pub fn set_keys(&self, keys: &[PublicKey]) {
        let mut ring = HashMap::with_capacity(keys.len());
        for k in keys {
            match k.decode() {
                Some(v) => {
                    ring.insert(k.kid.clone(), v);
                }
                None => tracing::warn!(kid = %k.kid, "ignoring undecodable public key"),
            }
        }
        let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
        if *keys != ring {
            // A key gone must take its tokens with it.
            self.verified
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            *keys = ring;
        }
    }

    /// The key ids in the ring.
    pub fn key_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// Replaces the revocation set (expired events are dropped).
    pub fn set_revocations(&self, events: &[Revocation]) {
        let now = now_ms();
        let mut fresh = Revoked::default();
        for e in events.iter().filter(|e| e.expires_at_ms > now) {
            fresh.add(e);
        }
        *self.revoked.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    }

    /// Adds one revocation (the identity service applies its own at once).
    pub fn revoke(&self, event: &Revocation) {
        self.revoked
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .add(event);
    }

    /// Decodes a token without checking its signature, expiry or
    /// revocation: only for tests and tools, never for authorization.
    pub fn decode_unverified(token: &str) -> Result<(String, Claims), TokenError> {
        let (kid, payload, _, _) = split(token)?;
        let bytes = B64.decode(payload).map_err(|_| TokenError::Malformed)?;
        let claims = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
        Ok((kid.to_owned(), claims))
    }

    /// Validates `token` at the current time.
    pub fn validate(&self, token: &str) -> Result<Claims, TokenError> {
        self.validate_at(token, now_ms())
    }

    /// Validates `token` as of `now_ms`.
    pub fn validate_at(&self, token: &str, now_ms: i64) -> Result<Claims, TokenError> {
        let cached = self
            .verified
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned();
        let claims = match cached {
            Some(c) => c,
            None => {
                let c = self.verify(token)?;
                let mut v = self.verified.write().unwrap_or_else(|p| p.into_inner());
                if v.len() >= VERIFIED_CACHE_MAX {
                    v.clear();
                }
                v.insert(token.into(), c.clone());
                c
            }
        };
        if now_ms >= claims.expires_at_ms {
            return Err(TokenError::Expired);
        }
        if self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .covers(&claims)
        {
            return Err(TokenError::Revoked);
        }
        Ok(claims)
    }

    /// The claims of `token` once its key is known and its signature holds
    /// (expiry and revocation are the caller's).
    fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let (kid, payload, signed, sig) = split(token)?;
        let sig: [u8; 64] = B64
            .decode(sig)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or(TokenError::Malformed)?;
        let sig = Signature::from_bytes(&sig);
        {
            let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
            let key = keys
                .get(kid)
                .ok_or_else(|| TokenError::UnknownKey(kid.chars().take(32).collect()))?;
            key.verify(signed.as_bytes(), &sig)
                .map_err(|_| TokenError::BadSignature)?;
        }
        let bytes = B64.decode(payload).map_err(|_| TokenError::Malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
    }
}

fn split(token: &str) -> Result<(&str, &str, &str, &str), TokenError> {
    if token.len() > MAX_TOKEN_LEN || !token.is_ascii() {
        return Err(TokenError::Malformed);
    }
    let (signed, sig) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
    let mut parts = signed.split('.');
    let (Some(PREFIX), Some(kid), Some(payload), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    if kid.is_empty() || payload.is_empty() || sig.is_empty() {
        return Err(TokenError::Malformed);
    }
    Ok((kid, payload, signed, sig))
}

/// Boxed future returned by [`Authenticator::authenticate`].
pub type AuthFuture<'a> = Pin<Box<dyn Future<Output = Result<Claims, TokenError>> + Send + 'a>>;

/// What a service API's request frame calls to turn an `X-Auth-Token`
/// into claims. Service APIs (compute, placement, image) need a
/// project-scoped token, as keystonemiddleware does: an unscoped one is
/// refused with [`TokenError::Unscoped`] (a 401).
pub trait Authenticator: Send + Sync {
    /// Validates `token` and requires a project scope.
    fn authenticate<'a>(&'a self, token: &'a str) -> AuthFuture<'a>;
}

impl TokenValidator {
    /// [`TokenValidator::validate`], refusing unscoped tokens.
    pub fn validate_scoped(&self, token: &str) -> Result<Claims, TokenError> {
        let c = self.validate(token)?;
        if c.project.is_none() {
            return Err(TokenError::Unscoped);
        }
        Ok(c)
    }
}

impl Authenticator for TokenValidator {
    fn authenticate<'a>(&'a self, token: &'a str) -> AuthFuture<'a> {
        Box::pin(std::future::ready(self.validate_scoped(token)))
    }
}

/// Validation against a Keystone reached over HTTP — an external Keystone,
/// or the region's identity service used the same way: each token is
/// checked with `GET /v3/auth/tokens` (`X-Subject-Token`), authenticated
/// with a service token, and the answer is cached for `cache_ttl` (as
/// keystonemiddleware does: a revocation takes effect within the TTL).
/// A 404 from Keystone is an invalid token (401 to the caller); an
/// unreachable Keystone or a refused service token is `Unavailable`.
pub struct ExternalKeystone {
    url: String,
    cache_ttl: Duration,
    service: SharedToken,
    cache: RwLock<HashMap<String, (Claims, std::time::Instant)>>,
}

impl std::fmt::Debug for ExternalKeystone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalKeystone")
            .field("url", &self.url)
            .field("cache_ttl", &self.cache_ttl)
            .finish()
    }
}

/// Largest number of cached validations; expired ones are dropped first.
const EXTERNAL_CACHE_MAX: usize = 100_000;

impl ExternalKeystone {
    /// A validator for the Keystone at `url` (with or without `/v3`),
    /// authenticating its checks with `service`.
    pub fn new(url: impl Into<String>, cache_ttl: Duration, service: SharedToken) -> Self {
        let url = url.into();
        let url = url.trim_end_matches('/').trim_end_matches("/v3").to_owned();
        Self {
            url,
            cache_ttl,
            service,
            cache: RwLock::new(HashMap::new()),
        }
    }

    fn cached(&self, token: &str) -> Option<Claims> {
        let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
        let (claims, at) = cache.get(token)?;
        (at.elapsed() < self.cache_ttl && claims.expires_at_ms > now_ms()).then(|| claims.clone())
    }

    fn remember(&self, token: &str, claims: &Claims) {
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= EXTERNAL_CACHE_MAX {
            let ttl = self.cache_ttl;
            cache.retain(|_, (_, at)| at.elapsed() < ttl);
            if cache.len() >= EXTERNAL_CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(
            token.to_owned(),
            (claims.clone(), std::time::Instant::now()),
        );
    }

    async fn check(&self, token: &str) -> Result<Claims, TokenError> {
        if let Some(c) = self.cached(token) {
            return Ok(c);
        }
        let service = self.service.get();
        let a = http_request_with(
            "GET",
            &format!("{}/v3/auth/tokens", self.url),
            &[("x-auth-token", &service), ("x-subject-token", token)],
            None,
        )
        .await
        .map_err(|e| TokenError::Unavailable(e.to_string()))?;
        match a.status {
            200 => {}
            404 => return Err(TokenError::Revoked),
            401 | 403 => {
                return Err(TokenError::Unavailable(format!(
                    "the identity service refused our service token (HTTP {})",
                    a.status
                )))
            }
            s => {
                return Err(TokenError::Unavailable(format!(
                    "identity answered HTTP {s}"
                )))
            }
        }
        let doc: KeystoneTokenDoc =
            serde_json::from_slice(&a.body).map_err(|_| TokenError::Malformed)?;
        let claims = doc.token.into_claims().ok_or(TokenError::Malformed)?;
        if claims.expires_at_ms <= now_ms() {
            return Err(TokenError::Expired);
        }
        self.remember(token, &claims);
        Ok(claims)
    }
}

impl Authenticator for ExternalKeystone {
    fn authenticate<'a>(&'a self, token: &'a str) -> AuthFuture<'a> {
        Box::pin(async move {
            let c = self.check(token).await?;
            if c.project.is_none() {
                return Err(TokenError::Unscoped);
            }
            Ok(c)
        })
    }
}

/// The parts of Keystone's token document that become [`Claims`].
#[derive(Deserialize)]
struct KeystoneTokenDoc {
    token: KeystoneToken,
}

#[derive(Deserialize)]
struct KeystoneRef {
    id: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct KeystoneUser {
    id: String,
    #[serde(default)]
    name: String,
    domain: KeystoneRef,
}

#[derive(Deserialize)]
struct KeystoneProject {
    id: String,
    #[serde(default)]
    name: String,
    domain: KeystoneRef,
}

#[derive(Deserialize)]
struct KeystoneToken {
    user: KeystoneUser,
    #[serde(default)]
    project: Option<KeystoneProject>,
    #[serde(default)]
    roles: Vec<KeystoneRef>,
    #[serde(default)]
    methods: Vec<String>,
    expires_at: String,
    #[serde(default)]
    issued_at: Option<String>,
    #[serde(default)]
    audit_ids: Vec<String>,
}

impl KeystoneToken {
    fn into_claims(self) -> Option<Claims> {
        let named = |r: KeystoneRef| Named {
            id: r.id,
            name: r.name,
        };
        Some(Claims {
            user: Named {
                id: self.user.id,
                name: self.user.name,
            },
            user_domain: named(self.user.domain),
            project: self.project.map(|p| ProjectScope {
                project: Named {
                    id: p.id,
                    name: p.name,
                },
                domain: named(p.domain),
            }),
            roles: self.roles.into_iter().map(named).collect(),
            methods: self.methods,
            issued_at_ms: self
                .issued_at
                .as_deref()
                .and_then(crate::login::rfc3339_ms)
                .unwrap_or(0),
            expires_at_ms: crate::login::rfc3339_ms(&self.expires_at)?,
            audit_id: self.audit_ids.first().cloned().unwrap_or_default(),
            parent_audit_id: self.audit_ids.get(1).cloned(),
        })
    }
}

/// Why a refresh failed.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// Connecting, sending or reading failed.
    #[error("cannot reach the identity service")]
    Io(#[source] std::io::Error),
    /// The HTTP request failed (connect, TLS, timeout, reading).
    #[error("cannot reach the identity service")]
    Http(#[source] reqwest::Error),
    /// The HTTP client could not be built (its TLS settings).
    #[error("the identity client")]
    Client(#[source] crate::http::ClientError),
    /// An answer we do not understand.
    #[error("unexpected answer from the identity service: {0}")]
    Protocol(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn claims(exp_in_ms: i64) -> Claims {
        let now = now_ms();
        Claims {
            user: Named {
                id: "u1".into(),
                name: "alice".into(),
            },
            user_domain: Named {
                id: "default".into(),
                name: "Default".into(),
            },
            project: Some(ProjectScope {
                project: Named {
                    id: "p1".into(),
                    name: "demo".into(),
                },
                domain: Named {
                    id: "default".into(),
                    name: "Default".into(),
                },
            }),
            roles: vec![Named {
                id: "r1".into(),
                name: "member".into(),
            }],
            methods: vec!["password".into()],
            issued_at_ms: now,
            expires_at_ms: now + exp_in_ms,
            audit_id: "audit-1".into(),
            parent_audit_id: None,
        }
    }

    pub(super) fn ring(signers: &[&TokenSigner]) -> TokenValidator {
        let v = TokenValidator::new();
        let keys: Vec<PublicKey> = signers.iter().map(|s| s.public_key()).collect();
        v.set_keys(&keys);
        v
    }

    /// A token verified once is remembered, yet every use still checks
    /// expiry and revocation; a key leaving the ring takes its remembered
    /// tokens with it; a token differing by one byte is never a hit.
    #[test]
    fn verified_tokens_are_remembered_but_still_expire_and_revoke() {
        let s = TokenSigner::from_seed("k1", &[1; 32]);
        let other = TokenSigner::from_seed("k2", &[2; 32]);
        let c = claims(60_000);
        let t = s.sign(&c);
        let v = ring(&[&s, &other]);
        assert_eq!(v.validate(&t).unwrap(), c);
        assert_eq!(v.verified.read().unwrap().len(), 1);
        assert_eq!(v.validate(&t).unwrap(), c, "a hit");
        // Past its expiry, the remembered token is refused.
        assert_eq!(v.validate_at(&t, c.expires_at_ms), Err(TokenError::Expired));
        // One byte of the signature changed: verified anew, refused.
        let mut bad = t.clone();
        let last = bad.pop().unwrap();
        bad.push(if last == 'A' { 'B' } else { 'A' });
        assert!(v.validate(&bad).is_err());
        // The same key ring set again keeps what was verified.
        v.set_keys(&[s.public_key(), other.public_key()]);
        assert_eq!(v.verified.read().unwrap().len(), 1);
        // Revoked after it was remembered: refused.
        v.revoke(&Revocation {
            audit_id: Some(c.audit_id.clone()),
            user_id: None,
            project_id: None,
            issued_before_ms: now_ms(),
            expires_at_ms: now_ms() + 60_000,
        });
        assert_eq!(v.validate(&t), Err(TokenError::Revoked));
        // Its key retired: the remembered token goes with it.
        let t2 = s.sign(&claims(30_000));
        let v = ring(&[&s]);
        assert!(v.validate(&t2).is_ok());
        v.set_keys(&[other.public_key()]);
        assert_eq!(v.validate(&t2), Err(TokenError::UnknownKey("k1".into())));
    }

    #[test]
    fn round_trip_and_rotation() {
        let old = TokenSigner::from_seed("k1", &[1; 32]);
        let new = TokenSigner::from_seed("k2", &[2; 32]);
        let c = claims(60_000);
        let t_old = old.sign(&c);
        let v = ring(&[&old, &new]);
        assert_eq!(v.validate(&t_old).unwrap(), c);
        assert_eq!(v.validate(&new.sign(&c)).unwrap(), c);
        // Old key retired: its tokens are refused.
        let v = ring(&[&new]);
        assert_eq!(v.validate(&t_old), Err(TokenError::UnknownKey("k1".into())));
    }

    #[test]
    fn forged_tampered_expired_malformed_revoked() {
        let s = TokenSigner::from_seed("k1", &[1; 32]);
        let v = ring(&[&s]);
        // Forged: same kid, another key.
        let forger = TokenSigner::from_seed("k1", &[9; 32]);
        assert_eq!(
            v.validate(&forger.sign(&claims(60_000))),
            Err(TokenError::BadSignature)
        );
        // Tampered payload.
        let t = s.sign(&claims(60_000));
        let parts: Vec<&str> = t.split('.').collect();
        let mut evil = claims(60_000);
        evil.roles[0].name = "admin".into();
        let forged = format!(
            "{}.{}.{}.{}",
            parts[0],
            parts[1],
            B64.encode(serde_json::to_vec(&evil).unwrap()),
            parts[3]
        );
        assert_eq!(v.validate(&forged), Err(TokenError::BadSignature));
        // Expired.
        assert_eq!(v.validate(&s.sign(&claims(-1))), Err(TokenError::Expired));
        // Malformed.
        for bad in [
            "",
            "x",
            "e1.k1.a",
            "e2.k1.a.b",
            "e1.k1.!!.??",
            &"a".repeat(9000),
        ] {
            assert!(matches!(
                v.validate(bad),
                Err(TokenError::Malformed | TokenError::UnknownKey(_))
            ));
        }
        // Revoked by audit id.
        let t = s.sign(&claims(60_000));
        v.revoke(&Revocation {
            audit_id: Some("audit-1".into()),
            user_id: None,
            project_id: None,
            issued_before_ms: now_ms(),
            expires_at_ms: now_ms() + 60_000,
        });
        assert_eq!(v.validate(&t), Err(TokenError::Revoked));
        // Revoked by user.
        let v = ring(&[&s]);
        let mut c = claims(60_000);
        c.audit_id = "audit-2".into();
        let t = s.sign(&c);
        v.set_revocations(&[Revocation {
            audit_id: None,
            user_id: Some("u1".into()),
            project_id: None,
            issued_before_ms: c.issued_at_ms,
            expires_at_ms: now_ms() + 60_000,
        }]);
        assert_eq!(v.validate(&t), Err(TokenError::Revoked));
        v.set_revocations(&[]);
        assert!(v.validate(&t).is_ok());
    }
}

/// A token that a client sends and that something else keeps fresh (a
/// service's own credentials re-authenticated before expiry). Cheap to
/// clone; readers always see the latest value.
#[derive(Clone, Default)]
pub struct SharedToken(Arc<RwLock<String>>);

impl std::fmt::Debug for SharedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token itself.
        f.write_str("SharedToken(..)")
    }
}

impl SharedToken {
    /// A token that never changes (noauth2 development setups, tests).
    pub fn fixed(token: impl Into<String>) -> Self {
        Self(Arc::new(RwLock::new(token.into())))
    }

    /// The current token.
    pub fn get(&self) -> String {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the token.
    pub fn set(&self, token: impl Into<String>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = token.into();
    }
}
