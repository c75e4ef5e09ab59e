//! `keystone-manage bootstrap`: the default domain, the roles admin, member
//! and reader (admin implies member implies reader), an admin project and
//! user holding admin on it, and optionally a member user on a project of
//! its own. Idempotent: running it again keeps ids and resets the passwords.

use super::db::{Db, ProjectRow, RoleRow, UserRow};
use super::error::Result;
use super::password::{self, Cost};
use super::service::new_id;

/// The default domain's id and name (as Keystone).
pub const DEFAULT_DOMAIN_ID: &str = "default";
/// The default domain's name.
pub const DEFAULT_DOMAIN_NAME: &str = "Default";

/// What to create.
#[derive(Clone)]
pub struct BootstrapSpec {
    /// Admin user name (`admin`).
    pub admin_username: String,
    /// Admin password.
    pub admin_password: String,
    /// Admin project name (`admin`).
    pub admin_project: String,
    /// An optional member user: (user name, password, project name).
    pub member: Option<(String, String, String)>,
    /// An optional service user, with the role `service` only: (user
    /// name, password, project name). What compute hosts and cell
    /// conductors log in as (placement and image reads), instead of the
    /// cloud administrator.
    pub service: Option<(String, String, String)>,
}

impl std::fmt::Debug for BootstrapSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapSpec")
            .field("admin_username", &self.admin_username)
            .field("admin_project", &self.admin_project)
            .finish_non_exhaustive()
    }
}

impl BootstrapSpec {
    /// `admin`/`admin` with the given password and no member user.
    pub fn admin(password: impl Into<String>) -> Self {
        Self {
            admin_username: "admin".into(),
            admin_password: password.into(),
            admin_project: "admin".into(),
            member: None,
            service: None,
        }
    }
}

/// Ids of what bootstrap created or found.
#[derive(Debug, Clone)]
pub struct Bootstrapped {
    /// Admin user id.
    pub admin_user_id: String,
    /// Admin project id.
    pub admin_project_id: String,
    /// Member user and project ids, when asked for.
    pub member: Option<(String, String)>,
    /// Service user and project ids, when asked for.
    pub service: Option<(String, String)>,
    /// Role ids by name.
    pub roles: Vec<(String, String)>,
}

async fn ensure_role(db: &Db, name: &str) -> Result<String> {
    if let Some(r) = db.roles(Some(name)).await?.into_iter().next() {
        return Ok(r.id);
    }
    let id = new_id();
    db.create_role(&RoleRow {
        id: id.clone(),
        name: name.to_owned(),
        description: String::new(),
    })
    .await?;
    Ok(id)
}

async fn ensure_project(db: &Db, name: &str) -> Result<String> {
    if let Some(p) = db.project_by_name(DEFAULT_DOMAIN_ID, name).await? {
        return Ok(p.id);
    }
    let id = new_id();
    db.create_project(&ProjectRow {
        id: id.clone(),
        domain_id: DEFAULT_DOMAIN_ID.to_owned(),
        name: name.to_owned(),
        description: "Bootstrap project".to_owned(),
        enabled: true,
    })
    .await?;
    Ok(id)
}

async fn ensure_user(
    db: &Db,
    name: &str,
    pw: &str,
    project_id: &str,
    cost: Cost,
) -> Result<String> {
    let hash = password::hash_async(pw.to_owned(), cost).await?;
    if let Some(u) = db.user_by_name(DEFAULT_DOMAIN_ID, name).await? {
        db.set_password_hash(&u.id, &hash).await?;
        return Ok(u.id);
    }
    let id = new_id();
    db.create_user(&UserRow {
        id: id.clone(),
        domain_id: DEFAULT_DOMAIN_ID.to_owned(),
        name: name.to_owned(),
        password_hash: Some(hash),
        enabled: true,
        default_project_id: Some(project_id.to_owned()),
    })
    .await?;
    Ok(id)
}

/// Runs the bootstrap on `db`, hashing passwords at `cost`.
pub async fn bootstrap(db: &Db, spec: &BootstrapSpec, cost: Cost) -> Result<Bootstrapped> {
    db.ensure_domain(DEFAULT_DOMAIN_ID, DEFAULT_DOMAIN_NAME, "The default domain")
        .await?;
    let admin = ensure_role(db, "admin").await?;
    let member = ensure_role(db, "member").await?;
    let reader = ensure_role(db, "reader").await?;
    let service = ensure_role(db, "service").await?;
    db.imply_role(&admin, &member).await?;
    db.imply_role(&member, &reader).await?;
    let admin_project_id = ensure_project(db, &spec.admin_project).await?;
    let admin_user_id = ensure_user(
        db,
        &spec.admin_username,
        &spec.admin_password,
        &admin_project_id,
        cost,
    )
    .await?;
    db.grant(&admin_user_id, &admin_project_id, &admin).await?;
    let member_ids = match &spec.member {
        None => None,
        Some((user, pw, project)) => {
            let p = ensure_project(db, project).await?;
            let u = ensure_user(db, user, pw, &p, cost).await?;
            db.grant(&u, &p, &member).await?;
            Some((u, p))
        }
    };
    let service_ids = match &spec.service {
        None => None,
        Some((user, pw, project)) => {
            let p = ensure_project(db, project).await?;
            let u = ensure_user(db, user, pw, &p, cost).await?;
            db.grant(&u, &p, &service).await?;
            Some((u, p))
        }
    };
    Ok(Bootstrapped {
        admin_user_id,
        admin_project_id,
        member: member_ids,
        service: service_ids,
        roles: vec![
            ("admin".into(), admin),
            ("member".into(), member),
            ("reader".into(), reader),
            ("service".into(), service),
        ],
    })
}
