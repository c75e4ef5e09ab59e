//! ALL the Compute API's SQL on the API database: flavors, build requests,
//! request specs, instance mappings (the boot-time writes and the reads the
//! API needs) and availability zones of hosts (aggregate metadata).
//! Cell/host mapping administration stays in `cell_mapping::db::api`.
//! Submodules: [`flavors`] (rows, defaults, shared columns), `user_apis`
//! (key pairs, flavor management, quotas and group joins at create),
//! `caches` (the create-reads and landed-mapping caches).
//!
//! Both backends through `cell_mapping::db::Pool`; each statement is written
//! once with `$N` binds and compiled for both by [`on_pool!`].

use std::collections::BTreeMap;

use cell_mapping::db::server_groups::{
    group_lock_sql, MEMBER_COUNT_BY_USER_SQL, MEMBER_INSERT_SQL,
};
use cell_mapping::db::{quota_lock_sql, InstanceEdit, InstanceFlavor, Pool, QUOTA_LOCK_INSERT};
use cell_mapping::ApiDb;
use chrono::{DateTime, Utc};
use migrations::BeginWrite;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ApiError;

/// Expands `$body` once per backend with `$p` bound to the concrete pool.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            Pool::Postgres($p) => $body,
            Pool::Sqlite($p) => $body,
        }
    };
}

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> ApiError {
    move |e| ApiError::Db { op, source: e }
}

mod flavors;
pub use flavors::*;
use flavors::{FLAVOR_COLUMNS, FLAVOR_VISIBLE};

/// [`ComputeDb::show_extras`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShowExtras {
    /// What the views show of its request spec.
    pub spec: SpecView,
    /// Its server group, if any.
    pub group_uuid: Option<String>,
}

/// A flavor beside one of its extra specs (`kind` `s`; no `item` when it
/// has none) or one of the project's quota overrides (`q`)
/// ([`ComputeDb::flavor_for_create`]).
#[derive(sqlx::FromRow)]
struct FlavorCreateRow {
    #[sqlx(flatten)]
    flavor: Flavor,
    kind: String,
    item: Option<String>,
    spec_value: Option<String>,
    hard_limit: Option<i64>,
}

/// What a server create reads from the API database before the image
/// ([`ComputeDb::flavor_for_create`]).
#[derive(Debug, Clone)]
pub struct CreateReads {
    /// The flavor.
    pub flavor: Flavor,
    /// Its extra specs.
    pub extra_specs: BTreeMap<String, String>,
    /// The project's quota overrides (resource, hard limit).
    pub quotas: Vec<(String, i64)>,
    /// The `default` quota class's limits (resource, hard limit).
    pub class_defaults: Vec<(String, i64)>,
    /// The per-user limits set in the project (user, resource, hard limit).
    pub user_quotas: Vec<(String, String, i64)>,
}

/// The would-be instance stored in a build request (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildInstance {
    /// Instance uuid.
    pub uuid: String,
    /// Project.
    pub project_id: String,
    /// User.
    pub user_id: String,
    /// Name.
    pub display_name: String,
    /// Flavor.
    pub flavor: InstanceFlavor,
    /// Image.
    pub image_ref: String,
    /// Requested zone.
    pub availability_zone: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Reservation id.
    pub reservation_id: String,
    /// Index in the request.
    pub launch_index: i64,
    /// Key pair name (`key_name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    /// Metadata given at create (key, value), sorted by key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<(String, String)>,
    /// `user_data` given at create (base64, as sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// `description` (2.19; the name below it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The guest's hostname (2.90's `hostname`, else the sanitized name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Tags given at create (2.52), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The image's properties as recorded at create
    /// ([`super::images::recorded_properties`]; 2.98 `image.properties`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_properties: BTreeMap<String, String>,
    /// Whether the guest gets a config drive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub config_drive: bool,
    /// The key pair's type and public key, read at create (Nova's
    /// `key_data`, for the guest's metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_data: Option<(String, String)>,
    /// `accessIPv4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_ip_v4: Option<String>,
    /// `accessIPv6`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_ip_v6: Option<String>,
    /// `trusted_image_certificates` (2.63).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_certs: Option<Vec<String>>,
}

