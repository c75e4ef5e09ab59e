//! Server groups on the API database (`instance_groups`,
//! `instance_group_policy`, `instance_group_member`): what
//! `os-server-groups` and the scheduler read and write, and the read of a
//! flavor's extra specs the scheduler needs.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::{placeholders, with_pool, ApiDb, CHUNK};
use crate::metrics::measured;
use crate::Error;

/// A server group with its policy and members.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerGroup {
    /// Row id.
    pub id: i64,
    /// UUID (the API id).
    pub uuid: String,
    /// Name.
    pub name: String,
    /// Owner.
    pub user_id: String,
    /// Project.
    pub project_id: String,
    /// `affinity`, `anti-affinity`, `soft-affinity`, `soft-anti-affinity`.
    pub policy: String,
    /// Rules (JSON object text, e.g. `{"max_server_per_host": 2}`).
    pub rules: Option<String>,
    /// Member instance uuids, in the order they joined; only servers
    /// that exist and are not being deleted (as Nova shows them).
    pub members: Vec<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// A group to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewServerGroup {
    /// Name.
    pub name: String,
    /// Owner.
    pub user_id: String,
    /// Project.
    pub project_id: String,
    /// Policy.
    pub policy: String,
    /// Rules (JSON object text).
    pub rules: Option<String>,
}

type GroupRow = (
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    DateTime<Utc>,
    Option<String>,
    Option<String>,
);

const GROUP_SELECT: &str = "SELECT g.id, g.uuid, g.name, g.user_id, g.project_id, g.created_at, \
    p.policy, p.rules FROM instance_groups g LEFT JOIN instance_group_policy p ON p.group_id = g.id";

/// A project's server groups (`server_groups` usage): `$1` the project.
const GROUP_COUNT_SQL: &str = "SELECT COUNT(*) FROM instance_groups WHERE project_id = $1";

/// The groups of one user (`$2`) in a project (`$1`).
const GROUP_COUNT_BY_USER_SQL: &str =
    "SELECT COUNT(*) FROM instance_groups WHERE project_id = $1 AND user_id = $2";

/// Adds one member: `$1` group id, `$2` instance uuid, `$3` created at.
/// Also run by the Compute API's server create, in the transaction that
/// writes the builds.
pub const MEMBER_INSERT_SQL: &str =
    "INSERT INTO instance_group_member (group_id, instance_uuid, created_at) VALUES ($1, $2, $3)";

/// The `server_group_members` usage Nova checks: the members of group `$1`
/// that belong to user `$2` and are not being deleted (a deleted server's
/// mapping is queued for delete, a build deleted before scheduling has no
/// mapping left), counted in the API database like instances.
pub const MEMBER_COUNT_BY_USER_SQL: &str = "SELECT COUNT(*) FROM instance_group_member m \
    JOIN instance_mappings im ON im.instance_uuid = m.instance_uuid \
    AND NOT im.queued_for_delete AND im.user_id = $2 WHERE m.group_id = $1";

/// Locks group `$1`'s row (PostgreSQL; SQLite's write transaction already
/// serializes): its member count and its member inserts, or its delete,
/// happen one after the other.
pub fn group_lock_sql(pg: bool) -> &'static str {
    if pg {
        "SELECT id FROM instance_groups WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT id FROM instance_groups WHERE id = $1"
    }
}

fn for_update(pg: bool) -> &'static str {
    if pg {
        " FOR UPDATE"
    } else {
        ""
    }
}

