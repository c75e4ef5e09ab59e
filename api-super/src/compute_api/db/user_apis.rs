//! The user APIs' SQL on the API database: key pairs, flavor management
//! (extra specs, access), quota limits and usage checked at create, and
//! server group joins. A part of [`super`], which owns the database.

use super::*;

/// The instance limits a create is checked against (-1: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceLimits {
    /// `instances`.
    pub instances: i64,
    /// `cores`.
    pub cores: i64,
    /// `ram` (MB).
    pub ram: i64,
    /// The creating user's own limits (Nova's per-user quotas), when the
    /// user has one of `instances`, `cores`, `ram` set: checked against
    /// the user's usage beside the project's.
    pub user: Option<UserLimits>,
}

/// A user's `instances`, `cores`, `ram` limits (-1: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserLimits {
    /// `instances`.
    pub instances: i64,
    /// `cores`.
    pub cores: i64,
    /// `ram` (MB).
    pub ram: i64,
}

impl UserLimits {
    /// As [`InstanceLimits::check`], against the user's usage.
    pub fn check(&self, used: (i64, i64, i64), want: (i64, i64, i64)) -> Result<(), ApiError> {
        check_limits([self.instances, self.cores, self.ram], used, want)
    }

    /// As [`InstanceLimits::fit`], beside the user's usage.
    pub fn fit(&self, used: (i64, i64, i64), each: (i64, i64, i64)) -> i64 {
        fit_limits([self.instances, self.cores, self.ram], used, each)
    }
}

fn fit_limits(limits: [i64; 3], used: (i64, i64, i64), each: (i64, i64, i64)) -> i64 {
    [
        (limits[0], used.0, each.0),
        (limits[1], used.1, each.1),
        (limits[2], used.2, each.2),
    ]
    .iter()
    .filter(|(limit, _, per)| *limit >= 0 && *per > 0)
    .map(|(limit, u, per)| ((limit - u) / per).max(0))
    .min()
    .unwrap_or(i64::MAX)
}

fn check_limits(
    limits: [i64; 3],
    used: (i64, i64, i64),
    want: (i64, i64, i64),
) -> Result<(), ApiError> {
    let rows = [
        ("instances", limits[0], used.0, want.0),
        ("cores", limits[1], used.1, want.1),
        ("ram", limits[2], used.2, want.2),
    ];
    let overs: Vec<_> = rows
        .iter()
        .filter(|(_, limit, u, w)| *limit >= 0 && u + w > *limit)
        .collect();
    if let Some((_, limit, u, w)) = overs.first() {
        let names: Vec<&str> = overs.iter().map(|o| o.0).collect();
        let names = names.join(", ");
        return Err(ApiError::Forbidden(format!(
            "Quota exceeded for {names}: Requested {w}, but already used {u} of {limit} {names}"
        )));
    }
    Ok(())
}

impl InstanceLimits {
    /// Every limit is -1: a create needs no count (nor the project's lock).
    pub fn unlimited(&self) -> bool {
        self.instances < 0
            && self.cores < 0
            && self.ram < 0
            && self
                .user
                .is_none_or(|u| u.instances < 0 && u.cores < 0 && u.ram < 0)
    }

    /// How many more instances of `each` (instances, cores, ram of one)
    /// fit beside `used` (`i64::MAX` when nothing limits them).
    pub fn fit(&self, used: (i64, i64, i64), each: (i64, i64, i64)) -> i64 {
        fit_limits([self.instances, self.cores, self.ram], used, each)
    }

    /// Nova's 403 when `used + want` exceeds a limit (first resource over,
    /// in the order instances, cores, ram, named as Nova names them).
    pub fn check(&self, used: (i64, i64, i64), want: (i64, i64, i64)) -> Result<(), ApiError> {
        check_limits([self.instances, self.cores, self.ram], used, want)
    }
}

/// The server group a create joins, with the `server_group_members` limit
/// of the creating project (-1: unlimited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupJoin {
    /// The group's row id.
    pub id: i64,
    /// Its uuid (for messages).
    pub uuid: String,
    /// `server_group_members`.
    pub limit: i64,
}

impl GroupJoin {
    /// Nova's 403 when `members` (the user's members of the group) plus
    /// `want` new ones exceed the limit.
    pub fn check(&self, members: i64, want: i64) -> Result<(), ApiError> {
        if self.limit >= 0 && members + want > self.limit {
            return Err(ApiError::Forbidden(
                "Quota exceeded, too many servers in group".into(),
            ));
        }
        Ok(())
    }
}