/// What the scheduler needs (request_specs.spec, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestSpec {
    /// Instance uuid.
    pub instance_uuid: String,
    /// All instances of the request (all-or-none for max_count > 1).
    pub instance_uuids: Vec<String>,
    /// Project.
    pub project_id: String,
    /// User.
    pub user_id: String,
    /// Flavor.
    pub flavor: InstanceFlavor,
    /// Image.
    pub image_ref: String,
    /// Requested zone (without the forced host).
    pub availability_zone: Option<String>,
    /// Forced host (`az:host`, admins only).
    pub force_host: Option<String>,
    /// Forced node (`az:host:node` or `az::node`, admins only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_node: Option<String>,
    /// Requested destination (2.74 `host` / `hypervisor_hostname`, admins
    /// only): the filters still run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_host: Option<String>,
    /// Requested node (2.74 `hypervisor_hostname`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_node: Option<String>,
    /// Request id of the create.
    pub request_id: String,
    /// Global request id.
    pub global_request_id: String,
    /// Key pair name (`key_name`), if any; kept after the build lands so
    /// the API can show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    /// Whether the instances join a server group (`Some(false)`: none, so
    /// scheduling skips the group look-up; `None`: a spec written before
    /// this field, look it up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_group: Option<bool>,
    /// The image's scheduling properties (`ImagePropertiesFilter`).
    #[serde(
        default,
        skip_serializing_if = "crate::image_props::ImageProps::is_empty"
    )]
    pub image_properties: crate::image_props::ImageProps,
    /// The flavor's extra specs when the servers were created (as Nova's
    /// request spec keeps them with its flavor); `None`: a spec written
    /// before this field, the scheduler reads them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor_extra_specs: Option<BTreeMap<String, String>>,
    /// The scheduler hints given at create, each value a list (as
    /// Nova's request spec keeps them; 2.100 shows them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduler_hints: BTreeMap<String, Value>,
    /// The image's properties as Nova records them in the instance's
    /// system metadata at create and rebuild, and shows them from 2.98
    /// (`image.properties`; [`super::images::recorded_properties`]).
    /// Empty in specs written before this field.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recorded_image_properties: BTreeMap<String, String>,
}

/// A rebuild's image as the request spec keeps it
/// ([`ComputeDb::set_spec_image`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecImage {
    /// The image's id.
    pub image_ref: String,
    /// Its scheduling properties (`ImagePropertiesFilter`).
    pub scheduling: crate::image_props::ImageProps,
    /// Its properties as recorded for the views (2.98).
    pub recorded: BTreeMap<String, String>,
    /// The rebuild's key pair (2.54) when it changes it (`Some(None)`: none).
    pub key_name: Option<Option<String>>,
}

/// An instance mapping: what the API database alone knows of a server
/// (all a partial record of a server in a down cell can show).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct MappingRow {
    /// The server.
    pub instance_uuid: String,
    /// Its cell (`None` until scheduled).
    pub cell_id: Option<i64>,
    /// Project.
    pub project_id: String,
    /// User (`None` on mappings written without it).
    pub user_id: Option<String>,
    /// Deleted (or being deleted).
    pub queued_for_delete: bool,
    /// The server's creation time (the build request's, as its instance).
    pub created_at: DateTime<Utc>,
}

const MAPPING_COLUMNS: &str =
    "instance_uuid, cell_id, project_id, user_id, queued_for_delete, created_at";

/// A build request row.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildRequest {
    /// The would-be instance.
    pub instance: BuildInstance,
}

/// A build that [`ComputeDb::finish_build`] landed.
#[derive(Debug, Clone)]
pub struct BuildLanded {
    /// The build as edited since it was written (`None`: never edited).
    pub edited: Option<BuildInstance>,
}

impl ComputeDb {
    /// Wraps an API database handle.
    pub fn new(api: ApiDb) -> Self {
        Self {
            api,
            owner: None,
            landed: Default::default(),
            create_reads: Default::default(),
        }
    }

    /// The same database, answering [`Self::flavor_for_create`] from memory
    /// for `ttl` after a read (zero: never; see [`CreateReadsCache`]).
    pub fn with_create_reads_cache(mut self, ttl: std::time::Duration) -> Self {
        self.create_reads = std::sync::Arc::new(CreateReadsCache::new(ttl));
        self
    }

    /// The cell, project and user of a landed server this process knows
    /// (see [`LandedMappings`]); `None`: read the mapping.
    pub fn landed(&self, uuid: &str) -> Option<(i64, String, Option<String>)> {
        self.landed.get(uuid)
    }

    /// Remembers that `uuid` of `project` landed in cell `cell_id`, with
    /// its key pair name when it is in no server group (`in_group:
    /// Some(false)`; see [`RequestSpec::in_group`]): a show then needs no
    /// read of the API database ([`Self::landed_key_name`]).
    pub fn remember_landed(
        &self,
        uuid: &str,
        cell_id: i64,
        project: &str,
        user: &str,
        key_name: Option<&str>,
        in_group: Option<bool>,
    ) {
        let shown = (in_group == Some(false)).then_some(key_name);
        self.landed.put(uuid, cell_id, project, Some(user), shown);
    }

    /// The key pair name (`Some(None)`: none) of a server that landed
    /// through this process outside any server group; `None`: read it
    /// ([`Self::show_extras`]).
    pub fn landed_key_name(&self, uuid: &str) -> Option<Option<String>> {
        self.landed.shown(uuid)
    }

    /// Forgets a remembered landing (its cell is no longer known here).
    pub fn forget_landed(&self, uuid: &str) {
        self.landed.forget(uuid);
    }

    /// The same database, writing and landing builds as the process
    /// `owner` (see [`crate::conductor::heal`]).
    pub fn with_owner(mut self, owner: &str) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The process this handle writes and lands builds as.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    fn pool(&self) -> &Pool {
        self.api.pool()
    }

    fn is_postgres(&self) -> bool {
        matches!(self.pool(), Pool::Postgres(_))
    }

    /// The cell-mapping handle.
    pub fn api(&self) -> &ApiDb {
        &self.api
    }

