//! The identity logic: password authentication, token issue and re-scope,
//! revocation, signing-key rotation. HTTP-free; the store is [`Db`], the
//! validator is shared with the request frame.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use fabric::token::{
    now_ms, Claims, KeysDocument, Named, ProjectScope, PublicKey, Revocation, RevocationsDocument,
    Tagged, TokenSigner, TokenValidator,
};
use rand::RngCore;

use super::config::IdentityConfig;
use super::db::{Db, KeyRow, ProjectRow, RevocationRow, UserRow};
use super::error::{IdentityError, Result};
use super::password;
use super::policy::Policy;
use super::ratelimit::{Limits, RateLimiter};

/// Extra time a retired key stays published beyond the token lifetime, to
/// cover processes that signed with it before they saw the rotation.
const KEY_GRACE_MS: i64 = 60_000;

/// How a user names themself in a password authentication.
#[derive(Debug, Clone)]
pub enum UserRef {
    /// By id.
    Id(String),
    /// By name within a domain (given by id or by name).
    Name {
        /// User name.
        name: String,
        /// Domain.
        domain: DomainRef,
    },
}

/// A domain by id or name.
#[derive(Debug, Clone)]
pub enum DomainRef {
    /// By id.
    Id(String),
    /// By name.
    Name(String),
}

/// What a token is asked to be scoped to.
#[derive(Debug, Clone)]
pub enum ScopeRequest {
    /// No scope given: the user's default project if any, else unscoped.
    Default,
    /// Explicitly unscoped.
    Unscoped,
    /// A project by id.
    ProjectId(String),
    /// A project by name within a domain.
    ProjectName {
        /// Project name.
        name: String,
        /// Domain.
        domain: DomainRef,
    },
}

/// The identity service.
pub struct Identity {
    /// The store.
    pub db: Db,
    /// Validates tokens (public keys + revocations, kept current).
    pub validator: Arc<TokenValidator>,
    /// The rules.
    pub policy: Policy,
    /// The configuration.
    pub cfg: IdentityConfig,
    /// Password guessing limiter.
    pub limiter: RateLimiter,
    /// Password checks under way, bounded (argon2's memory each).
    hashing: tokio::sync::Semaphore,
    /// Password checks done (hash comparisons run), for tests and metrics.
    password_checks: std::sync::atomic::AtomicU64,
    /// Seals the signing keys at rest ([`super::keyseal`]).
    sealer: super::keyseal::Sealer,
    signer: RwLock<Arc<TokenSigner>>,
    dummy_hash: String,
    /// `GET /v3/auth/keys` and `/v3/auth/revocations`, serialized and
    /// tagged once per change ([`Tagged`]).
    published: RwLock<(Tagged, Tagged)>,
    public_url: RwLock<String>,
    endpoints: RwLock<super::config::EndpointsConfig>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").finish_non_exhaustive()
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b
}

/// A new id in Keystone's form (32 hex digits).
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn new_audit_id() -> String {
    B64.encode(random_bytes::<16>())
}

impl Identity {
    /// Opens the store, loads (or creates) signing keys and revocations.
    pub async fn open(cfg: IdentityConfig) -> Result<Self> {
        let sealer = super::keyseal::Sealer::open(&super::keyseal::kek_path(
            &cfg.token.key_file,
            &cfg.database.connection,
        )?)?;
        let db = Db::open(&cfg.database.connection, cfg.database.max_connections).await?;
        let policy =
            Policy::load(&cfg.policy_file).map_err(|e| IdentityError::Config(e.to_string()))?;
        let keys = db.keys().await?;
        // Seeds stored in the clear (before they were sealed) are sealed now.
        for k in &keys {
            let (seed, clear) = sealer.open_seed(&k.kid, &k.private_seed)?;
            if clear {
                db.set_key_seed(&k.kid, &sealer.seal(&k.kid, &seed)?)
                    .await?;
                tracing::info!(kid = %k.kid, "signing key sealed at rest");
            }
        }
        if keys.iter().all(|k| k.retired_at.is_some()) {
            insert_new_key(&db, &sealer).await?;
        }
        let limiter = RateLimiter::new(Limits {
            free_attempts: cfg.rate_limit.free_attempts.max(1),
            user_free_attempts: cfg.rate_limit.user_free_attempts.max(1),
            base_delay: Duration::from_millis(cfg.rate_limit.base_delay_ms),
            max_delay: Duration::from_millis(cfg.rate_limit.max_delay_ms),
        });
        let dummy_hash =
            password::hash_async("not anybody's password".into(), cfg.password_hash).await?;
        let me = Self {
            dummy_hash,
            db,
            validator: Arc::new(TokenValidator::new()),
            policy,
            limiter,
            hashing: tokio::sync::Semaphore::new(match cfg.rate_limit.max_concurrent_hashes {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                n => n as usize,
            }),
            password_checks: Default::default(),
            sealer,
            signer: RwLock::new(Arc::new(TokenSigner::from_seed("none", &[0; 32]))),
            published: RwLock::new(Default::default()),
            public_url: RwLock::new(cfg.public_url.trim_end_matches('/').to_owned()),
            endpoints: RwLock::new(cfg.endpoints.clone()),
            cfg,
        };
        me.reload().await?;
        Ok(me)
    }