/// A key pair row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct KeyPair {
    /// Row id.
    pub id: i64,
    /// Owner.
    pub user_id: String,
    /// Name (unique per user).
    pub name: String,
    /// `ssh` or `x509`.
    #[sqlx(rename = "type")]
    pub kind: String,
    /// Fingerprint.
    pub fingerprint: Option<String>,
    /// Public key.
    pub public_key: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last update.
    pub updated_at: Option<DateTime<Utc>>,
}

const KEYPAIR_COLUMNS: &str =
    "id, user_id, name, type, fingerprint, public_key, created_at, updated_at";

/// A flavor to create through the API (every column).
#[derive(Debug, Clone, PartialEq)]
pub struct FlavorSpec {
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
    /// Ephemeral disk, GB.
    pub ephemeral_gb: i64,
    /// Swap, MB.
    pub swap: i64,
    /// RX/TX factor.
    pub rxtx_factor: f64,
    /// Public.
    pub is_public: bool,
    /// Description.
    pub description: Option<String>,
}

fn unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

impl ComputeDb {
    // ---------------------------------------------------------- key pairs

    /// Creates a key pair for `user` unless that user already has
    /// `key_pairs_limit` of them (-1: unlimited) — checked under the user's
    /// quota lock in the same transaction. 409 on a duplicate name.
    pub async fn keypair_create(
        &self,
        user: &str,
        name: &str,
        kind: &str,
        fingerprint: &str,
        public_key: &str,
        key_pairs_limit: i64,
    ) -> Result<KeyPair, ApiError> {
        let pg = self.is_postgres();
        let now = Utc::now();
        let scope = format!("user:{user}");
        let sql = format!(
            "INSERT INTO key_pairs (user_id, name, type, fingerprint, public_key, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {KEYPAIR_COLUMNS}"
        );
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            sqlx::query(QUOTA_LOCK_INSERT)
                .bind(&scope).execute(&mut *tx).await.map_err(db("quota_lock_insert"))?;
            sqlx::query(quota_lock_sql(pg)).bind(&scope)
                .fetch_optional(&mut *tx).await.map_err(db("quota_lock"))?;
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM key_pairs WHERE user_id = $1")
                .bind(user).fetch_one(&mut *tx).await.map_err(db("keypair_count"))?;
            // Refusals roll back at once: the user's lock goes now, not
            // when the dropped transaction's connection is next used.
            if key_pairs_limit >= 0 && n + 1 > key_pairs_limit {
                tx.rollback().await.map_err(db("rollback"))?;
                return Err(ApiError::Forbidden("Quota exceeded, too many key pairs.".into()));
            }
            let exists: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM key_pairs WHERE user_id = $1 AND name = $2")
                .bind(user).bind(name).fetch_optional(&mut *tx).await.map_err(db("keypair_get"))?;
            if exists.is_some() {
                tx.rollback().await.map_err(db("rollback"))?;
                return Err(ApiError::Conflict(format!("Key pair '{name}' already exists.")));
            }
            let row: KeyPair = match sqlx::query_as(&sql)
                .bind(user).bind(name).bind(kind).bind(fingerprint).bind(public_key).bind(now)
                .fetch_one(&mut *tx).await {
                Ok(r) => r,
                Err(e) if unique_violation(&e) => {
                    return Err(ApiError::Conflict(format!("Key pair '{name}' already exists.")))
                }
                Err(e) => return Err(db("keypair_insert")(e)),
            };
            tx.commit().await.map_err(db("commit"))?;
            Ok(row)
        })
    }

    /// A user's key pairs by name, after `marker` (a name), at most `limit`.
    pub async fn keypairs(
        &self,
        user: &str,
        marker: Option<&str>,
        limit: i64,
    ) -> Result<Vec<KeyPair>, ApiError> {
        let sql = format!(
            "SELECT {KEYPAIR_COLUMNS} FROM key_pairs WHERE user_id = $1 AND name > $2 \
             ORDER BY name LIMIT $3"
        );
        Ok(on_pool!(self.pool(), p => sqlx::query_as(&sql)
            .bind(user).bind(marker.unwrap_or("")).bind(limit)
            .fetch_all(p).await.map_err(db("keypair_list"))?))
    }

    /// One key pair of a user.
    pub async fn keypair(&self, user: &str, name: &str) -> Result<Option<KeyPair>, ApiError> {
        let sql =
            format!("SELECT {KEYPAIR_COLUMNS} FROM key_pairs WHERE user_id = $1 AND name = $2");
        Ok(on_pool!(self.pool(), p => sqlx::query_as(&sql)
            .bind(user).bind(name).fetch_optional(p).await.map_err(db("keypair_get"))?))
    }

    /// Deletes a key pair; false when there was none.
    pub async fn keypair_delete(&self, user: &str, name: &str) -> Result<bool, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query(
            "DELETE FROM key_pairs WHERE user_id = $1 AND name = $2")
            .bind(user).bind(name).execute(p).await.map_err(db("keypair_delete"))?
            .rows_affected())
            > 0)
    }

    /// How many key pairs a user has.
    pub async fn keypair_count(&self, user: &str) -> Result<i64, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT COUNT(*) FROM key_pairs WHERE user_id = $1")
            .bind(user).fetch_one(p).await.map_err(db("keypair_count"))?))
    }

    // ------------------------------------------------------------ flavors

    /// Flavors `project` may see (Nova's rules): with `is_public`
    /// `Some(true)` the public ones and the private ones `project` has
    /// access to; `Some(false)` the private ones only; `None` all.
    /// Disabled flavors only with `include_disabled`.
    pub async fn flavors_for(
        &self,
        project: &str,
        is_public: Option<bool>,
        include_disabled: bool,
    ) -> Result<Vec<Flavor>, ApiError> {
        let mode: i64 = match is_public {
            Some(true) => 1,
            Some(false) => 2,
            None => 0,
        };
        let sql = format!(
            "SELECT {FLAVOR_COLUMNS} FROM flavors f WHERE ($2 OR NOT f.disabled) AND ( $3 = 0 \
             OR ($3 = 1 AND (f.is_public OR EXISTS (SELECT 1 FROM flavor_projects fp \
                 WHERE fp.flavor_id = f.id AND fp.project_id = $1))) \
             OR ($3 = 2 AND NOT f.is_public)) ORDER BY f.memory_mb, f.flavorid"
        );
        Ok(on_pool!(self.pool(), p => sqlx::query_as(&sql)
            .bind(project).bind(include_disabled).bind(mode)
            .fetch_all(p).await.map_err(db("flavor_list"))?))
    }

    /// One flavor by API id as `project` may see it: public, or private
    /// with access for `project`, or any for an admin.
    pub async fn flavor_visible(
        &self,
        flavorid: &str,
        project: &str,
        admin: bool,
    ) -> Result<Option<Flavor>, ApiError> {
        let sql = format!("SELECT {FLAVOR_COLUMNS} {FLAVOR_VISIBLE}");
        Ok(on_pool!(self.pool(), p => sqlx::query_as(&sql)
            .bind(flavorid).bind(project).bind(admin)
            .fetch_optional(p).await.map_err(db("flavor_get"))?))
    }

    /// The flavor `flavorid` if `project` may use it (`admin` sees every
    /// flavor), with its extra specs and the project's quota overrides:
    /// what a server create needs from the API database before the image,
    /// in one statement (`None`: no such flavor for the project).
    pub async fn flavor_for_create(
        &self,
        flavorid: &str,
        project: &str,
        admin: bool,
    ) -> Result<Option<CreateReads>, ApiError> {
        let key = (flavorid.to_owned(), project.to_owned(), admin);
        if let Some(hit) = self.create_reads.get(&key) {
            return Ok(Some(hit));
        }
        let writes_before = self.create_reads.writes();
        let sql = format!(
            "WITH f AS (SELECT {FLAVOR_COLUMNS} {FLAVOR_VISIBLE}) \
             SELECT f.*, 's' AS kind, e.key AS item, \
             e.value AS spec_value, CAST(NULL AS BIGINT) AS hard_limit \
             FROM f LEFT JOIN flavor_extra_specs e ON e.flavor_id = f.id \
             UNION ALL SELECT f.*, 'q', q.resource, NULL, q.hard_limit \
             FROM f JOIN quotas q ON q.project_id = $2 \
             UNION ALL SELECT f.*, 'c', c.resource, NULL, c.hard_limit \
             FROM f JOIN quota_classes c ON c.class_name = 'default' \
             UNION ALL SELECT f.*, 'u', u.resource, u.user_id, u.hard_limit \
             FROM f JOIN project_user_quotas u ON u.project_id = $2"
        );
        let rows: Vec<FlavorCreateRow> = on_pool!(self.pool(), p =>
            sqlx::query_as(&sql).bind(flavorid).bind(project).bind(admin)
            .fetch_all(p).await.map_err(db("flavor_for_create"))?);
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let mut out = CreateReads {
            flavor: first.flavor.clone(),
            extra_specs: BTreeMap::new(),
            quotas: Vec::new(),
            class_defaults: Vec::new(),
            user_quotas: Vec::new(),
        };
        for r in rows {
            match (r.kind.as_str(), r.item) {
                ("s", Some(k)) => {
                    out.extra_specs.insert(k, r.spec_value.unwrap_or_default());
                }
                ("q", Some(res)) => out.quotas.push((res, r.hard_limit.unwrap_or(-1))),
                ("c", Some(res)) => out.class_defaults.push((res, r.hard_limit.unwrap_or(-1))),
                ("u", Some(res)) => out.user_quotas.push((
                    r.spec_value.unwrap_or_default(),
                    res,
                    r.hard_limit.unwrap_or(-1),
                )),
                _ => {}
            }
        }
        self.create_reads.put(key, &out, writes_before);
        Ok(Some(out))
    }

    /// Creates a flavor; 409 with Nova's message when its id or name is
    /// taken.
    pub async fn flavor_create(&self, f: &FlavorSpec) -> Result<Flavor, ApiError> {
        let _forget = self.create_reads.forget_after();
        let sql = format!(
            "INSERT INTO flavors (flavorid, name, memory_mb, vcpus, root_gb, ephemeral_gb, swap, \
             rxtx_factor, is_public, description, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING {FLAVOR_COLUMNS}"
        );
        let taken = |by_id: bool| {
            if by_id {
                ApiError::Conflict(format!("Flavor with ID {} already exists.", f.flavorid))
            } else {
                ApiError::Conflict(format!("Flavor with name {} already exists.", f.name))
            }
        };
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let clash: Option<(String, String)> = sqlx::query_as(
                "SELECT flavorid, name FROM flavors WHERE flavorid = $1 OR name = $2 LIMIT 1")
                .bind(&f.flavorid).bind(&f.name).fetch_optional(&mut *tx).await
                .map_err(db("flavor_clash"))?;
            if let Some((id, _)) = clash {
                return Err(taken(id == f.flavorid));
            }
            let row: Flavor = match sqlx::query_as(&sql)
                .bind(&f.flavorid).bind(&f.name).bind(f.memory_mb).bind(f.vcpus).bind(f.root_gb)
                .bind(f.ephemeral_gb).bind(f.swap).bind(f.rxtx_factor).bind(f.is_public)
                .bind(&f.description).bind(Utc::now())
                .fetch_one(&mut *tx).await {
                Ok(r) => r,
                Err(e) if unique_violation(&e) => {
                    let by_name = e.to_string().contains("name");
                    return Err(taken(!by_name));
                }
                Err(e) => return Err(db("flavor_insert")(e)),
            };
            tx.commit().await.map_err(db("commit"))?;
            Ok(row)
        })
    }

    /// Deletes a flavor with its extra specs and access list; false when
    /// there was none.
    pub async fn flavor_delete(&self, flavorid: &str) -> Result<bool, ApiError> {
        let _forget = self.create_reads.forget_after();
        Ok(on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let id: Option<i64> = sqlx::query_scalar("SELECT id FROM flavors WHERE flavorid = $1")
                .bind(flavorid).fetch_optional(&mut *tx).await.map_err(db("flavor_get"))?;
            if let Some(id) = id {
                sqlx::query("DELETE FROM flavor_extra_specs WHERE flavor_id = $1")
                    .bind(id).execute(&mut *tx).await.map_err(db("flavor_extra_specs_delete"))?;
                sqlx::query("DELETE FROM flavor_projects WHERE flavor_id = $1")
                    .bind(id).execute(&mut *tx).await.map_err(db("flavor_projects_delete"))?;
                sqlx::query("DELETE FROM flavors WHERE id = $1")
                    .bind(id).execute(&mut *tx).await.map_err(db("flavor_delete"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
            id.is_some()
        }))
    }

    /// Sets a flavor's description; false when there is no such flavor.
    pub async fn flavor_set_description(
        &self,
        flavorid: &str,
        description: Option<&str>,
    ) -> Result<bool, ApiError> {
        let _forget = self.create_reads.forget_after();
        Ok(on_pool!(self.pool(), p => sqlx::query(
            "UPDATE flavors SET description = $1, updated_at = $2 WHERE flavorid = $3")
            .bind(description).bind(Utc::now()).bind(flavorid)
            .execute(p).await.map_err(db("flavor_update"))?.rows_affected())
            > 0)
    }

    /// Extra specs of flavors by row id.
    pub async fn extra_specs(
        &self,
        flavor_ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, std::collections::BTreeMap<String, String>>, ApiError>
    {
        let mut out: std::collections::HashMap<i64, std::collections::BTreeMap<String, String>> =
            Default::default();
        if flavor_ids.is_empty() {
            return Ok(out);
        }
        let list = flavor_ids
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let sql = format!(
            "SELECT flavor_id, key, COALESCE(value, '') FROM flavor_extra_specs \
             WHERE flavor_id IN ({list}) ORDER BY key"
        );
        let rows: Vec<(i64, String, String)> = on_pool!(self.pool(), p => sqlx::query_as(&sql)
            .fetch_all(p).await.map_err(db("flavor_extra_specs_get"))?);
        for (id, k, v) in rows {
            out.entry(id).or_default().insert(k, v);
        }
        Ok(out)
    }

    /// Creates or updates extra specs of a flavor (row id), in one
    /// transaction.
    pub async fn extra_specs_set(
        &self,
        flavor_id: i64,
        specs: &[(String, String)],
    ) -> Result<(), ApiError> {
        let _forget = self.create_reads.forget_after();
        let now = Utc::now();
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            for (k, v) in specs {
                sqlx::query("INSERT INTO flavor_extra_specs (flavor_id, key, value, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (flavor_id, key) \
                     DO UPDATE SET value = excluded.value, updated_at = excluded.created_at")
                    .bind(flavor_id).bind(k).bind(v).bind(now)
                    .execute(&mut *tx).await.map_err(db("flavor_extra_spec_set"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// Deletes one extra spec; false when there was none.
    pub async fn extra_spec_delete(&self, flavor_id: i64, key: &str) -> Result<bool, ApiError> {
        let _forget = self.create_reads.forget_after();
        Ok(on_pool!(self.pool(), p => sqlx::query(
            "DELETE FROM flavor_extra_specs WHERE flavor_id = $1 AND key = $2")
            .bind(flavor_id).bind(key).execute(p).await.map_err(db("flavor_extra_spec_delete"))?
            .rows_affected())
            > 0)
    }

    /// Projects with access to a flavor (row id).
    pub async fn flavor_projects(&self, flavor_id: i64) -> Result<Vec<String>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_scalar(
            "SELECT project_id FROM flavor_projects WHERE flavor_id = $1 ORDER BY project_id")
            .bind(flavor_id).fetch_all(p).await.map_err(db("flavor_projects_get"))?))
    }

    /// Gives `project` access to a flavor; false when it had it already.
    pub async fn flavor_access_add(&self, flavor_id: i64, project: &str) -> Result<bool, ApiError> {
        let _forget = self.create_reads.forget_after();
        let r = on_pool!(self.pool(), p => sqlx::query(
            "INSERT INTO flavor_projects (flavor_id, project_id, created_at) VALUES ($1, $2, $3)")
            .bind(flavor_id).bind(project).bind(Utc::now()).execute(p).await.map(|_| ()));
        match r {
            Ok(()) => Ok(true),
            Err(e) if unique_violation(&e) => Ok(false),
            Err(e) => Err(db("flavor_access_add")(e)),
        }
    }

    /// Removes `project`'s access to a flavor; false when it had none.
    pub async fn flavor_access_remove(
        &self,
        flavor_id: i64,
        project: &str,
    ) -> Result<bool, ApiError> {
        let _forget = self.create_reads.forget_after();
        Ok(on_pool!(self.pool(), p => sqlx::query(
            "DELETE FROM flavor_projects WHERE flavor_id = $1 AND project_id = $2")
            .bind(flavor_id).bind(project).execute(p).await.map_err(db("flavor_access_remove"))?
            .rows_affected())
            > 0)
    }

    // ------------------------------------------------------------- quotas

    /// A project's quota overrides (`resource`, `hard_limit`).
    pub async fn quotas(&self, project: &str) -> Result<Vec<(String, i64)>, ApiError> {
        let rows: Vec<(String, Option<i64>)> = on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT resource, hard_limit FROM quotas WHERE project_id = $1")
            .bind(project).fetch_all(p).await.map_err(db("quota_get"))?);
        Ok(rows
            .into_iter()
            .map(|(r, l)| (r, l.unwrap_or(-1)))
            .collect())
    }

    /// Sets quota overrides of a project, in one transaction.
    pub async fn quotas_set(
        &self,
        project: &str,
        limits: &[(String, i64)],
    ) -> Result<(), ApiError> {
        let _forget = self.create_reads.forget_after();
        let now = Utc::now();
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            for (r, l) in limits {
                sqlx::query("INSERT INTO quotas (project_id, resource, hard_limit, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (project_id, resource) \
                     DO UPDATE SET hard_limit = excluded.hard_limit, updated_at = excluded.created_at")
                    .bind(project).bind(r).bind(l).bind(now)
                    .execute(&mut *tx).await.map_err(db("quota_set"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// Deletes a project's overrides (back to the defaults).
    pub async fn quotas_delete(&self, project: &str) -> Result<(), ApiError> {
        let _forget = self.create_reads.forget_after();
        // Nova's `quota_destroy_all_by_project`: the project's limits
        // and every per-user limit in it.
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            sqlx::query("DELETE FROM project_user_quotas WHERE project_id = $1")
                .bind(project).execute(&mut *tx).await.map_err(db("user_quota_delete"))?;
            sqlx::query("DELETE FROM quotas WHERE project_id = $1")
                .bind(project).execute(&mut *tx).await.map_err(db("quota_delete"))?;
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// `(instances, cores, ram)` in use by a project (see
    /// [`INSTANCE_USAGE_SQL`]).
    pub async fn instance_usage(&self, project: &str) -> Result<(i64, i64, i64), ApiError> {
        Ok(
            on_pool!(self.pool(), p => sqlx::query_as(INSTANCE_USAGE_SQL)
            .bind(project).fetch_one(p).await.map_err(db("quota_usage"))?),
        )
    }

    /// What a `GET /servers/{id}` of a server in its cell needs from the
    /// API database beside the mapping, in one statement: its key name
    /// (from the request spec) and the uuid of its server group.
    pub async fn show_extras(&self, uuid: &str) -> Result<ShowExtras, ApiError> {
        let (spec, group_uuid): (Option<String>, Option<String>) = on_pool!(self.pool(), p => sqlx::query_as(
                "SELECT (SELECT spec FROM request_specs WHERE instance_uuid = $1), \
                 (SELECT g.uuid FROM instance_groups g JOIN instance_group_member gm \
                  ON gm.group_id = g.id WHERE gm.instance_uuid = $1 LIMIT 1)")
                .bind(uuid)
                .fetch_one(p).await.map_err(db("show_extras"))?);
        Ok(ShowExtras {
            spec: spec.as_deref().and_then(SpecView::of).unwrap_or_default(),
            group_uuid,
        })
    }

    /// What the views show of the request specs of `uuids` (only the
    /// specs that name a key, a zone, extra specs or hints, and with
    /// `image_properties` (2.98) those that hold image properties, are
    /// read and returned: `view_fields`, `view_image_properties`): one
    /// statement on PostgreSQL, chunks of 200 on SQLite.
    pub async fn spec_views(
        &self,
        uuids: &[String],
        image_properties: bool,
    ) -> Result<std::collections::HashMap<String, SpecView>, ApiError> {
        // Marked when written (scanning each spec's text for the four
        // fields cost 4 ms a page of 1,000).
        let shows_something = if image_properties {
            "(view_fields OR view_image_properties)"
        } else {
            "view_fields"
        };
        let mut out = std::collections::HashMap::new();
        if uuids.is_empty() {
            return Ok(out);
        }
        let mut rows: Vec<(String, String)> = Vec::new();
        match self.pool() {
            Pool::Postgres(p) => {
                rows = sqlx::query_as(&format!(
                    "SELECT instance_uuid, spec FROM request_specs \
                     WHERE instance_uuid = ANY($1) AND {shows_something}"
                ))
                .bind(uuids)
                .fetch_all(p)
                .await
                .map_err(db("request_spec_views"))?;
            }
            Pool::Sqlite(p) => {
                for chunk in uuids.chunks(200) {
                    let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
                    let sql = format!(
                        "SELECT instance_uuid, spec FROM request_specs \
                         WHERE instance_uuid IN ({}) AND {shows_something}",
                        marks.join(",")
                    );
                    let mut q = sqlx::query_as(&sql);
                    for u in chunk {
                        q = q.bind(u);
                    }
                    rows.extend(q.fetch_all(p).await.map_err(db("request_spec_views"))?);
                }
            }
        }
        for (u, spec) in rows {
            if let Some(v) = SpecView::of(&spec) {
                out.insert(u, v);
            }
        }
        Ok(out)
    }
}