    /// Creates the default flavors that do not exist yet (by flavorid or
    /// name); returns how many were created. Idempotent.
    pub async fn seed_flavors(&self) -> Result<usize, ApiError> {
        let mut n = 0;
        for f in default_flavors() {
            if self.create_flavor_if_absent(&f).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Creates `f` unless a flavor with its id or name exists.
    pub async fn create_flavor_if_absent(&self, f: &NewFlavor) -> Result<bool, ApiError> {
        let _forget = self.create_reads.forget_after();
        let n = on_pool!(self.pool(), p => sqlx::query(
            "INSERT INTO flavors (flavorid, name, memory_mb, vcpus, root_gb, created_at) \
             SELECT $1, $2, $3, $4, $5, $6 WHERE NOT EXISTS \
             (SELECT 1 FROM flavors WHERE flavorid = $1 OR name = $2)")
            .bind(&f.flavorid).bind(&f.name).bind(f.memory_mb).bind(f.vcpus).bind(f.root_gb)
            .bind(Utc::now()).execute(p).await.map_err(db("flavor_insert"))?.rows_affected());
        Ok(n > 0)
    }

    /// Public, enabled flavors by flavorid.
    pub async fn flavors(&self) -> Result<Vec<Flavor>, ApiError> {
        let sql = format!(
            "SELECT {FLAVOR_COLUMNS} FROM flavors WHERE is_public AND NOT disabled ORDER BY memory_mb, flavorid"
        );
        Ok(
            on_pool!(self.pool(), p => sqlx::query_as(&sql).fetch_all(p).await
            .map_err(db("flavor_list"))?),
        )
    }

    /// One flavor by its API id.
    pub async fn flavor(&self, flavorid: &str) -> Result<Option<Flavor>, ApiError> {
        let sql = format!("SELECT {FLAVOR_COLUMNS} FROM flavors WHERE flavorid = $1");
        Ok(
            on_pool!(self.pool(), p => sqlx::query_as(&sql).bind(flavorid).fetch_optional(p).await
            .map_err(db("flavor_get"))?),
        )
    }

    /// Writes the build requests, request specs and instance mappings (cell
    /// unset) of a create, and with `group` the servers' membership of
    /// their server group, in one transaction. With `limits`, the project's
    /// usage is counted and checked in the same transaction, under the
    /// project's quota lock; with `group`, the group's members of the
    /// creating user are counted against `server_group_members` under the
    /// group's row lock: all of `builds` fit, or nothing is written and the
    /// answer is Nova's 403 (400 when the group was deleted meanwhile).
    pub async fn create_builds(
        &self,
        builds: &[(BuildInstance, RequestSpec)],
        limits: Option<&InstanceLimits>,
        group: Option<&GroupJoin>,
    ) -> Result<(), ApiError> {
        let t = Utc::now();
        let pg = self.is_postgres();
        let limits = limits.filter(|l| !l.unlimited());
        let rows = builds
            .iter()
            .map(|(b, spec)| {
                Ok((
                    b,
                    serde_json::to_string(b).map_err(ApiError::internal)?,
                    serde_json::to_string(spec).map_err(ApiError::internal)?,
                    (spec.view_fields(), spec.view_image_properties()),
                ))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        // The three rows of each build: one statement on PostgreSQL (and,
        // with nothing to count or lock, no transaction around it: one
        // round trip for the usual boot of one server), three on SQLite.
        macro_rules! insert_build {
            ($exec:expr, $b:expr, $inst:expr, $spec:expr, $view:expr) => {{
                let (b, inst, spec): (&BuildInstance, &String, &String) = ($b, $inst, $spec);
                let (view_fields, view_image): (bool, bool) = $view;
                if pg {
                    sqlx::query(INSERT_BUILD_PG)
                        .bind(&b.uuid).bind(&b.project_id).bind(&b.user_id).bind(inst)
                        .bind(b.created_at).bind(self.owner()).bind(spec).bind(t)
                        .bind(b.flavor.vcpus).bind(b.flavor.memory_mb).bind(view_fields).bind(view_image)
                        .execute(&mut *$exec).await.map_err(db("build_insert"))?;
                } else {
                    sqlx::query("INSERT INTO build_requests (instance_uuid, project_id, user_id, instance, \
                         created_at, owner) VALUES ($1, $2, $3, $4, $5, $6)")
                        .bind(&b.uuid).bind(&b.project_id).bind(&b.user_id).bind(inst).bind(b.created_at)
                        .bind(self.owner())
                        .execute(&mut *$exec).await.map_err(db("build_request_insert"))?;
                    sqlx::query("INSERT INTO request_specs (instance_uuid, spec, created_at, view_fields, \
                         view_image_properties) VALUES ($1, $2, $3, $4, $5)")
                        .bind(&b.uuid).bind(spec).bind(t).bind(view_fields).bind(view_image)
                        .execute(&mut *$exec).await.map_err(db("request_spec_insert"))?;
                    sqlx::query("INSERT INTO instance_mappings (instance_uuid, cell_id, project_id, user_id, \
                         created_at, vcpus, memory_mb) VALUES ($1, NULL, $2, $3, $4, $5, $6)")
                        .bind(&b.uuid).bind(&b.project_id).bind(&b.user_id).bind(b.created_at)
                        .bind(b.flavor.vcpus).bind(b.flavor.memory_mb)
                        .execute(&mut *$exec).await.map_err(db("instance_mapping_insert"))?;
                }
            }};
        }
        if let (Pool::Postgres(p), [(b, inst, spec, view)], None, None) =
            (self.pool(), rows.as_slice(), limits, group)
        {
            let mut c = p.acquire().await.map_err(db("acquire"))?;
            insert_build!(&mut *c, b, inst, spec, *view);
            return Ok(());
        }
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            // The rows first, the project's lock last: the lock is held
            // only for the count and the commit, not for the inserts, so
            // the creates of one project overlap until their count. Each
            // count runs after the lock is granted and sees every create
            // committed before it (READ COMMITTED takes a snapshot per
            // statement) plus its own rows.
            for (b, inst, spec, view) in &rows {
                insert_build!(&mut *tx, b, inst, spec, *view);
            }
            if let (Some(l), Some((first, _))) = (limits, builds.first()) {
                let scope = format!("project:{}", first.project_id);
                sqlx::query(QUOTA_LOCK_INSERT)
                    .bind(&scope).execute(&mut *tx).await.map_err(db("quota_lock_insert"))?;
                sqlx::query(quota_lock_sql(pg)).bind(&scope)
                    .fetch_optional(&mut *tx).await.map_err(db("quota_lock"))?;
                let with_mine: (i64, i64, i64) = sqlx::query_as(INSTANCE_USAGE_SQL)
                    .bind(&first.project_id).fetch_one(&mut *tx).await.map_err(db("quota_usage"))?;
                let n = builds.len() as i64;
                let want = (n, n * first.flavor.vcpus, n * first.flavor.memory_mb);
                let used = (with_mine.0 - want.0, with_mine.1 - want.1, with_mine.2 - want.2);
                // Refused: the lock goes now, with an explicit rollback,
                // not when the dropped transaction's connection is next
                // used (the other creates of the project wait on it).
                if let Err(e) = l.check(used, want) {
                    tx.rollback().await.map_err(db("rollback"))?;
                    return Err(e);
                }
                // Nova's per-user quotas: the creating user's own count
                // against the user's limits, under the same lock.
                if let Some(u) = l.user {
                    let mine: (i64, i64, i64) = sqlx::query_as(USER_INSTANCE_USAGE_SQL)
                        .bind(&first.project_id).bind(&first.user_id)
                        .fetch_one(&mut *tx).await.map_err(db("user_quota_usage"))?;
                    let used = (mine.0 - want.0, mine.1 - want.1, mine.2 - want.2);
                    if let Err(e) = u.check(used, want) {
                        tx.rollback().await.map_err(db("rollback"))?;
                        return Err(e);
                    }
                }
            }
            if let (Some(g), Some((first, _))) = (group, builds.first()) {
                let exists: Option<i64> = sqlx::query_scalar(group_lock_sql(pg)).bind(g.id)
                    .fetch_optional(&mut *tx).await.map_err(db("server_group_lock"))?;
                if exists.is_none() {
                    tx.rollback().await.map_err(db("rollback"))?;
                    return Err(ApiError::BadRequest(format!(
                        "Invalid server group: Instance group {} could not be found.", g.uuid)));
                }
                let members: i64 = sqlx::query_scalar(MEMBER_COUNT_BY_USER_SQL)
                    .bind(g.id).bind(&first.user_id)
                    .fetch_one(&mut *tx).await.map_err(db("server_group_member_count"))?;
                if let Err(e) = g.check(members, builds.len() as i64) {
                    tx.rollback().await.map_err(db("rollback"))?;
                    return Err(e);
                }
                for (b, _) in builds {
                    sqlx::query(MEMBER_INSERT_SQL).bind(g.id).bind(&b.uuid).bind(t)
                        .execute(&mut *tx).await.map_err(db("server_group_member_insert"))?;
                }
            }
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// The build request of `uuid`.
    pub async fn build_request(&self, uuid: &str) -> Result<Option<BuildRequest>, ApiError> {
        let row: Option<String> = on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT instance FROM build_requests WHERE instance_uuid = $1")
            .bind(uuid).fetch_optional(p).await.map_err(db("build_request_get"))?);
        row.map(|s| parse_build(&s)).transpose()
    }

    /// Build requests (of `project`, or all), newest first.
    pub async fn build_requests(
        &self,
        project: Option<&str>,
    ) -> Result<Vec<BuildRequest>, ApiError> {
        let rows: Vec<String> = on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT instance FROM build_requests WHERE ($1 = '' OR project_id = $1) \
             ORDER BY created_at DESC, instance_uuid DESC")
            .bind(project.unwrap_or("")).fetch_all(p).await.map_err(db("build_request_list"))?);
        rows.iter().map(|s| parse_build(s)).collect()
    }

    /// The request spec of `uuid`.
    pub async fn request_spec(&self, uuid: &str) -> Result<Option<RequestSpec>, ApiError> {
        let row: Option<String> = on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT spec FROM request_specs WHERE instance_uuid = $1")
            .bind(uuid).fetch_optional(p).await.map_err(db("request_spec_get"))?);
        row.map(|s| serde_json::from_str(&s).map_err(ApiError::internal))
            .transpose()
    }

    /// Records a rebuild's image in the request spec of `uuid`, as Nova
    /// replaces the request spec's image (and the image properties of
    /// the instance's system metadata) on a rebuild: the reference, the
    /// scheduling properties and the properties shown from 2.98. A server
    /// without a request spec is left as it is.
    pub async fn set_spec_image(&self, uuid: &str, image: &SpecImage) -> Result<(), ApiError> {
        let Some(mut spec) = self.request_spec(uuid).await? else {
            return Ok(());
        };
        spec.image_ref = image.image_ref.clone();
        spec.image_properties = image.scheduling.clone();
        spec.recorded_image_properties = image.recorded.clone();
        if let Some(k) = &image.key_name {
            spec.key_name = k.clone();
        }
        let text = serde_json::to_string(&spec).map_err(ApiError::internal)?;
        on_pool!(self.pool(), p => sqlx::query(
            "UPDATE request_specs SET spec = $2, view_image_properties = $3 WHERE instance_uuid = $1")
            .bind(uuid).bind(text).bind(spec.view_image_properties())
            .execute(p).await.map_err(db("request_spec_set_image"))?.rows_affected());
        Ok(())
    }

    /// The instance mapping of `uuid`: `(cell id, project id, user id)`.
    pub async fn mapping(
        &self,
        uuid: &str,
    ) -> Result<Option<(Option<i64>, String, Option<String>)>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT cell_id, project_id, user_id FROM instance_mappings WHERE instance_uuid = $1")
            .bind(uuid).fetch_optional(p).await.map_err(db("instance_mapping_get"))?))
    }

    /// The whole instance mapping of `uuid`.
    pub async fn mapping_row(&self, uuid: &str) -> Result<Option<MappingRow>, ApiError> {
        let sql =
            format!("SELECT {MAPPING_COLUMNS} FROM instance_mappings WHERE instance_uuid = $1");
        let row: Option<MappingRow> = on_pool!(self.pool(), p => sqlx::query_as(&sql)
            .bind(uuid).fetch_optional(p).await.map_err(db("instance_mapping_row"))?);
        if let Some(m) = &row {
            if let (Some(cell), false) = (m.cell_id, m.queued_for_delete) {
                self.landed
                    .put(uuid, cell, &m.project_id, m.user_id.as_deref(), None);
            }
        }
        Ok(row)
    }

    /// The mappings of the servers in cells `cell_ids` (of `project`, or of
    /// every project) that are not queued for delete, newest first
    /// (`created_at` desc, then uuid desc, byte-wise as the cells sort),
    /// at most `limit`: the partial records of a down cell's servers.
    pub async fn live_mappings_in_cells(
        &self,
        cell_ids: &[i64],
        project: Option<&str>,
        limit: i64,
    ) -> Result<Vec<MappingRow>, ApiError> {
        if cell_ids.is_empty() || limit <= 0 {
            return Ok(Vec::new());
        }
        let uuid_order = if self.is_postgres() {
            "instance_uuid COLLATE \"C\""
        } else {
            "instance_uuid"
        };
        let marks: Vec<String> = (3..3 + cell_ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {MAPPING_COLUMNS} FROM instance_mappings WHERE NOT queued_for_delete \
             AND ($1 = '' OR project_id = $1) AND cell_id IN ({}) \
             ORDER BY created_at DESC, {uuid_order} DESC LIMIT $2",
            marks.join(", ")
        );
        Ok(on_pool!(self.pool(), p => {
            let mut q = sqlx::query_as(&sql).bind(project.unwrap_or("")).bind(limit);
            for c in cell_ids {
                q = q.bind(c);
            }
            q.fetch_all(p).await.map_err(db("instance_mappings_in_cells"))?
        }))
    }

    /// The build landed in cell `cell_id`: deletes the build request and
    /// points the mapping at the cell, in one transaction. `None` (nothing
    /// changed) when the build request was deleted meanwhile (the user
    /// deleted the server while it was being scheduled) or, with an
    /// [`owner`](Self::owner), when another process took it over (a healer
    /// that found this process's heartbeat stale): then the other process
    /// lands it, never both ([`build_taken_over`](Self::build_taken_over)
    /// tells the two cases apart). Landed: with the build as
    /// [`edit_build`](Self::edit_build) left it when it was edited since
    /// it was written, read in the same statement as the delete, for the
    /// caller to carry the edits over to the instance row.
    pub async fn finish_build(
        &self,
        uuid: &str,
        cell_id: i64,
    ) -> Result<Option<BuildLanded>, ApiError> {
        let deleted: Option<Option<String>> = if let Pool::Postgres(p) = self.pool() {
            // One statement: the mapping moves only if the delete found the
            // build request.
            sqlx::query_scalar(
                "WITH d AS (DELETE FROM build_requests WHERE instance_uuid = $1 \
                 AND ($2 = '' OR owner = $2) \
                 RETURNING instance_uuid, CASE WHEN edited THEN instance END AS edits), \
                 m AS (UPDATE instance_mappings SET cell_id = $3, updated_at = $4 \
                 WHERE instance_uuid IN (SELECT instance_uuid FROM d)) \
                 SELECT edits FROM d",
            )
            .bind(uuid)
            .bind(self.owner().unwrap_or(""))
            .bind(cell_id)
            .bind(Utc::now())
            .fetch_optional(p)
            .await
            .map_err(db("build_finish"))?
        } else {
            on_pool!(self.pool(), p => {
                let mut tx = p.begin_write().await.map_err(db("begin"))?;
                let d: Option<Option<String>> = sqlx::query_scalar(
                    "DELETE FROM build_requests WHERE instance_uuid = $1 \
                     AND ($2 = '' OR owner = $2) RETURNING CASE WHEN edited THEN instance END")
                    .bind(uuid).bind(self.owner().unwrap_or(""))
                    .fetch_optional(&mut *tx).await.map_err(db("build_request_delete"))?;
                if d.is_none() {
                    tx.rollback().await.map_err(db("rollback"))?;
                } else {
                    sqlx::query("UPDATE instance_mappings SET cell_id = $1, updated_at = $2 \
                         WHERE instance_uuid = $3")
                        .bind(cell_id).bind(Utc::now()).bind(uuid)
                        .execute(&mut *tx).await.map_err(db("instance_mapping_set_cell"))?;
                    tx.commit().await.map_err(db("commit"))?;
                }
                d
            })
        };
        deleted
            .map(|edits| {
                Ok(BuildLanded {
                    edited: edits
                        .map(|s| parse_build(&s))
                        .transpose()?
                        .map(|b| b.instance),
                })
            })
            .transpose()
    }

    /// `PUT /servers/{id}` on a build not landed yet: the fields of `e`
    /// that are given, written into the build request (marked edited, for
    /// the landing to carry over: [`finish_build`](Self::finish_build)).
    /// `None` when there is no build request (it landed, or was deleted).
    pub async fn edit_build(
        &self,
        uuid: &str,
        e: &InstanceEdit,
    ) -> Result<Option<BuildRequest>, ApiError> {
        let lock = if self.is_postgres() {
            " FOR UPDATE"
        } else {
            ""
        };
        let read = format!("SELECT instance FROM build_requests WHERE instance_uuid = $1{lock}");
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let row: Option<String> = sqlx::query_scalar(&read)
                .bind(uuid).fetch_optional(&mut *tx).await.map_err(db("build_request_get"))?;
            let Some(row) = row else {
                tx.rollback().await.map_err(db("rollback"))?;
                return Ok(None);
            };
            let mut b = parse_build(&row)?;
            let i = &mut b.instance;
            i.display_name = e.name.clone().unwrap_or(std::mem::take(&mut i.display_name));
            if let Some(d) = &e.description {
                i.description = d.clone();
            }
            i.hostname = e.hostname.clone().or(i.hostname.take());
            i.access_ip_v4 = e.access_ip_v4.clone().or(i.access_ip_v4.take());
            i.access_ip_v6 = e.access_ip_v6.clone().or(i.access_ip_v6.take());
            let text = serde_json::to_string(&b.instance).map_err(ApiError::internal)?;
            sqlx::query("UPDATE build_requests SET instance = $1, edited = TRUE, updated_at = $2 \
                 WHERE instance_uuid = $3")
                .bind(text).bind(Utc::now()).bind(uuid)
                .execute(&mut *tx).await.map_err(db("build_request_edit"))?;
            tx.commit().await.map_err(db("commit"))?;
            Ok(Some(b))
        })
    }

    /// Whether the build request of `uuid` exists and belongs to another
    /// process than this handle's owner (it was taken over).
    pub async fn build_taken_over(&self, uuid: &str) -> Result<bool, ApiError> {
        let Some(me) = self.owner() else {
            return Ok(false);
        };
        let n: i64 = on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT COUNT(*) FROM build_requests WHERE instance_uuid = $1 \
             AND (owner IS NULL OR owner <> $2)")
            .bind(uuid).bind(me).fetch_one(p).await.map_err(db("build_request_owner"))?);
        Ok(n > 0)
    }

    /// Records that scheduler process `id` is alive at `at` (its row in
    /// `api_schedulers`, created on the first beat).
    pub async fn scheduler_heartbeat(&self, id: &str, at: DateTime<Utc>) -> Result<(), ApiError> {
        on_pool!(self.pool(), p => sqlx::query(
            "INSERT INTO api_schedulers (id, heartbeat_at, created_at) VALUES ($1, $2, $2) \
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at")
            .bind(id).bind(at).execute(p).await.map_err(db("scheduler_heartbeat"))?.rows_affected());
        Ok(())
    }

    /// Forgets scheduler processes silent since before `cutoff` that own
    /// no build request any more; returns how many.
    pub async fn prune_schedulers(&self, cutoff: DateTime<Utc>) -> Result<u64, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query(
            "DELETE FROM api_schedulers WHERE heartbeat_at < $1 AND NOT EXISTS \
             (SELECT 1 FROM build_requests b WHERE b.owner = api_schedulers.id)")
            .bind(cutoff).execute(p).await.map_err(db("scheduler_prune"))?.rows_affected()))
    }

    /// Build requests nobody drives, oldest first, at most `limit`: owned
    /// by a process other than `me` whose last heartbeat is before
    /// `cutoff` (or that never beat and the build is older than
    /// `cutoff`), or without an owner and older than `cutoff`. Each with
    /// its owner.
    pub async fn orphan_builds(
        &self,
        me: &str,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<(String, Option<String>)>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT b.instance_uuid, b.owner FROM build_requests b \
             LEFT JOIN api_schedulers s ON s.id = b.owner \
             WHERE (b.owner IS NULL OR b.owner <> $1) \
             AND COALESCE(s.heartbeat_at, b.created_at) < $2 \
             ORDER BY b.created_at, b.instance_uuid LIMIT $3")
            .bind(me).bind(cutoff).bind(limit.max(0))
            .fetch_all(p).await.map_err(db("build_request_orphans"))?))
    }

    /// Takes the build requests `builds` (uuid, owner seen) over for `me`,
    /// all or none, each with a compare-and-set on the owner seen: false
    /// (nothing changed) when any of them is gone or has another owner by
    /// now (another healer was faster, or the user deleted it).
    pub async fn take_over_builds(
        &self,
        builds: &[(String, Option<String>)],
        me: &str,
    ) -> Result<bool, ApiError> {
        let t = Utc::now();
        Ok(on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let mut all = true;
            for (uuid, seen) in builds {
                let n = sqlx::query("UPDATE build_requests SET owner = $1, updated_at = $2 \
                     WHERE instance_uuid = $3 AND COALESCE(owner, '') = $4")
                    .bind(me).bind(t).bind(uuid).bind(seen.as_deref().unwrap_or(""))
                    .execute(&mut *tx).await.map_err(db("build_request_take_over"))?
                    .rows_affected();
                if n == 0 {
                    all = false;
                    break;
                }
            }
            if all {
                tx.commit().await.map_err(db("commit"))?;
            } else {
                tx.rollback().await.map_err(db("rollback"))?;
            }
            all
        }))
    }

    /// Gives the build requests `uuids` owned by `me` up (owner unset), so
    /// that any healer takes them once they are older than its grace.
    pub async fn release_builds(&self, uuids: &[String], me: &str) -> Result<(), ApiError> {
        on_pool!(self.pool(), p => {
            for uuid in uuids {
                sqlx::query("UPDATE build_requests SET owner = NULL, updated_at = $1 \
                     WHERE instance_uuid = $2 AND owner = $3")
                    .bind(Utc::now()).bind(uuid).bind(me)
                    .execute(p).await.map_err(db("build_request_release"))?;
            }
        });
        Ok(())
    }

    /// The owner of the build request of `uuid`: `None` when there is no
    /// build request, `Some(None)` when it has no owner.
    pub async fn build_owner(&self, uuid: &str) -> Result<Option<Option<String>>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT owner FROM build_requests WHERE instance_uuid = $1")
            .bind(uuid).fetch_optional(p).await.map_err(db("build_request_owner_get"))?))
    }

    /// Deletes a build not yet scheduled (build request, request spec,
    /// mapping); false when its build request is gone (it was scheduled).
    pub async fn delete_build(&self, uuid: &str) -> Result<bool, ApiError> {
        Ok(on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = sqlx::query("DELETE FROM build_requests WHERE instance_uuid = $1")
                .bind(uuid).execute(&mut *tx).await.map_err(db("build_request_delete"))?
                .rows_affected();
            if n > 0 {
                sqlx::query("DELETE FROM request_specs WHERE instance_uuid = $1")
                    .bind(uuid).execute(&mut *tx).await.map_err(db("request_spec_delete"))?;
                sqlx::query("DELETE FROM instance_mappings WHERE instance_uuid = $1")
                    .bind(uuid).execute(&mut *tx).await.map_err(db("instance_mapping_delete"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
            n > 0
        }))
    }

    /// Marks a mapping queued for delete (the instance is being deleted).
    pub async fn queue_for_delete(&self, uuid: &str) -> Result<(), ApiError> {
        self.landed.forget(uuid);
        on_pool!(self.pool(), p => sqlx::query(
            "UPDATE instance_mappings SET queued_for_delete = TRUE, updated_at = $1 WHERE instance_uuid = $2")
            .bind(Utc::now()).bind(uuid).execute(p).await.map_err(db("instance_mapping_queue_delete"))?.rows_affected());
        Ok(())
    }

    /// Undoes [`ComputeDb::queue_for_delete`] (a delete that could not be
    /// sent): the server counts in its project's quota again.
    pub async fn queue_for_delete_undo(&self, uuid: &str) -> Result<(), ApiError> {
        on_pool!(self.pool(), p => sqlx::query(
            "UPDATE instance_mappings SET queued_for_delete = FALSE, updated_at = $1 WHERE instance_uuid = $2")
            .bind(Utc::now()).bind(uuid).execute(p).await.map_err(db("instance_mapping_unqueue_delete"))?.rows_affected());
        Ok(())
    }

    /// `(host, zone)` of every host in an aggregate with an
    /// `availability_zone` key.
    pub async fn host_zones(&self) -> Result<Vec<(String, String)>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT h.host, m.value FROM aggregate_hosts h JOIN aggregate_metadata m \
             ON m.aggregate_id = h.aggregate_id AND m.key = 'availability_zone'")
            .fetch_all(p).await.map_err(db("host_zones"))?))
    }

    /// Counts of rows left for an instance in the API database (tests and
    /// diagnostics): build requests, request specs, mappings.
    pub async fn rows_for(&self, uuid: &str) -> Result<(i64, i64, i64), ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM build_requests WHERE instance_uuid = $1), \
             (SELECT COUNT(*) FROM request_specs WHERE instance_uuid = $1), \
             (SELECT COUNT(*) FROM instance_mappings WHERE instance_uuid = $1)")
            .bind(uuid).fetch_one(p).await.map_err(db("rows_for"))?))
    }
}

