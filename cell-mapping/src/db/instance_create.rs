//! Writing a new instance row in a cell: what the super-conductor does
//! when a build lands there (or in cell0, in ERROR with its fault), with
//! its flavor, metadata, tags, `create` action and event in one
//! statement on PostgreSQL and one transaction on SQLite.

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::instances::InstanceFlavor;
use super::{with_pool, CellDb, Pool};
use crate::metrics::measured;
use crate::Error;

/// A fault written with an instance created in ERROR.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFault {
    /// HTTP-like code (500).
    pub code: i64,
    /// Message (cut to 255 characters).
    pub message: String,
    /// Details.
    pub details: String,
}

/// An instance row to create (what the super-conductor writes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewCellInstance {
    /// Instance uuid.
    pub uuid: String,
    /// Project.
    pub project_id: String,
    /// User.
    pub user_id: String,
    /// Display name.
    pub display_name: Option<String>,
    /// Flavor.
    pub flavor: InstanceFlavor,
    /// Image.
    pub image_ref: String,
    /// Chosen host and node (none in cell0).
    pub host: Option<String>,
    /// Node.
    pub node: Option<String>,
    /// Availability zone (requested or the host's).
    pub availability_zone: Option<String>,
    /// Creation time (the build request's, so listings do not reorder).
    pub created_at: DateTime<Utc>,
    /// Request id and global request id of the `create` action.
    pub request_id: String,
    /// Global request id.
    pub global_request_id: String,
    /// Reservation id (shared by the instances of one request).
    pub reservation_id: String,
    /// Index within the request.
    pub launch_index: i64,
    /// Set: the instance is created in ERROR with this fault.
    pub error: Option<NewFault>,
    /// Metadata given at create (key, value), written with the row.
    pub metadata: Vec<(String, String)>,
    /// `user_data` given at create (base64, as sent).
    pub user_data: Option<String>,
    /// `description` given at create (2.19; the name before it).
    pub description: Option<String>,
    /// The guest's hostname (2.90's `hostname`, else Nova's sanitized
    /// display name); `None`: the display name.
    pub hostname: Option<String>,
    /// Tags given at create (2.52), written with the row.
    pub tags: Vec<String>,
    /// The key pair's name given at create (`key_name`).
    pub key_name: Option<String>,
    /// Its public key (`key_data`).
    pub key_data: Option<String>,
    /// Whether the guest gets a config drive (`config_drive` `True`).
    pub config_drive: bool,
    /// `accessIPv4` and `accessIPv6` given at create.
    pub access_ip_v4: Option<String>,
    /// `accessIPv6`.
    pub access_ip_v6: Option<String>,
    /// `trusted_image_certificates` given at create (2.63), kept in
    /// `instance_extra.trusted_certs` as a JSON list.
    pub trusted_certs: Option<Vec<String>>,
    /// When the super-conductor started scheduling it: the `create`
    /// action gets upstream's `conductor_schedule_and_build_instances`
    /// event from then to now (Success, or Error with the fault).
    pub scheduled_from: Option<DateTime<Utc>>,
}

/// The super-conductor's event in a `create` action (upstream's name).
pub const EV_SCHEDULE_AND_BUILD: &str = "conductor_schedule_and_build_instances";

/// A new instance row (binds `$1` to `$19`, then `user_data`,
/// `display_description`, `hostname`, `key_name`, `key_data`,
/// `config_drive`, `access_ip_v4` and `access_ip_v6` as parameters `$n`
/// to `$n+7`; a `NULL` hostname is the display name).
fn insert_instance(n: usize) -> String {
    let (d, h, k, kd, cd, a4, a6) = (n + 1, n + 2, n + 3, n + 4, n + 5, n + 6, n + 7);
    format!(
        "INSERT INTO instances (uuid, project_id, user_id, display_name, \
         hostname, vm_state, task_state, power_state, vcpus, memory_mb, root_gb, ephemeral_gb, image_ref, \
         host, node, launched_on, availability_zone, reservation_id, launch_index, created_at, updated_at, \
         user_data, display_description, key_name, key_data, config_drive, access_ip_v4, access_ip_v6) \
         VALUES ($1, $2, $3, $4, COALESCE(${h}, $4), $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $13, $15, $16, \
         $17, $18, $19, ${n}, ${d}, ${k}, ${kd}, ${cd}, ${a4}, ${a6})"
    )
}

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |source| Error::Db { op, source }
}

