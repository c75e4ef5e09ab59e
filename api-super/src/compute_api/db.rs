//! ALL the Compute API's SQL on the API database: flavors, build requests,
//! request specs, instance mappings (the boot-time writes and the reads the
//! API needs) and availability zones of hosts (aggregate metadata).
//! Cell/host mapping administration stays in `cell_mapping::db::api`.
//!
//! Both backends through `cell_mapping::db::Pool`; each statement is written
//! once with `$N` binds and compiled for both by [`on_pool!`].

use cell_mapping::db::{InstanceFlavor, Pool};
use cell_mapping::ApiDb;
use chrono::{DateTime, Utc};
use migrations::BeginWrite;
use serde::{Deserialize, Serialize};

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

/// A flavor row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Flavor {
    /// Row id.
    pub id: i64,
    /// `flavorid` (the API id).
    pub flavorid: String,
    /// Name.
    pub name: String,
    /// RAM, MB.
    pub memory_mb: i64,
    /// VCPUs.
    pub vcpus: i64,
    /// Root disk, GB.
    pub root_gb: i64,
    /// Ephemeral disk, GB.
    pub ephemeral_gb: i64,
    /// Swap, MB.
    pub swap: i64,
    /// RX/TX factor.
    pub rxtx_factor: f64,
    /// Disabled.
    pub disabled: bool,
    /// Public.
    pub is_public: bool,
    /// Description.
    pub description: Option<String>,
}

impl Flavor {
    /// The copy stored with an instance.
    pub fn to_instance_flavor(&self) -> InstanceFlavor {
        InstanceFlavor {
            flavorid: self.flavorid.clone(),
            name: self.name.clone(),
            vcpus: self.vcpus,
            memory_mb: self.memory_mb,
            root_gb: self.root_gb,
            ephemeral_gb: self.ephemeral_gb,
            swap: self.swap,
        }
    }
}

/// A flavor to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFlavor {
    /// `flavorid`.
    pub flavorid: String,
    /// Name.
    pub name: String,
    /// RAM, MB.
    pub memory_mb: i64,
    /// VCPUs.
    pub vcpus: i64,
    /// Root disk, GB.
    pub root_gb: i64,
}

/// Nova's classic default flavors (as `nova-manage` used to create them).
pub fn default_flavors() -> Vec<NewFlavor> {
    [
        ("1", "m1.tiny", 512, 1, 1),
        ("2", "m1.small", 2048, 1, 20),
        ("3", "m1.medium", 4096, 2, 40),
        ("4", "m1.large", 8192, 4, 80),
        ("5", "m1.xlarge", 16384, 8, 160),
    ]
    .into_iter()
    .map(|(id, name, ram, vcpus, disk)| NewFlavor {
        flavorid: id.into(),
        name: name.into(),
        memory_mb: ram,
        vcpus,
        root_gb: disk,
    })
    .collect()
}

const FLAVOR_COLUMNS: &str = "id, flavorid, name, memory_mb, vcpus, root_gb, ephemeral_gb, swap, \
    rxtx_factor, disabled, is_public, description";

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
    /// Request id of the create.
    pub request_id: String,
    /// Global request id.
    pub global_request_id: String,
}

/// A build request row.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildRequest {
    /// The would-be instance.
    pub instance: BuildInstance,
}

impl ComputeDb {
    /// Wraps an API database handle.
    pub fn new(api: ApiDb) -> Self {
        Self { api }
    }

    fn pool(&self) -> &Pool {
        self.api.pool()
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
    /// unset) of a create, in one transaction.
    pub async fn create_builds(
        &self,
        builds: &[(BuildInstance, RequestSpec)],
    ) -> Result<(), ApiError> {
        let t = Utc::now();
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            for (b, spec) in builds {
                let inst = serde_json::to_string(b).map_err(ApiError::internal)?;
                let spec_json = serde_json::to_string(spec).map_err(ApiError::internal)?;
                sqlx::query("INSERT INTO build_requests (instance_uuid, project_id, user_id, instance, \
                     created_at) VALUES ($1, $2, $3, $4, $5)")
                    .bind(&b.uuid).bind(&b.project_id).bind(&b.user_id).bind(&inst).bind(b.created_at)
                    .execute(&mut *tx).await.map_err(db("build_request_insert"))?;
                sqlx::query("INSERT INTO request_specs (instance_uuid, spec, created_at) VALUES ($1, $2, $3)")
                    .bind(&b.uuid).bind(&spec_json).bind(t)
                    .execute(&mut *tx).await.map_err(db("request_spec_insert"))?;
                sqlx::query("INSERT INTO instance_mappings (instance_uuid, cell_id, project_id, user_id, \
                     created_at) VALUES ($1, NULL, $2, $3, $4)")
                    .bind(&b.uuid).bind(&b.project_id).bind(&b.user_id).bind(b.created_at)
                    .execute(&mut *tx).await.map_err(db("instance_mapping_insert"))?;
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

    /// The instance mapping of `uuid`: `(cell id, project id)`.
    pub async fn mapping(&self, uuid: &str) -> Result<Option<(Option<i64>, String)>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT cell_id, project_id FROM instance_mappings WHERE instance_uuid = $1")
            .bind(uuid).fetch_optional(p).await.map_err(db("instance_mapping_get"))?))
    }

    /// The build landed in cell `cell_id`: deletes the build request and
    /// points the mapping at the cell, in one transaction. False (nothing
    /// changed) when the build request was deleted meanwhile (the user
    /// deleted the server while it was being scheduled).
    pub async fn finish_build(&self, uuid: &str, cell_id: i64) -> Result<bool, ApiError> {
        Ok(on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = sqlx::query("DELETE FROM build_requests WHERE instance_uuid = $1")
                .bind(uuid).execute(&mut *tx).await.map_err(db("build_request_delete"))?
                .rows_affected();
            if n == 0 {
                tx.rollback().await.map_err(db("rollback"))?;
                false
            } else {
                sqlx::query("UPDATE instance_mappings SET cell_id = $1, updated_at = $2 \
                     WHERE instance_uuid = $3")
                    .bind(cell_id).bind(Utc::now()).bind(uuid)
                    .execute(&mut *tx).await.map_err(db("instance_mapping_set_cell"))?;
                tx.commit().await.map_err(db("commit"))?;
                true
            }
        }))
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
        on_pool!(self.pool(), p => sqlx::query(
            "UPDATE instance_mappings SET queued_for_delete = TRUE, updated_at = $1 WHERE instance_uuid = $2")
            .bind(Utc::now()).bind(uuid).execute(p).await.map_err(db("instance_mapping_queue_delete"))?.rows_affected());
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

fn parse_build(s: &str) -> Result<BuildRequest, ApiError> {
    Ok(BuildRequest {
        instance: serde_json::from_str(s).map_err(ApiError::internal)?,
    })
}

/// The API database as the Compute API uses it.
#[derive(Debug, Clone)]
pub struct ComputeDb {
    api: ApiDb,
}