/// The key pair name a stored request spec (JSON) records, if any.
/// What the server views show of a request spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecView {
    /// `key_name`.
    pub key_name: Option<String>,
    /// The zone asked for at create (2.96 `pinned_availability_zone`).
    pub availability_zone: Option<String>,
    /// The flavor's extra specs at create (2.47).
    pub flavor_extra_specs: BTreeMap<String, String>,
    /// The scheduler hints given at create (2.100).
    pub scheduler_hints: BTreeMap<String, Value>,
    /// The image's properties as recorded at create or rebuild (2.98).
    pub image_properties: BTreeMap<String, String>,
}

impl RequestSpec {
    /// Whether the spec holds something the server views show at every
    /// microversion that has it, beyond what the instance row keeps (the
    /// key name is on the row) and image properties aside: a zone asked
    /// for, extra specs, hints ([`SpecView`]; `request_specs.view_fields`).
    pub fn view_fields(&self) -> bool {
        self.availability_zone.is_some()
            || self
                .flavor_extra_specs
                .as_ref()
                .is_some_and(|e| !e.is_empty())
            || !self.scheduler_hints.is_empty()
    }

    /// Whether the spec holds image properties, which the server views
    /// show from 2.98 (`request_specs.view_image_properties`: kept apart
    /// from [`Self::view_fields`] since most images have some, so that
    /// the views of older microversions need not read those specs).
    pub fn view_image_properties(&self) -> bool {
        !self.recorded_image_properties.is_empty()
    }
}