    /// The public base URL (no `/v3`).
    pub fn public_url(&self) -> String {
        self.public_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the public base URL (when it is only known after binding).
    pub fn set_public_url(&self, url: String) {
        *self.public_url.write().unwrap_or_else(|p| p.into_inner()) = url;
    }

    /// The other services' endpoints, as the catalog names them.
    pub fn endpoints(&self) -> super::config::EndpointsConfig {
        self.endpoints
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the other services' endpoints (when their ports are only known
    /// after binding, e.g. port 0 in an all-in-one region).
    pub fn set_endpoints(&self, e: super::config::EndpointsConfig) {
        *self.endpoints.write().unwrap_or_else(|p| p.into_inner()) = e;
    }

    fn ttl_ms(&self) -> i64 {
        (self.cfg.token.expiration_secs as i64).saturating_mul(1000)
    }

    /// Re-reads keys and revocations from the store into the signer, the
    /// validator and the published documents.
    pub async fn reload(&self) -> Result<()> {
        let now = now_ms();
        let keys = self.db.keys().await?;
        let keep_after = now - self.ttl_ms() - KEY_GRACE_MS;
        let live: Vec<&KeyRow> = keys
            .iter()
            .filter(|k| k.retired_at.is_none_or(|r| r > keep_after))
            .collect();
        let signing = keys
            .iter()
            .find(|k| k.retired_at.is_none())
            .ok_or_else(|| IdentityError::Internal("no signing key".into()))?;
        let (seed, _) = self.sealer.open_seed(&signing.kid, &signing.private_seed)?;
        let public: Vec<PublicKey> = live
            .iter()
            .map(|k| PublicKey {
                kid: k.kid.clone(),
                alg: "EdDSA".into(),
                public_key: k.public_key.clone(),
            })
            .collect();
        let revs: Vec<Revocation> = self
            .db
            .revocations(now)
            .await?
            .into_iter()
            .map(|r| Revocation {
                audit_id: r.audit_id,
                user_id: r.user_id,
                project_id: r.project_id,
                issued_before_ms: r.issued_before,
                expires_at_ms: r.expires_at,
            })
            .collect();
        self.validator.set_keys(&public);
        self.validator.set_revocations(&revs);
        {
            let mut s = self.signer.write().unwrap_or_else(|p| p.into_inner());
            if s.kid() != signing.kid {
                *s = Arc::new(TokenSigner::from_seed(signing.kid.clone(), &seed));
            }
        }
        let docs = (
            Tagged::of(&KeysDocument { keys: public }),
            Tagged::of(&RevocationsDocument { revocations: revs }),
        );
        *self.published.write().unwrap_or_else(|p| p.into_inner()) = docs;
        Ok(())
    }

    /// Adds a new signing key and retires the others: they stay published
    /// (tokens they signed stay valid) until those tokens have expired.
    pub async fn rotate_keys(&self) -> Result<String> {
        let kid = insert_new_key(&self.db, &self.sealer).await?;
        let now = now_ms();
        self.db.retire_keys_except(&kid, now).await?;
        self.db
            .delete_keys_retired_before(now - self.ttl_ms() - KEY_GRACE_MS)
            .await?;
        self.reload().await?;
        Ok(kid)
    }

    /// The published public keys (`GET /v3/auth/keys`), tagged.
    pub fn keys_document(&self) -> Tagged {
        self.published
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// The published revocations (`GET /v3/auth/revocations`), tagged.
    pub fn revocations_document(&self) -> Tagged {
        self.published
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// Keeps keys and revocations current with the store (other api-super
    /// processes write to it too).
    pub fn spawn_reload(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        let every = Duration::from_millis(me.cfg.token.refresh_interval_ms.max(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = me.reload().await {
                    tracing::warn!(error = %e, "identity key/revocation reload failed");
                }
            }
        })
    }

    async fn resolve_domain(&self, d: &DomainRef) -> Result<Option<super::db::DomainRow>> {
        match d {
            DomainRef::Id(id) => self.db.domain(id).await,
            DomainRef::Name(n) => self.db.domain_by_name(n).await,
        }
    }

    /// Checks a password. The attempt is counted before the check, per
    /// user (by id, however it was named) and source and per user, so
    /// that guesses sent at once cannot all reach argon2; the checks
    /// under way are bounded (a 503 with `Retry-After` when none frees up
    /// in `hash_wait_ms`); an unknown user costs a check of a dummy hash,
    /// as long as a wrong password. Every failure is the same 401 to the
    /// client.
    pub async fn check_password(
        &self,
        user: &UserRef,
        password: String,
        source: IpAddr,
    ) -> Result<UserRow> {
        let (row, domain_id) = match user {
            UserRef::Id(id) => (self.db.user(id).await?, None),
            UserRef::Name { name, domain } => match self.resolve_domain(domain).await? {
                Some(d) if d.enabled => (self.db.user_by_name(&d.id, name).await?, Some(d.id)),
                _ => (None, None),
            },
        };
        // One key per user whatever form named it; an unknown name by
        // its domain's id when there is one.
        let limit_key = match (&row, user) {
            (Some(u), _) => format!("user:{}", u.id),
            (None, UserRef::Id(id)) => format!("user:{id}"),
            (None, UserRef::Name { name, domain }) => match (domain_id, domain) {
                (Some(d), _) => format!("name:{d}/{name}"),
                (None, DomainRef::Id(d)) => format!("name:{d}/{name}"),
                (None, DomainRef::Name(d)) => format!("dname:{d}/{name}"),
            },
        };
        let attempt = self.limiter.begin(&limit_key, source).map_err(|wait| {
            tracing::warn!(target: "audit", %source, "password authentication rate-limited");
            IdentityError::TooManyAttempts {
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
            }
        })?;
        let wait = Duration::from_millis(self.cfg.rate_limit.hash_wait_ms);
        let permit = match tokio::time::timeout(wait, self.hashing.acquire()).await {
            Ok(Ok(p)) => p,
            _ => {
                attempt.abandon();
                tracing::warn!(%source, "every password check busy; login refused for now");
                return Err(IdentityError::Busy {
                    retry_after_secs: wait.as_secs().max(1),
                });
            }
        };
        self.password_checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let hash = row.as_ref().and_then(|u| u.password_hash.clone());
        let ok = password::verify_async(password, hash, &self.dummy_hash).await;
        drop(permit);
        match row {
            Some(u) if ok && u.enabled => {
                attempt.succeeded();
                Ok(u)
            }
            Some(u) if ok => {
                attempt.abandon();
                Err(IdentityError::unauthorized(format!(
                    "user {} is disabled",
                    u.id
                )))
            }
            _ => {
                attempt.failed();
                Err(IdentityError::unauthorized(
                    "invalid user name or password".to_owned(),
                ))
            }
        }
    }

    /// How many password checks (hash comparisons) have run.
    pub fn password_checks(&self) -> u64 {
        self.password_checks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The roles `user_id` holds on `project_id`, implied roles expanded.
    pub async fn effective_roles(&self, user_id: &str, project_id: &str) -> Result<Vec<Named>> {
        let direct = self
            .db
            .assignments(&super::db::AssignmentFilter {
                user_id: Some(user_id.to_owned()),
                project_id: Some(project_id.to_owned()),
                role_id: None,
            })
            .await?;
        if direct.is_empty() {
            return Ok(Vec::new());
        }
        let implied = self.db.implied_roles().await?;
        let ids = expand_roles(direct.into_iter().map(|a| a.role_id), &implied);
        let all = self.db.roles(None).await?;
        Ok(all
            .into_iter()
            .filter(|r| ids.contains(&r.id))
            .map(|r| Named {
                id: r.id,
                name: r.name,
            })
            .collect())
    }

    async fn resolve_project(
        &self,
        scope: &ScopeRequest,
        user: &UserRow,
    ) -> Result<Option<ProjectRow>> {
        let p = match scope {
            ScopeRequest::Unscoped => return Ok(None),
            ScopeRequest::Default => match &user.default_project_id {
                None => return Ok(None),
                Some(id) => {
                    let p = self.db.project(id).await?;
                    // Keystone falls back to unscoped when the default
                    // project is unusable.
                    match p {
                        Some(p)
                            if p.enabled
                                && !self.effective_roles(&user.id, &p.id).await?.is_empty() =>
                        {
                            return Ok(Some(p))
                        }
                        _ => return Ok(None),
                    }
                }
            },
            ScopeRequest::ProjectId(id) => self.db.project(id).await?,
            ScopeRequest::ProjectName { name, domain } => {
                match self.resolve_domain(domain).await? {
                    Some(d) => self.db.project_by_name(&d.id, name).await?,
                    None => None,
                }
            }
        };
        match p {
            Some(p) if p.enabled => Ok(Some(p)),
            Some(p) => Err(IdentityError::unauthorized(format!(
                "project {} is disabled",
                p.id
            ))),
            None => Err(IdentityError::unauthorized(
                "scope names no project".to_owned(),
            )),
        }
    }

    /// Issues a token for `user` with `scope`. `parent` is the token a
    /// re-scope starts from (its expiry and audit chain carry over).
    pub async fn issue(
        &self,
        user: &UserRow,
        scope: &ScopeRequest,
        methods: Vec<String>,
        parent: Option<&Claims>,
    ) -> Result<(String, Claims)> {
        let user_domain = self
            .db
            .domain(&user.domain_id)
            .await?
            .ok_or_else(|| IdentityError::unauthorized("user's domain is gone"))?;
        if !user_domain.enabled {
            return Err(IdentityError::unauthorized("user's domain is disabled"));
        }
        let project = self.resolve_project(scope, user).await?;
        let (project, roles) = match project {
            None => (None, Vec::new()),
            Some(p) => {
                let roles = self.effective_roles(&user.id, &p.id).await?;
                if roles.is_empty() {
                    return Err(IdentityError::unauthorized(format!(
                        "user {} has no role on project {}",
                        user.id, p.id
                    )));
                }
                let domain = self
                    .db
                    .domain(&p.domain_id)
                    .await?
                    .ok_or_else(|| IdentityError::unauthorized("project's domain is gone"))?;
                (
                    Some(ProjectScope {
                        project: Named {
                            id: p.id,
                            name: p.name,
                        },
                        domain: Named {
                            id: domain.id,
                            name: domain.name,
                        },
                    }),
                    roles,
                )
            }
        };
        let now = now_ms();
        let expires = match parent {
            Some(p) => p.expires_at_ms,
            None => now + self.ttl_ms(),
        };
        let claims = Claims {
            user: Named {
                id: user.id.clone(),
                name: user.name.clone(),
            },
            user_domain: Named {
                id: user_domain.id,
                name: user_domain.name,
            },
            project,
            roles,
            methods,
            issued_at_ms: now,
            expires_at_ms: expires,
            audit_id: new_audit_id(),
            parent_audit_id: parent.map(|p| {
                p.parent_audit_id
                    .clone()
                    .unwrap_or_else(|| p.audit_id.clone())
            }),
        };
        let signer = self
            .signer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok((signer.sign(&claims), claims))
    }

    /// Validates a token presented for re-scoping and loads its user.
    pub async fn user_of_token(&self, token: &str) -> Result<(Claims, UserRow)> {
        let claims = self
            .validator
            .validate(token)
            .map_err(|e| IdentityError::unauthorized(e.to_string()))?;
        let user = self
            .db
            .user(&claims.user.id)
            .await?
            .filter(|u| u.enabled)
            .ok_or_else(|| IdentityError::unauthorized("token's user is gone or disabled"))?;
        Ok((claims, user))
    }

    /// Runs the bootstrap ([`super::bootstrap::bootstrap`]) with this
    /// service's password cost.
    pub async fn bootstrap(
        &self,
        spec: &super::bootstrap::BootstrapSpec,
    ) -> Result<super::bootstrap::Bootstrapped> {
        super::bootstrap::bootstrap(&self.db, spec, self.cfg.password_hash).await
    }

    /// Hashes a password at this service's cost.
    pub async fn hash_password(&self, password: String) -> Result<String> {
        password::hash_async(password, self.cfg.password_hash).await
    }

    /// Revokes one token (by its audit id) everywhere. A user who has
    /// revoked [`super::config::TokenConfig::max_token_revocations_per_user`]
    /// of their tokens still in force has all their tokens revoked instead
    /// (one mark replaces the single ones), so the list every validator
    /// downloads stays bounded however often tokens are re-scoped and
    /// revoked.
    pub async fn revoke(&self, claims: &Claims) -> Result<()> {
        let now = now_ms();
        let owner = &claims.user.id;
        let max = i64::from(self.cfg.token.max_token_revocations_per_user.max(1));
        if self.db.token_revocations_of(owner, now).await? >= max {
            tracing::warn!(target: "audit", user = %owner, max,
                "too many single-token revocations: revoking all of the user's tokens");
            self.revoke_all(Some(owner), None).await?;
            self.db.forget_token_revocations_of(owner, now).await?;
            return self.reload().await;
        }
        let row = RevocationRow {
            audit_id: Some(claims.audit_id.clone()),
            owner_id: Some(owner.clone()),
            user_id: None,
            project_id: None,
            issued_before: now,
            expires_at: claims.expires_at_ms + KEY_GRACE_MS,
        };
        self.db.insert_revocation(&row).await?;
        self.validator.revoke(&Revocation {
            audit_id: row.audit_id,
            user_id: None,
            project_id: None,
            issued_before_ms: row.issued_before,
            expires_at_ms: row.expires_at,
        });
        self.reload().await
    }

    /// Revokes every token of `user_id` issued until now (user deleted or
    /// disabled, password changed).
    pub async fn revoke_user(&self, user_id: &str) -> Result<()> {
        self.revoke_all(Some(user_id), None).await?;
        self.reload().await
    }

    /// Revokes `user_id`'s tokens scoped to `project_id` issued until now
    /// (a grant removed: the roles in those tokens no longer hold).
    pub async fn revoke_grant(&self, user_id: &str, project_id: &str) -> Result<()> {
        self.revoke_all(Some(user_id), Some(project_id)).await?;
        self.reload().await
    }

    /// Revokes everybody's tokens scoped to `project_id` issued until now
    /// (project deleted or disabled).
    pub async fn revoke_project(&self, project_id: &str) -> Result<()> {
        self.revoke_all(None, Some(project_id)).await?;
        self.reload().await
    }

    /// Records and applies a mark on the tokens of a user, a project or
    /// both, issued until now.
    async fn revoke_all(&self, user_id: Option<&str>, project_id: Option<&str>) -> Result<()> {
        let now = now_ms();
        let row = RevocationRow {
            audit_id: None,
            owner_id: None,
            user_id: user_id.map(str::to_owned),
            project_id: project_id.map(str::to_owned),
            issued_before: now,
            expires_at: now + self.ttl_ms() + KEY_GRACE_MS,
        };
        self.db.insert_revocation(&row).await?;
        self.validator.revoke(&Revocation {
            audit_id: None,
            user_id: row.user_id,
            project_id: row.project_id,
            issued_before_ms: row.issued_before,
            expires_at_ms: row.expires_at,
        });
        Ok(())
    }
}

/// The closure of `direct` under the implied-role pairs (prior, implied).
pub fn expand_roles(
    direct: impl IntoIterator<Item = String>,
    implied: &[(String, String)],
) -> HashSet<String> {
    let mut graph: HashMap<&str, Vec<&str>> = HashMap::new();
    for (p, i) in implied {
        graph.entry(p.as_str()).or_default().push(i.as_str());
    }
    let mut out: HashSet<String> = HashSet::new();
    let mut stack: Vec<String> = direct.into_iter().collect();
    while let Some(r) = stack.pop() {
        if out.insert(r.clone()) {
            if let Some(next) = graph.get(r.as_str()) {
                stack.extend(next.iter().map(|s| (*s).to_owned()));
            }
        }
    }
    out
}

async fn insert_new_key(db: &Db, sealer: &super::keyseal::Sealer) -> Result<String> {
    let seed = random_bytes::<32>();
    let kid = B64.encode(random_bytes::<6>());
    let signer = TokenSigner::from_seed(kid.clone(), &seed);
    db.insert_key(&KeyRow {
        kid: kid.clone(),
        private_seed: sealer.seal(&kid, &seed)?,
        public_key: signer.public_key().public_key,
        created_at: now_ms(),
        retired_at: None,
    })
    .await?;
    tracing::info!(%kid, "new token signing key");
    Ok(kid)
}