impl CellDb {
    /// Creates the instance row, its flavor, its `create` action and (in
    /// ERROR) its fault, in one transaction. Building instances start in
    /// `building` / `scheduling`; failed ones in `error` with no task.
    /// Returns the new row's id (what tells this row from another one of
    /// the same uuid written later: [`CellDb::api_remove_unlanded_row`]).
    /// A row of that uuid already in this cell fails it with an error for
    /// which [`Error::is_duplicate`] holds.
    pub async fn create_api_instance(&self, n: &NewCellInstance) -> Result<i64, Error> {
        let (vm_state, task_state) = match n.error {
            None => (
                fabric::rpc::vm_state::BUILDING,
                Some(fabric::rpc::task_state::SCHEDULING),
            ),
            Some(_) => (fabric::rpc::vm_state::ERROR, None),
        };
        let flavor = serde_json::to_string(&n.flavor).unwrap_or_default();
        let trusted = n
            .trusted_certs
            .as_ref()
            .map(|c| serde_json::to_string(c).unwrap_or_default());
        let t = Utc::now();
        // The instance row's binds, $1 to $19, in both statements below.
        macro_rules! bind_instance {
            ($q:expr) => {
                $q.bind(&n.uuid)
                    .bind(&n.project_id)
                    .bind(&n.user_id)
                    .bind(&n.display_name)
                    .bind(vm_state)
                    .bind(task_state)
                    .bind(fabric::rpc::power_state::NOSTATE as i64)
                    .bind(n.flavor.vcpus)
                    .bind(n.flavor.memory_mb)
                    .bind(n.flavor.root_gb)
                    .bind(n.flavor.ephemeral_gb)
                    .bind(&n.image_ref)
                    .bind(&n.host)
                    .bind(&n.node)
                    .bind(&n.availability_zone)
                    .bind(&n.reservation_id)
                    .bind(n.launch_index)
                    .bind(n.created_at)
                    .bind(t)
            };
        }
        if let (Pool::Postgres(p), None) = (self.pool(), &n.error) {
            // A building instance on PostgreSQL: row, flavor, action and
            // its scheduling event in one statement (one round trip, no
            // BEGIN/COMMIT; the foreign keys are checked at its end).
            // Metadata given at create: one more insert, only when there is
            // some (a boot without any keeps the statement it had).
            // Tags likewise.
            let metadata = if n.metadata.is_empty() {
                ""
            } else {
                "m AS (INSERT INTO instance_metadata (instance_uuid, key, value, created_at) \
                 SELECT i.uuid, k.key, k.value, $19 FROM i, \
                 unnest($37::VARCHAR[], $38::VARCHAR[]) AS k (key, value)), "
            };
            let tags = if n.tags.is_empty() {
                ""
            } else {
                "t AS (INSERT INTO tags (resource_id, tag, created_at) \
                 SELECT i.uuid, t.tag, $19 FROM i, unnest($39::VARCHAR[]) AS t (tag)), "
            };
            let sql = format!(
                "WITH i AS ({} RETURNING uuid, id), {metadata}{tags}\
                 x AS (INSERT INTO instance_extra (instance_uuid, flavor, trusted_certs, created_at) \
                 SELECT uuid, $20, $36, $19 FROM i), \
                 a AS (INSERT INTO instance_actions (instance_uuid, action, request_id, \
                 global_request_id, user_id, project_id, start_time, created_at) \
                 SELECT uuid, $21, $22, $23, $2, $3, $24, $24 FROM i RETURNING id), \
                 e AS (INSERT INTO instance_actions_events (action_id, event, result, request_id, \
                 global_request_id, start_time, finish_time, created_at) \
                 SELECT id, $25, $26, $22, $23, $27, $19, $19 FROM a WHERE $27::TIMESTAMPTZ IS NOT NULL) \
                 SELECT id FROM i",
                insert_instance(28)
            );
            let (keys, values): (Vec<&str>, Vec<&str>) = n
                .metadata
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .unzip();
            let mut q = bind_instance!(sqlx::query_scalar::<_, i64>(&sql))
                .bind(&flavor)
                .bind(fabric::rpc::action::CREATE)
                .bind(&n.request_id)
                .bind(&n.global_request_id)
                .bind(n.scheduled_from.unwrap_or(t))
                .bind(EV_SCHEDULE_AND_BUILD)
                .bind(fabric::rpc::action::SUCCESS)
                .bind(n.scheduled_from)
                .bind(&n.user_data)
                .bind(&n.description)
                .bind(&n.hostname)
                .bind(&n.key_name)
                .bind(&n.key_data)
                .bind(n.config_drive.then_some("True"))
                .bind(&n.access_ip_v4)
                .bind(&n.access_ip_v6)
                .bind(&trusted);
            if !n.metadata.is_empty() || !n.tags.is_empty() {
                q = q.bind(keys).bind(values);
            }
            if !n.tags.is_empty() {
                q = q.bind(&n.tags);
            }
            return measured("api_instance_create", q.fetch_one(p)).await;
        }
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let id: i64 = measured("api_instance_insert",
                bind_instance!(sqlx::query_scalar(&format!("{} RETURNING id", insert_instance(20))))
                .bind(&n.user_data)
                .bind(&n.description)
                .bind(&n.hostname)
                .bind(&n.key_name)
                .bind(&n.key_data)
                .bind(n.config_drive.then_some("True"))
                .bind(&n.access_ip_v4)
                .bind(&n.access_ip_v6)
                .fetch_one(&mut *tx)).await?;
            for tag in &n.tags {
                measured("api_instance_tag_insert", sqlx::query(
                    "INSERT INTO tags (resource_id, tag, created_at) VALUES ($1, $2, $3)")
                    .bind(&n.uuid).bind(tag).bind(t)
                    .execute(&mut *tx)).await?;
            }
            for (key, value) in &n.metadata {
                measured("api_instance_metadata_insert", sqlx::query(
                    "INSERT INTO instance_metadata (instance_uuid, key, value, created_at) VALUES ($1, $2, $3, $4)")
                    .bind(&n.uuid).bind(key).bind(value).bind(t)
                    .execute(&mut *tx)).await?;
            }
            measured("api_instance_extra_insert", sqlx::query(
                "INSERT INTO instance_extra (instance_uuid, flavor, trusted_certs, created_at) \
                 VALUES ($1, $2, $3, $4)")
                .bind(&n.uuid).bind(&flavor).bind(&trusted).bind(t)
                .execute(&mut *tx)).await?;
            let action_id: i64 = measured("api_action_create", sqlx::query_scalar(
                "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                 user_id, project_id, start_time, finish_time, message, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $7) RETURNING id")
                .bind(&n.uuid).bind(fabric::rpc::action::CREATE).bind(&n.request_id)
                .bind(&n.global_request_id).bind(&n.user_id).bind(&n.project_id)
                .bind(n.scheduled_from.unwrap_or(t))
                .bind(n.error.as_ref().map(|_| t))
                .bind(n.error.as_ref().map(|_| fabric::rpc::action::ERROR))
                .fetch_one(&mut *tx)).await?;
            if let Some(from) = n.scheduled_from {
                let (result, traceback) = match &n.error {
                    None => (fabric::rpc::action::SUCCESS, None),
                    Some(f) => (fabric::rpc::action::ERROR, Some(format!("{}{}", f.message, f.details))),
                };
                measured("api_action_event_insert", sqlx::query(
                    "INSERT INTO instance_actions_events (action_id, event, result, traceback, \
                     request_id, global_request_id, start_time, finish_time, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)")
                    .bind(action_id).bind(EV_SCHEDULE_AND_BUILD).bind(result).bind(traceback)
                    .bind(&n.request_id).bind(&n.global_request_id).bind(from).bind(t)
                    .execute(&mut *tx)).await?;
            }
            if let Some(f) = &n.error {
                let message: String = f.message.chars().take(255).collect();
                measured("api_fault_insert", sqlx::query(
                    "INSERT INTO instance_faults (instance_uuid, code, message, details, created_at) \
                     VALUES ($1, $2, $3, $4, $5)")
                    .bind(&n.uuid).bind(f.code).bind(&message).bind(&f.details).bind(t)
                    .execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            id
        }))
    }
}