impl SpecView {
    fn of(spec: &str) -> Option<SpecView> {
        let s = serde_json::from_str::<RequestSpec>(spec).ok()?;
        Some(SpecView {
            key_name: s.key_name,
            availability_zone: s.availability_zone,
            flavor_extra_specs: s.flavor_extra_specs.unwrap_or_default(),
            scheduler_hints: s.scheduler_hints,
            image_properties: s.recorded_image_properties,
        })
    }
}

fn parse_build(s: &str) -> Result<BuildRequest, ApiError> {
    Ok(BuildRequest {
        instance: serde_json::from_str(s).map_err(ApiError::internal)?,
    })
}

/// The API database as the Compute API uses it.
#[derive(Debug, Clone)]
pub struct ComputeDb {
    api: ApiDb,
    /// The process that drives the builds this handle writes (its row in
    /// `api_schedulers`); `None`: builds are written without an owner and
    /// landed whoever owns them.
    owner: Option<std::sync::Arc<str>>,
    /// Landed servers' cells and projects, shared by the clones.
    landed: std::sync::Arc<LandedMappings>,
    /// What server creates read before the image, shared by the clones.
    create_reads: std::sync::Arc<CreateReadsCache>,
}

mod caches;
use caches::*;

// ------------------------------------------------------------ user APIs
// Key pairs, flavor management (extra specs, access), quotas.

