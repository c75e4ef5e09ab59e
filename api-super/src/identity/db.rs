//! All SQL of the identity store, for both backends.
//!
//! The schema is created at start with `CREATE TABLE IF NOT EXISTS` (see
//! [`SCHEMA`]): identity has no migration in `migrations/` yet; these tables
//! are to move into an append-only API-database migration as they are.
//! Timestamps are Unix milliseconds (`BIGINT`), ids are text.

use migrations::Backend;
use sqlx::{PgPool, SqlitePool};

use super::error::{IdentityError, Result};

/// The identity tables. Portable DDL: the same text runs on PostgreSQL and
/// SQLite.
pub const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS identity_domains (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        enabled BOOLEAN NOT NULL DEFAULT TRUE,
        created_at BIGINT NOT NULL,
        CONSTRAINT uniq_identity_domains_name UNIQUE (name)
    )",
    "CREATE TABLE IF NOT EXISTS identity_projects (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES identity_domains (id),
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        enabled BOOLEAN NOT NULL DEFAULT TRUE,
        created_at BIGINT NOT NULL,
        CONSTRAINT uniq_identity_projects_domain_name UNIQUE (domain_id, name)
    )",
    "CREATE TABLE IF NOT EXISTS identity_users (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES identity_domains (id),
        name TEXT NOT NULL,
        password_hash TEXT,
        enabled BOOLEAN NOT NULL DEFAULT TRUE,
        default_project_id TEXT,
        created_at BIGINT NOT NULL,
        CONSTRAINT uniq_identity_users_domain_name UNIQUE (domain_id, name)
    )",
    "CREATE TABLE IF NOT EXISTS identity_roles (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        CONSTRAINT uniq_identity_roles_name UNIQUE (name)
    )",
    "CREATE TABLE IF NOT EXISTS identity_implied_roles (
        prior_role_id TEXT NOT NULL REFERENCES identity_roles (id) ON DELETE CASCADE,
        implied_role_id TEXT NOT NULL REFERENCES identity_roles (id) ON DELETE CASCADE,
        PRIMARY KEY (prior_role_id, implied_role_id)
    )",
    "CREATE TABLE IF NOT EXISTS identity_assignments (
        user_id TEXT NOT NULL REFERENCES identity_users (id) ON DELETE CASCADE,
        project_id TEXT NOT NULL REFERENCES identity_projects (id) ON DELETE CASCADE,
        role_id TEXT NOT NULL REFERENCES identity_roles (id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, project_id, role_id)
    )",
    "CREATE INDEX IF NOT EXISTS identity_assignments_project_idx ON identity_assignments (project_id)",
    "CREATE TABLE IF NOT EXISTS identity_signing_keys (
        kid TEXT PRIMARY KEY,
        private_seed TEXT NOT NULL,
        public_key TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        retired_at BIGINT
    )",
    "CREATE TABLE IF NOT EXISTS identity_revocations (
        audit_id TEXT,
        user_id TEXT,
        issued_before BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS identity_revocations_expires_idx ON identity_revocations (expires_at)",
    // What revokes tokens: one token (`audit_id`, with the user it belonged
    // to as `owner_id`), a user's tokens (`user_id`), a project's
    // (`project_id`), or a user's on one project (both: a grant removed).
    // `identity_revocations` above is its earlier shape, still read (and
    // emptied as its rows expire) so an upgrade forgets no revocation.
    "CREATE TABLE IF NOT EXISTS identity_revocation_events (
        audit_id TEXT,
        owner_id TEXT,
        user_id TEXT,
        project_id TEXT,
        issued_before BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS identity_revocation_events_expires_idx ON identity_revocation_events (expires_at)",
    "CREATE INDEX IF NOT EXISTS identity_revocation_events_owner_idx ON identity_revocation_events (owner_id)",
];

