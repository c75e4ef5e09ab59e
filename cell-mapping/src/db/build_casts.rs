//! `build_casts` (cell migration 0005): the super-conductor records each
//! build it casts to a host, so that the cell conductor's healing can
//! re-drive it if the host dies or the cast expires unread (issue 31). The
//! cell conductor owns the rest of the table's life (reschedules replace
//! the row; the healing removes the rows of ended builds).

use chrono::{DateTime, Utc};

use super::{with_pool, CellDb};
use crate::metrics::measured;
use crate::Error;

impl CellDb {
    /// Records the build of `instance` cast to `host` (`message`: the
    /// encoded `BuildAndRunInstance`), expiring at `expires_at`.
    pub async fn api_record_build_cast(
        &self,
        instance: &str,
        host: &str,
        message: &[u8],
        request_id: &str,
        global_request_id: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), Error> {
        let sql = "INSERT INTO build_casts \
             (instance_uuid, host, message, request_id, global_request_id, cast_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (instance_uuid) DO UPDATE SET host = excluded.host, \
             message = excluded.message, cast_at = excluded.cast_at, expires_at = excluded.expires_at";
        with_pool!(self.pool(), p => measured("api_build_cast_record", sqlx::query(sql)
            .bind(instance).bind(host).bind(message).bind(request_id).bind(global_request_id)
            .bind(Utc::now()).bind(expires_at).execute(p)).await?.rows_affected());
        Ok(())
    }
}