/// A build's three rows on PostgreSQL, in one statement.
const INSERT_BUILD_PG: &str = "WITH b AS (INSERT INTO build_requests (instance_uuid, project_id, \
     user_id, instance, created_at, owner) VALUES ($1, $2, $3, $4, $5, $6)), \
     s AS (INSERT INTO request_specs (instance_uuid, spec, created_at, view_fields, \
     view_image_properties) VALUES ($1, $7, $8, $11, $12)) \
     INSERT INTO instance_mappings (instance_uuid, cell_id, project_id, user_id, created_at, vcpus, \
     memory_mb) VALUES ($1, NULL, $2, $3, $5, $9, $10)";

/// A project's instance usage counted from the API database: mappings not
/// queued for delete (whatever cell they are in, reachable or not) and the
/// sizes recorded with them: `(instances, cores, ram)`.
const INSTANCE_USAGE_SQL: &str = "SELECT COUNT(*), CAST(COALESCE(SUM(vcpus), 0) AS BIGINT), \
     CAST(COALESCE(SUM(memory_mb), 0) AS BIGINT) FROM instance_mappings \
     WHERE project_id = $1 AND NOT queued_for_delete";

mod user_apis;
pub use user_apis::*;

mod quota_rows;
use quota_rows::USER_INSTANCE_USAGE_SQL;

mod consoles;
pub use consoles::*;