impl ApiDb {
    async fn groups_where(&self, cond: &str, bind: &str) -> Result<Vec<ServerGroup>, Error> {
        let sql = format!("{GROUP_SELECT} WHERE {cond} ORDER BY g.id");
        let rows: Vec<GroupRow> = with_pool!(self.pool(), p => {
            measured("server_group_list", sqlx::query_as(&sql).bind(bind).fetch_all(p)).await?
        });
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let mut members: Vec<(i64, String)> = Vec::new();
        for chunk in ids.chunks(CHUNK) {
            let sql = format!(
                "SELECT m.group_id, m.instance_uuid FROM instance_group_member m \
                 JOIN instance_mappings im ON im.instance_uuid = m.instance_uuid \
                 AND NOT im.queued_for_delete WHERE m.group_id IN ({}) ORDER BY m.id",
                placeholders(1, chunk.len())
            );
            let got: Vec<(i64, String)> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for id in chunk {
                    q = q.bind(*id);
                }
                measured("server_group_members", q.fetch_all(p)).await?
            });
            members.extend(got);
        }
        Ok(rows
            .into_iter()
            .map(
                |(id, uuid, name, user_id, project_id, created_at, policy, rules)| ServerGroup {
                    id,
                    uuid,
                    name: name.unwrap_or_default(),
                    user_id: user_id.unwrap_or_default(),
                    project_id: project_id.unwrap_or_default(),
                    policy: policy.unwrap_or_default(),
                    rules,
                    members: members
                        .iter()
                        .filter(|(g, _)| *g == id)
                        .map(|(_, m)| m.clone())
                        .collect(),
                    created_at,
                },
            )
            .collect())
    }

    /// The groups of `project` (or of every project).
    pub async fn server_groups(&self, project: Option<&str>) -> Result<Vec<ServerGroup>, Error> {
        self.groups_where("($1 = '' OR g.project_id = $1)", project.unwrap_or(""))
            .await
    }

    /// One group.
    pub async fn server_group(&self, uuid: &str) -> Result<Option<ServerGroup>, Error> {
        Ok(self.groups_where("g.uuid = $1", uuid).await?.pop())
    }

    /// The group `instance` is a member of.
    pub async fn instance_server_group(
        &self,
        instance: &str,
    ) -> Result<Option<ServerGroup>, Error> {
        Ok(self
            .groups_where(
                "g.id IN (SELECT group_id FROM instance_group_member WHERE instance_uuid = $1)",
                instance,
            )
            .await?
            .pop())
    }

    /// Creates a group with its policy, in one transaction; returns its
    /// uuid. With `limit` (`server_groups`, -1: unlimited) the project's
    /// groups are counted under the project's quota lock
    /// ([`super::QUOTA_LOCK_INSERT`]) in the same transaction: `None`, and
    /// nothing written, when the project already has `limit` groups.
    pub async fn server_group_create(
        &self,
        g: &NewServerGroup,
        limit: Option<i64>,
    ) -> Result<Option<String>, Error> {
        self.server_group_create_limited(g, limit, None).await
    }

    /// As [`Self::server_group_create`], also holding the creating user
    /// to `user_limit` (Nova's per-user `server_groups`, -1: unlimited):
    /// the user's groups in the project are counted under the same lock.
    pub async fn server_group_create_limited(
        &self,
        g: &NewServerGroup,
        limit: Option<i64>,
        user_limit: Option<i64>,
    ) -> Result<Option<String>, Error> {
        let uuid = uuid::Uuid::new_v4().to_string();
        let now = Utc::now();
        let pg = matches!(self.pool(), super::Pool::Postgres(_));
        let scope = format!("project:{}", g.project_id);
        let limit = limit.filter(|l| *l >= 0);
        let user_limit = user_limit.filter(|l| *l >= 0);
        with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
            if limit.is_some() || user_limit.is_some() {
                measured("quota_lock_insert", sqlx::query(super::QUOTA_LOCK_INSERT)
                    .bind(&scope).execute(&mut *tx)).await?;
                measured("quota_lock", sqlx::query(super::quota_lock_sql(pg))
                    .bind(&scope).fetch_optional(&mut *tx)).await?;
            }
            if let Some(limit) = limit {
                let n: i64 = measured("server_group_count", sqlx::query_scalar(GROUP_COUNT_SQL)
                    .bind(&g.project_id).fetch_one(&mut *tx)).await?;
                if n + 1 > limit {
                    measured("rollback", tx.rollback()).await?;
                    return Ok(None);
                }
            }
            if let Some(limit) = user_limit {
                let n: i64 = measured("server_group_count_by_user",
                    sqlx::query_scalar(GROUP_COUNT_BY_USER_SQL)
                    .bind(&g.project_id).bind(&g.user_id).fetch_one(&mut *tx)).await?;
                if n + 1 > limit {
                    measured("rollback", tx.rollback()).await?;
                    return Ok(None);
                }
            }
            let id: i64 = measured("server_group_insert", sqlx::query_scalar(
                "INSERT INTO instance_groups (uuid, name, user_id, project_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id")
                .bind(&uuid).bind(&g.name).bind(&g.user_id).bind(&g.project_id).bind(now)
                .fetch_one(&mut *tx)).await?;
            measured("server_group_policy_insert", sqlx::query(
                "INSERT INTO instance_group_policy (group_id, policy, rules, created_at) \
                 VALUES ($1, $2, $3, $4)")
                .bind(id).bind(&g.policy).bind(g.rules.as_deref()).bind(now)
                .execute(&mut *tx)).await?;
            measured("commit", tx.commit()).await?;
        });
        Ok(Some(uuid))
    }

    /// How many server groups `project` has (its `server_groups` usage).
    pub async fn server_group_count(&self, project: &str) -> Result<i64, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("server_group_count", sqlx::query_scalar(GROUP_COUNT_SQL)
                .bind(project).fetch_one(p)).await?
        }))
    }

    /// Deletes a group with its policy and members, in one transaction;
    /// false when there is none.
    pub async fn server_group_delete(&self, uuid: &str) -> Result<bool, Error> {
        let pg = matches!(self.pool(), super::Pool::Postgres(_));
        Ok(with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
            let id: Option<i64> = measured("server_group_get", sqlx::query_scalar(
                &format!("SELECT id FROM instance_groups WHERE uuid = $1{}", for_update(pg)))
                .bind(uuid).fetch_optional(&mut *tx)).await?;
            match id {
                None => false,
                Some(id) => {
                    measured("server_group_members_delete", sqlx::query(
                        "DELETE FROM instance_group_member WHERE group_id = $1")
                        .bind(id).execute(&mut *tx)).await?;
                    measured("server_group_policy_delete", sqlx::query(
                        "DELETE FROM instance_group_policy WHERE group_id = $1")
                        .bind(id).execute(&mut *tx)).await?;
                    measured("server_group_delete", sqlx::query(
                        "DELETE FROM instance_groups WHERE id = $1")
                        .bind(id).execute(&mut *tx)).await?;
                    measured("commit", tx.commit()).await?;
                    true
                }
            }
        }))
    }

    /// Adds instances to a group, in one transaction; false when the group
    /// is gone.
    pub async fn server_group_add_members(
        &self,
        group_id: i64,
        instances: &[String],
    ) -> Result<bool, Error> {
        let now = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
            let exists: Option<i64> = measured("server_group_get", sqlx::query_scalar(
                "SELECT id FROM instance_groups WHERE id = $1").bind(group_id)
                .fetch_optional(&mut *tx)).await?;
            if exists.is_none() {
                return Ok(false);
            }
            for i in instances {
                measured("server_group_member_insert", sqlx::query(MEMBER_INSERT_SQL)
                    .bind(group_id).bind(i).bind(now).execute(&mut *tx)).await?;
            }
            measured("commit", tx.commit()).await?;
            true
        }))
    }

    /// Removes instances from every group.
    pub async fn server_group_remove_members(&self, instances: &[String]) -> Result<(), Error> {
        for chunk in instances.chunks(CHUNK) {
            let sql = format!(
                "DELETE FROM instance_group_member WHERE instance_uuid IN ({})",
                placeholders(1, chunk.len())
            );
            with_pool!(self.pool(), p => {
                let mut q = sqlx::query(&sql);
                for i in chunk {
                    q = q.bind(i);
                }
                measured("server_group_members_remove", q.execute(p)).await?;
            });
        }
        Ok(())
    }

    /// The extra specs of the flavor `flavorid`.
    pub async fn flavor_extra_specs(
        &self,
        flavorid: &str,
    ) -> Result<BTreeMap<String, String>, Error> {
        let rows: Vec<(String, Option<String>)> = with_pool!(self.pool(), p => {
            measured("flavor_extra_specs", sqlx::query_as(
                "SELECT e.key, e.value FROM flavor_extra_specs e JOIN flavors f ON f.id = e.flavor_id \
                 WHERE f.flavorid = $1").bind(flavorid).fetch_all(p)).await?
        });
        Ok(rows
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or_default()))
            .collect())
    }
}
