//! The image service as the Compute API's deprecated `/images` proxy
//! ([`ImageProxy`]): Nova's `glance.API` calls (list with the v2 filters
//! Nova derives, get, delete, properties replaced) made as the caller, so
//! the image service's visibility and policy decide, with its errors
//! turned into the Compute API's in Nova's words.

use std::collections::BTreeMap;

use fabric::token::Claims;
use serde_json::Value;

use super::error::ImageError;
use super::lookup::ImageLookup;
use super::model::Image;
use super::service::{Caller, CmpOp, ListQuery, PatchOp, TimeField};
use crate::compute_api::error::ApiError;
use crate::compute_api::images::{ImageProxy, ProxyFuture, ProxyImage, ProxyQuery};

fn caller(claims: &Claims, request_id: &str) -> Caller {
    Caller {
        claims: claims.clone(),
        request_id: request_id.to_owned(),
    }
}

fn view(img: Image) -> ProxyImage {
    ProxyImage {
        id: img.row.id,
        name: img.row.name,
        status: img.row.status,
        min_ram: img.row.min_ram,
        min_disk: img.row.min_disk,
        size: img.row.size,
        created_at_ms: img.row.created_at,
        updated_at_ms: img.row.updated_at,
        properties: img.properties,
    }
}

/// The image service's error as Nova's proxy answers it; `forbidden` is
/// the proxy call's own 403 wording.
fn api_error(e: ImageError, id: &str, forbidden: Option<&str>) -> ApiError {
    match e {
        ImageError::NotFound(_) => ApiError::NotFound("Image not found.".into()),
        // Nova's ImageNotAuthorized, or the call's own words.
        ImageError::Forbidden(_) => ApiError::Forbidden(
            forbidden.map_or_else(|| format!("Not authorized for image {id}."), str::to_owned),
        ),
        ImageError::BadRequest(m) | ImageError::Conflict(m) => ApiError::BadRequest(m),
        other => ApiError::internal(format!("image service: {other}")),
    }
}

impl ImageProxy for ImageLookup {
    fn public_url(&self) -> String {
        self.service().public_url()
    }

    fn list<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        q: ProxyQuery,
    ) -> ProxyFuture<'a, (Vec<ProxyImage>, bool)> {
        Box::pin(async move {
            let mut lq = ListQuery {
                limit: q.limit,
                marker: q.marker,
                properties: q.properties,
                ..Default::default()
            };
            lq.filter.name = q.name;
            lq.filter.status = q.status;
            // Nova lists every image the caller may see, community ones
            // included (its `is_public: none`).
            lq.include_community = true;
            if let Some(t) = q.changes_since_ms {
                lq.rows.times.push((TimeField::UpdatedAt, CmpOp::Gte, t));
            }
            lq.rows.min_ram_at_least = q.min_ram;
            lq.rows.min_disk_at_least = q.min_disk;
            let page = self
                .service()
                .list(&caller(claims, request_id), &lq)
                .await
                .map_err(|e| api_error(e, "", None))?;
            Ok((page.images.into_iter().map(view).collect(), page.more))
        })
    }

    fn get<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        id: &'a str,
    ) -> ProxyFuture<'a, ProxyImage> {
        Box::pin(async move {
            self.service()
                .get(&caller(claims, request_id), id)
                .await
                .map(view)
                .map_err(|e| api_error(e, id, None))
        })
    }

    fn delete<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        id: &'a str,
    ) -> ProxyFuture<'a, ()> {
        Box::pin(async move {
            self.service()
                .delete(&caller(claims, request_id), id)
                .await
                .map_err(|e| api_error(e, id, Some("You are not allowed to delete the image.")))
        })
    }

    fn set_properties<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        id: &'a str,
        properties: BTreeMap<String, String>,
    ) -> ProxyFuture<'a, ProxyImage> {
        Box::pin(async move {
            let who = caller(claims, request_id);
            let svc = self.service();
            let old = svc
                .get(&who, id)
                .await
                .map_err(|e| api_error(e, id, None))?;
            // Nova's `purge_props`: the extra properties become exactly
            // these (removed ones first, then the rest set).
            let mut ops: Vec<PatchOp> = old
                .properties
                .keys()
                .filter(|k| !properties.contains_key(*k))
                .map(|k| PatchOp::Remove(k.clone()))
                .collect();
            ops.extend(
                properties
                    .into_iter()
                    .filter(|(k, v)| old.properties.get(k) != Some(v))
                    .map(|(k, v)| PatchOp::Add(k, Value::String(v))),
            );
            svc.patch(&who, id, &ops)
                .await
                .map(view)
                .map_err(|e| api_error(e, id, None))
        })
    }
}