/// The identity store, on either backend.
#[derive(Debug, Clone)]
pub enum Db {
    /// PostgreSQL (several api-super processes share it).
    Pg(PgPool),
    /// SQLite (embedded default; one connection).
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$pool` bound to the backend's pool; compiled once per
/// backend.
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            Db::Pg($pool) => $body,
            Db::Sqlite($pool) => $body,
        }
    };
}
pub(super) use on_db;

/// A domain row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DomainRow {
    /// Id (`default` for the default domain).
    pub id: String,
    /// Unique name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Whether it can be used.
    pub enabled: bool,
}

/// A project row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProjectRow {
    /// Id.
    pub id: String,
    /// Owning domain.
    pub domain_id: String,
    /// Name, unique in its domain.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Whether it can be scoped to.
    pub enabled: bool,
}

/// A user row (with the password hash: never rendered, never logged).
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UserRow {
    /// Id.
    pub id: String,
    /// Owning domain.
    pub domain_id: String,
    /// Name, unique in its domain.
    pub name: String,
    /// PHC string of the argon2 hash.
    pub password_hash: Option<String>,
    /// Whether the user can authenticate.
    pub enabled: bool,
    /// Project used when authenticating without a scope.
    pub default_project_id: Option<String>,
}

impl std::fmt::Debug for UserRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserRow")
            .field("id", &self.id)
            .field("domain_id", &self.domain_id)
            .field("name", &self.name)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// A role row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RoleRow {
    /// Id.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// Free text.
    pub description: String,
}

/// A role assignment (user, project, role).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AssignmentRow {
    /// User.
    pub user_id: String,
    /// Project.
    pub project_id: String,
    /// Role.
    pub role_id: String,
}

/// A signing key row.
#[derive(Clone, sqlx::FromRow)]
pub struct KeyRow {
    /// Key id.
    pub kid: String,
    /// base64url of the 32-byte private seed.
    pub private_seed: String,
    /// base64url of the public key.
    pub public_key: String,
    /// Created, Unix ms.
    pub created_at: i64,
    /// Retired (no longer signs), Unix ms.
    pub retired_at: Option<i64>,
}

/// A revocation row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RevocationRow {
    /// Audit id: one token.
    pub audit_id: Option<String>,
    /// For one token: the user it belonged to (what bounds a user's
    /// revocations of single tokens). Not read back.
    #[sqlx(default)]
    pub owner_id: Option<String>,
    /// User id: the user's tokens (with `project_id`, those on it).
    pub user_id: Option<String>,
    /// Project id: the project's tokens.
    pub project_id: Option<String>,
    /// Tokens issued at or before this are revoked (Unix ms).
    pub issued_before: i64,
    /// Forget after (Unix ms).
    pub expires_at: i64,
}

/// Filters of a list of assignments.
#[derive(Debug, Clone, Default)]
pub struct AssignmentFilter {
    /// Only this user.
    pub user_id: Option<String>,
    /// Only this project.
    pub project_id: Option<String>,
    /// Only this role.
    pub role_id: Option<String>,
}

fn now() -> i64 {
    fabric::token::now_ms()
}

/// Maps a unique-constraint violation to 409.
fn conflict(e: sqlx::Error, what: &str) -> IdentityError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => {
            IdentityError::Conflict(format!("Conflict occurred attempting to store {what}"))
        }
        _ => IdentityError::Db(e),
    }
}

impl Db {
    /// Opens the store at `url` and creates the identity tables if missing.
    pub async fn open(url: &str, max_connections: u32) -> Result<Db> {
        let db = match Backend::from_url(url)
            .map_err(|e| IdentityError::Config(format!("identity database URL: {e}")))?
        {
            Backend::Postgres => Db::Pg(migrations::open_pg(url, max_connections).await?),
            Backend::Sqlite => Db::Sqlite(migrations::open_sqlite(url).await?),
        };
        for stmt in SCHEMA.iter().chain(super::db_limits::SCHEMA) {
            on_db!(&db, pool => sqlx::query(stmt).execute(pool).await.map(|r| r.rows_affected()))?;
        }
        Ok(db)
    }

    // ---- domains ----

    /// Creates a domain if none has this id.
    pub async fn ensure_domain(&self, id: &str, name: &str, description: &str) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_domains (id, name, description, enabled, created_at) \
             VALUES ($1, $2, $3, TRUE, $4) ON CONFLICT (id) DO NOTHING")
            .bind(id).bind(name).bind(description).bind(now())
            .execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// A domain by id.
    pub async fn domain(&self, id: &str) -> Result<Option<DomainRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, DomainRow>(
            "SELECT id, name, description, enabled FROM identity_domains WHERE id = $1")
            .bind(id).fetch_optional(pool).await)?)
    }

    /// A domain by name.
    pub async fn domain_by_name(&self, name: &str) -> Result<Option<DomainRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, DomainRow>(
            "SELECT id, name, description, enabled FROM identity_domains WHERE name = $1")
            .bind(name).fetch_optional(pool).await)?)
    }

    /// Every domain, optionally only the one named `name`.
    pub async fn domains(&self, name: Option<&str>) -> Result<Vec<DomainRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, DomainRow>(
            "SELECT id, name, description, enabled FROM identity_domains \
             WHERE ($1 IS NULL OR name = $1) ORDER BY name")
            .bind(name).fetch_all(pool).await)?)
    }

    // ---- projects ----

    /// Creates a project.
    pub async fn create_project(&self, p: &ProjectRow) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_projects (id, domain_id, name, description, enabled, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(&p.id).bind(&p.domain_id).bind(&p.name).bind(&p.description).bind(p.enabled).bind(now())
            .execute(pool).await.map(|r| r.rows_affected()))
        .map_err(|e| conflict(e, "Project"))?;
        Ok(())
    }

    /// A project by id.
    pub async fn project(&self, id: &str) -> Result<Option<ProjectRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, ProjectRow>(
            "SELECT id, domain_id, name, description, enabled FROM identity_projects WHERE id = $1")
            .bind(id).fetch_optional(pool).await)?)
    }

    /// A project by domain and name.
    pub async fn project_by_name(&self, domain_id: &str, name: &str) -> Result<Option<ProjectRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, ProjectRow>(
            "SELECT id, domain_id, name, description, enabled FROM identity_projects \
             WHERE domain_id = $1 AND name = $2")
            .bind(domain_id).bind(name).fetch_optional(pool).await)?)
    }

    /// Projects, filtered by name and domain.
    pub async fn projects(
        &self,
        name: Option<&str>,
        domain_id: Option<&str>,
    ) -> Result<Vec<ProjectRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, ProjectRow>(
            "SELECT id, domain_id, name, description, enabled FROM identity_projects \
             WHERE ($1 IS NULL OR name = $1) AND ($2 IS NULL OR domain_id = $2) ORDER BY name, id")
            .bind(name).bind(domain_id).fetch_all(pool).await)?)
    }

    /// Projects on which `user_id` holds any role.
    pub async fn projects_of_user(&self, user_id: &str) -> Result<Vec<ProjectRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, ProjectRow>(
            "SELECT id, domain_id, name, description, enabled FROM identity_projects p \
             WHERE EXISTS (SELECT 1 FROM identity_assignments a \
                           WHERE a.project_id = p.id AND a.user_id = $1) ORDER BY name, id")
            .bind(user_id).fetch_all(pool).await)?)
    }

    /// Writes a project's name, description and enabled flag; whether it
    /// existed.
    pub async fn update_project(&self, p: &ProjectRow) -> Result<bool> {
        let done = on_db!(self, pool => sqlx::query(
            "UPDATE identity_projects SET name = $2, description = $3, enabled = $4 WHERE id = $1")
            .bind(&p.id).bind(&p.name).bind(&p.description).bind(p.enabled)
            .execute(pool).await.map(|r| r.rows_affected()))
        .map_err(|e| conflict(e, "Project"))?;
        Ok(done == 1)
    }

    /// Deletes a project (and its assignments); whether it existed.
    pub async fn delete_project(&self, id: &str) -> Result<bool> {
        let done = on_db!(self, pool => sqlx::query("DELETE FROM identity_projects WHERE id = $1")
            .bind(id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(done == 1)
    }

    // ---- users ----

    /// Creates a user.
    pub async fn create_user(&self, u: &UserRow) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_users (id, domain_id, name, password_hash, enabled, default_project_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)")
            .bind(&u.id).bind(&u.domain_id).bind(&u.name).bind(&u.password_hash)
            .bind(u.enabled).bind(&u.default_project_id).bind(now())
            .execute(pool).await.map(|r| r.rows_affected()))
        .map_err(|e| conflict(e, "User"))?;
        Ok(())
    }

    /// Sets a user's password hash.
    pub async fn set_password_hash(&self, user_id: &str, hash: &str) -> Result<()> {
        on_db!(self, pool => sqlx::query("UPDATE identity_users SET password_hash = $1 WHERE id = $2")
            .bind(hash).bind(user_id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// A user by id.
    pub async fn user(&self, id: &str) -> Result<Option<UserRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, UserRow>(
            "SELECT id, domain_id, name, password_hash, enabled, default_project_id \
             FROM identity_users WHERE id = $1")
            .bind(id).fetch_optional(pool).await)?)
    }

    /// A user by domain and name.
    pub async fn user_by_name(&self, domain_id: &str, name: &str) -> Result<Option<UserRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, UserRow>(
            "SELECT id, domain_id, name, password_hash, enabled, default_project_id \
             FROM identity_users WHERE domain_id = $1 AND name = $2")
            .bind(domain_id).bind(name).fetch_optional(pool).await)?)
    }

    /// Users, filtered by name and domain.
    pub async fn users(&self, name: Option<&str>, domain_id: Option<&str>) -> Result<Vec<UserRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, UserRow>(
            "SELECT id, domain_id, name, password_hash, enabled, default_project_id FROM identity_users \
             WHERE ($1 IS NULL OR name = $1) AND ($2 IS NULL OR domain_id = $2) ORDER BY name, id")
            .bind(name).bind(domain_id).fetch_all(pool).await)?)
    }

    /// Writes a user's name, password hash, enabled flag and default
    /// project; false when the user does not exist.
    pub async fn update_user(&self, u: &UserRow) -> Result<bool> {
        let done = on_db!(self, pool => sqlx::query(
            "UPDATE identity_users SET name = $2, password_hash = $3, enabled = $4, \
             default_project_id = $5 WHERE id = $1")
            .bind(&u.id).bind(&u.name).bind(&u.password_hash).bind(u.enabled)
            .bind(&u.default_project_id)
            .execute(pool).await.map(|r| r.rows_affected()))
        .map_err(|e| conflict(e, "User"))?;
        Ok(done == 1)
    }

    /// Replaces the stored seed of signing key `kid` (sealing it).
    pub async fn set_key_seed(&self, kid: &str, stored: &str) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "UPDATE identity_signing_keys SET private_seed = $2 WHERE kid = $1")
            .bind(kid).bind(stored).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Deletes a user (and their assignments); whether they existed.
    pub async fn delete_user(&self, id: &str) -> Result<bool> {
        let done = on_db!(self, pool => sqlx::query("DELETE FROM identity_users WHERE id = $1")
            .bind(id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(done == 1)
    }

    // ---- roles ----

    /// Creates a role.
    pub async fn create_role(&self, r: &RoleRow) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_roles (id, name, description, created_at) VALUES ($1, $2, $3, $4)")
            .bind(&r.id).bind(&r.name).bind(&r.description).bind(now())
            .execute(pool).await.map(|r| r.rows_affected()))
        .map_err(|e| conflict(e, "Role"))?;
        Ok(())
    }

    /// A role by id.
    pub async fn role(&self, id: &str) -> Result<Option<RoleRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, RoleRow>(
            "SELECT id, name, description FROM identity_roles WHERE id = $1")
            .bind(id).fetch_optional(pool).await)?)
    }

    /// Roles, optionally only the one named `name`.
    pub async fn roles(&self, name: Option<&str>) -> Result<Vec<RoleRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, RoleRow>(
            "SELECT id, name, description FROM identity_roles WHERE ($1 IS NULL OR name = $1) ORDER BY name")
            .bind(name).fetch_all(pool).await)?)
    }

    /// Records that `prior` implies `implied`.
    pub async fn imply_role(&self, prior: &str, implied: &str) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_implied_roles (prior_role_id, implied_role_id) VALUES ($1, $2) \
             ON CONFLICT DO NOTHING")
            .bind(prior).bind(implied).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Every (prior, implied) pair.
    pub async fn implied_roles(&self) -> Result<Vec<(String, String)>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, (String, String)>(
            "SELECT prior_role_id, implied_role_id FROM identity_implied_roles")
            .fetch_all(pool).await)?)
    }

    // ---- assignments ----

    /// Grants `role_id` to `user_id` on `project_id` (idempotent).
    pub async fn grant(&self, user_id: &str, project_id: &str, role_id: &str) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_assignments (user_id, project_id, role_id) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING")
            .bind(user_id).bind(project_id).bind(role_id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Removes a grant; whether it existed.
    pub async fn revoke_grant(
        &self,
        user_id: &str,
        project_id: &str,
        role_id: &str,
    ) -> Result<bool> {
        let done = on_db!(self, pool => sqlx::query(
            "DELETE FROM identity_assignments WHERE user_id = $1 AND project_id = $2 AND role_id = $3")
            .bind(user_id).bind(project_id).bind(role_id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(done == 1)
    }

    /// Assignments matching `f`.
    pub async fn assignments(&self, f: &AssignmentFilter) -> Result<Vec<AssignmentRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, AssignmentRow>(
            "SELECT user_id, project_id, role_id FROM identity_assignments \
             WHERE ($1 IS NULL OR user_id = $1) AND ($2 IS NULL OR project_id = $2) \
             AND ($3 IS NULL OR role_id = $3) ORDER BY user_id, project_id, role_id")
            .bind(&f.user_id).bind(&f.project_id).bind(&f.role_id).fetch_all(pool).await)?)
    }

    // ---- signing keys ----

    /// Inserts a new signing key.
    pub async fn insert_key(&self, k: &KeyRow) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "INSERT INTO identity_signing_keys (kid, private_seed, public_key, created_at, retired_at) \
             VALUES ($1, $2, $3, $4, $5)")
            .bind(&k.kid).bind(&k.private_seed).bind(&k.public_key).bind(k.created_at).bind(k.retired_at)
            .execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Retires every key but `keep` that is not retired yet.
    pub async fn retire_keys_except(&self, keep: &str, at: i64) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "UPDATE identity_signing_keys SET retired_at = $1 WHERE kid <> $2 AND retired_at IS NULL")
            .bind(at).bind(keep).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Deletes keys retired before `before`.
    pub async fn delete_keys_retired_before(&self, before: i64) -> Result<()> {
        on_db!(self, pool => sqlx::query(
            "DELETE FROM identity_signing_keys WHERE retired_at IS NOT NULL AND retired_at < $1")
            .bind(before).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Every key, newest first.
    pub async fn keys(&self) -> Result<Vec<KeyRow>> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, KeyRow>(
            "SELECT kid, private_seed, public_key, created_at, retired_at FROM identity_signing_keys \
             ORDER BY created_at DESC, kid DESC")
            .fetch_all(pool).await)?)
    }

    // ---- revocations ----

    /// Records a revocation. A user, project or grant mark replaces the
    /// earlier mark of the same key (it covers everything that did), so
    /// there is at most one row per key.
    pub async fn insert_revocation(&self, r: &RevocationRow) -> Result<()> {
        on_db!(self, pool => async {
            let mut tx = pool.begin().await?;
            if r.audit_id.is_none() {
                sqlx::query(
                    "DELETE FROM identity_revocation_events WHERE audit_id IS NULL \
                     AND COALESCE(user_id, '') = $1 AND COALESCE(project_id, '') = $2 \
                     AND issued_before <= $3 AND expires_at <= $4")
                    .bind(r.user_id.as_deref().unwrap_or_default())
                    .bind(r.project_id.as_deref().unwrap_or_default())
                    .bind(r.issued_before).bind(r.expires_at)
                    .execute(&mut *tx).await?;
            }
            sqlx::query(
                "INSERT INTO identity_revocation_events \
                 (audit_id, owner_id, user_id, project_id, issued_before, expires_at, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)")
                .bind(&r.audit_id).bind(&r.owner_id).bind(&r.user_id).bind(&r.project_id)
                .bind(r.issued_before).bind(r.expires_at).bind(now())
                .execute(&mut *tx).await?;
            tx.commit().await
        }.await)?;
        Ok(())
    }

    /// How many single tokens of `owner` are revoked and not yet expired.
    pub async fn token_revocations_of(&self, owner: &str, now: i64) -> Result<i64> {
        Ok(on_db!(self, pool => sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM identity_revocation_events \
             WHERE owner_id = $1 AND audit_id IS NOT NULL AND expires_at > $2")
            .bind(owner).bind(now).fetch_one(pool).await)?)
    }

    /// Forgets the single-token revocations of `owner` issued before
    /// `before` (a mark on all the user's tokens covers them).
    pub async fn forget_token_revocations_of(&self, owner: &str, before: i64) -> Result<u64> {
        Ok(on_db!(self, pool => sqlx::query(
            "DELETE FROM identity_revocation_events \
             WHERE owner_id = $1 AND audit_id IS NOT NULL AND issued_before <= $2")
            .bind(owner).bind(before).execute(pool).await.map(|r| r.rows_affected()))?)
    }

    /// Revocations still in force at `now`; older ones are deleted.
    pub async fn revocations(&self, now: i64) -> Result<Vec<RevocationRow>> {
        for table in ["identity_revocations", "identity_revocation_events"] {
            let sql = format!("DELETE FROM {table} WHERE expires_at <= $1");
            on_db!(self, pool => sqlx::query(&sql)
                .bind(now).execute(pool).await.map(|r| r.rows_affected()))?;
        }
        Ok(on_db!(self, pool => sqlx::query_as::<_, RevocationRow>(
            "SELECT audit_id, user_id, project_id, issued_before, expires_at \
             FROM identity_revocation_events \
             UNION ALL SELECT audit_id, user_id, CAST(NULL AS TEXT) AS project_id, issued_before, \
             expires_at FROM identity_revocations")
            .fetch_all(pool).await)?)
    }
}
