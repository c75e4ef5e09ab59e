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

    /// Creates a group with its policy, in one transaction; returns its uuid.
    pub async fn server_group_create(&self, g: &NewServerGroup) -> Result<String, Error> {
        let uuid = uuid::Uuid::new_v4().to_string();
        let now = Utc::now();
        with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
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
        Ok(uuid)
    }

    /// Deletes a group with its policy and members, in one transaction;
    /// false when there is none.
    pub async fn server_group_delete(&self, uuid: &str) -> Result<bool, Error> {
        Ok(with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
            let id: Option<i64> = measured("server_group_get", sqlx::query_scalar(
                "SELECT id FROM instance_groups WHERE uuid = $1").bind(uuid)
                .fetch_optional(&mut *tx)).await?;
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
                measured("server_group_member_insert", sqlx::query(
                    "INSERT INTO instance_group_member (group_id, instance_uuid, created_at) \
                     VALUES ($1, $2, $3)")
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
