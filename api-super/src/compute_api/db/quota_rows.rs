//! The quota rows beside a project's own (`quotas`, in `user_apis`): the
//! per-user limits of a project (`project_user_quotas`) and the quota
//! classes (`quota_classes`; the `default` class overrides the configured
//! defaults, as Nova's), and the per-user usage the quota sets show and a
//! server create checks. A part of [`super`], which owns the database.

use super::*;

/// A user's instance usage counted as [`INSTANCE_USAGE_SQL`] counts the
/// project's, only the mappings of the user: `(instances, cores, ram)`.
pub(super) const USER_INSTANCE_USAGE_SQL: &str = "SELECT COUNT(*), \
     CAST(COALESCE(SUM(vcpus), 0) AS BIGINT), CAST(COALESCE(SUM(memory_mb), 0) AS BIGINT) \
     FROM instance_mappings WHERE project_id = $1 AND user_id = $2 AND NOT queued_for_delete";

/// `(resource, hard_limit)` rows, NULL read as -1 (unlimited).
fn limits_of(rows: Vec<(String, Option<i64>)>) -> Vec<(String, i64)> {
    rows.into_iter()
        .map(|(r, l)| (r, l.unwrap_or(-1)))
        .collect()
}

impl ComputeDb {
    /// A quota class's limits (`resource`, `hard_limit`).
    pub async fn quota_class(&self, class: &str) -> Result<Vec<(String, i64)>, ApiError> {
        let rows: Vec<(String, Option<i64>)> = on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT resource, hard_limit FROM quota_classes WHERE class_name = $1")
            .bind(class).fetch_all(p).await.map_err(db("quota_class_get"))?);
        Ok(limits_of(rows))
    }

    /// Sets limits of a quota class (created or updated), in one
    /// transaction.
    pub async fn quota_class_set(
        &self,
        class: &str,
        limits: &[(String, i64)],
    ) -> Result<(), ApiError> {
        let _forget = self.create_reads.forget_after();
        let now = Utc::now();
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            for (r, l) in limits {
                sqlx::query("INSERT INTO quota_classes (class_name, resource, hard_limit, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (class_name, resource) \
                     DO UPDATE SET hard_limit = excluded.hard_limit, updated_at = excluded.created_at")
                    .bind(class).bind(r).bind(l).bind(now)
                    .execute(&mut *tx).await.map_err(db("quota_class_set"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// A user's own limits in a project (`resource`, `hard_limit`).
    pub async fn user_quotas(
        &self,
        project: &str,
        user: &str,
    ) -> Result<Vec<(String, i64)>, ApiError> {
        let rows: Vec<(String, Option<i64>)> = on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT resource, hard_limit FROM project_user_quotas \
             WHERE project_id = $1 AND user_id = $2")
            .bind(project).bind(user).fetch_all(p).await.map_err(db("user_quota_get"))?);
        Ok(limits_of(rows))
    }

    /// Every user limit set in a project (`resource`, `hard_limit`), one
    /// row per user and resource: what Nova subtracts from the project's
    /// limits to find what is left to give out.
    pub async fn user_quotas_of_project(
        &self,
        project: &str,
    ) -> Result<Vec<(String, i64)>, ApiError> {
        let rows: Vec<(String, Option<i64>)> = on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT resource, hard_limit FROM project_user_quotas WHERE project_id = $1")
            .bind(project).fetch_all(p).await.map_err(db("user_quota_list"))?);
        Ok(limits_of(rows))
    }

    /// Sets a user's limits in a project, in one transaction.
    pub async fn user_quotas_set(
        &self,
        project: &str,
        user: &str,
        limits: &[(String, i64)],
    ) -> Result<(), ApiError> {
        let _forget = self.create_reads.forget_after();
        let now = Utc::now();
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            for (r, l) in limits {
                sqlx::query("INSERT INTO project_user_quotas (project_id, user_id, resource, \
                     hard_limit, created_at) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (user_id, project_id, resource) \
                     DO UPDATE SET hard_limit = excluded.hard_limit, updated_at = excluded.created_at")
                    .bind(project).bind(user).bind(r).bind(l).bind(now)
                    .execute(&mut *tx).await.map_err(db("user_quota_set"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// Deletes a user's limits in a project (back to the project's).
    pub async fn user_quotas_delete(&self, project: &str, user: &str) -> Result<(), ApiError> {
        let _forget = self.create_reads.forget_after();
        on_pool!(self.pool(), p => sqlx::query(
            "DELETE FROM project_user_quotas WHERE project_id = $1 AND user_id = $2")
            .bind(project).bind(user).execute(p).await.map_err(db("user_quota_delete"))?.rows_affected());
        Ok(())
    }

    /// `(instances, cores, ram)` in use by a user in a project (see
    /// [`USER_INSTANCE_USAGE_SQL`]).
    pub async fn user_instance_usage(
        &self,
        project: &str,
        user: &str,
    ) -> Result<(i64, i64, i64), ApiError> {
        Ok(
            on_pool!(self.pool(), p => sqlx::query_as(USER_INSTANCE_USAGE_SQL)
            .bind(project).bind(user).fetch_one(p).await.map_err(db("user_quota_usage"))?),
        )
    }

    /// Server groups of a user in a project.
    pub async fn user_server_group_count(
        &self,
        project: &str,
        user: &str,
    ) -> Result<i64, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT COUNT(*) FROM instance_groups WHERE project_id = $1 AND user_id = $2")
            .bind(project).bind(user).fetch_one(p).await.map_err(db("user_server_group_count"))?))
    }
}
