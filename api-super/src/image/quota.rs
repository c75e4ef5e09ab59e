//! Per-project image quotas (Glance's unified limits): what a create or
//! an upload may still take. Each limit is the project's from identity,
//! else the registered default there ([`KeystoneLimits`]), else
//! `[image.quota]`.

use super::config::ImageConfig;
use super::db::Db;
use super::error::{ImageError, Result};
use super::limits::KeystoneLimits;

/// `owner`'s limit on `resource`, whose `[image.quota]` value is `local`.
async fn limit_of(
    limits: Option<&KeystoneLimits>,
    owner: &str,
    resource: &str,
    local: i64,
) -> Result<i64> {
    Ok(match limits {
        Some(l) => l.limit(owner, resource).await?.unwrap_or(local),
        None => local,
    })
}

/// Refuses one more image of `owner` when it holds `image_count_total`.
pub(super) async fn check_create(
    db: &Db,
    cfg: &ImageConfig,
    limits: Option<&KeystoneLimits>,
    owner: &str,
) -> Result<()> {
    let limit = limit_of(
        limits,
        owner,
        "image_count_total",
        cfg.quota.image_count_total,
    )
    .await?;
    let (count, _, _) = db.usage(owner).await?;
    over_limit(owner, "image_count_total", limit, count, 1)
}

/// The most bytes an upload of `owner`'s may write: the size cap, or
/// what is left of the project's `image_size_total` when less (then
/// with the message for passing it). Refuses the upload at once when
/// the project is at a limit.
pub(super) async fn upload_cap(
    db: &Db,
    cfg: &ImageConfig,
    limits: Option<&KeystoneLimits>,
    owner: &str,
) -> Result<UploadCap> {
    let q = &cfg.quota;
    let uploading_limit = limit_of(
        limits,
        owner,
        "image_count_uploading",
        q.image_count_uploading,
    )
    .await?;
    let size_limit = limit_of(limits, owner, "image_size_total", q.image_size_total).await?;
    let (_, uploading, bytes) = db.usage(owner).await?;
    over_limit(
        owner,
        "image_count_uploading",
        uploading_limit,
        uploading,
        1,
    )?;
    let size_cap = cfg.image_size_cap;
    if size_limit < 0 {
        return Ok(UploadCap {
            bytes: size_cap,
            quota: None,
        });
    }
    let limit = size_limit.saturating_mul(1 << 20);
    let used_mib = (bytes + (1 << 20) - 1) / (1 << 20);
    if bytes >= limit {
        over_limit(owner, "image_size_total", size_limit, used_mib, 1)?;
    }
    let left = u64::try_from(limit - bytes).unwrap_or(0);
    if left >= size_cap {
        return Ok(UploadCap {
            bytes: size_cap,
            quota: None,
        });
    }
    Ok(UploadCap {
        bytes: left,
        quota: Some(format!(
            "Project {owner} is over a limit for [Resource image_size_total is over limit \
             of {size_limit} MiB due to current usage {used_mib} MiB and this upload]"
        )),
    })
}

/// How much an upload may write, and the message for passing a quota (not
/// the size cap).
pub(super) struct UploadCap {
    pub(super) bytes: u64,
    pub(super) quota: Option<String>,
}

/// Refuses (413, oslo.limit's words as Glance shows them) `delta` more of
/// `resource` for `owner` at `usage` when `limit` (not -1) would be passed.
pub(super) fn over_limit(
    owner: &str,
    resource: &str,
    limit: i64,
    usage: i64,
    delta: i64,
) -> Result<()> {
    if limit < 0 || usage + delta <= limit {
        return Ok(());
    }
    Err(ImageError::TooLarge(format!(
        "Project {owner} is over a limit for [Resource {resource} is over limit of {limit} \
         due to current usage {usage} and delta {delta}]"
    )))
}
