//! `/os-keypairs`: import (or, below 2.92, generate an ssh-ed25519 key or
//! Nova's x509 certificate, `keypair_x509`),
//! list (per user; `?user_id=` for admins from 2.10; `limit`/`marker` from
//! 2.35), show and delete. `type` (`ssh`/`x509`) from 2.2. Fingerprints as
//! Nova shows them: MD5 of the decoded key blob for ssh keys, SHA-1 of the
//! certificate (DER) for x509, colon-separated hex. Creating counts against
//! the `key_pairs` quota of the caller's project, per user.

use std::collections::HashMap;

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine;
use serde_json::{json, Map, Value};

use super::body_schema::{self, member};
use super::db::KeyPair;
use super::error::{ApiError, ApiResult};
use super::query_schema::{
    self, invalid_field, not_of_type, python_repr, python_value_repr as py_repr,
};
use super::{keypair_x509, quotas, servers, App, Ctx};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn not_found(name: &str, user: &str) -> ApiError {
    ApiError::NotFound(format!("Keypair {name} could not be found for user {user}"))
}

fn ts(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// Policy on the key pairs of `user` (Nova: admin, or the owner).
fn authorize(app: &App, ctx: &Ctx, action: &str, user: &str) -> ApiResult<()> {
    let target = [("user_id", user), ("project_id", ctx.project_id())];
    if app
        .policy
        .enforce(action, &ctx.claims, &target, &ctx.request_id)
    {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "Policy doesn't allow {action} to be performed."
        )))
    }
}

/// The user a request is about: `?user_id=` from 2.10, else the caller.
fn target_user(ctx: &Ctx, q: &HashMap<String, String>) -> String {
    match q.get("user_id") {
        Some(u) if ctx.mv.at_least(10) && !u.is_empty() => u.clone(),
        _ => ctx.user_id().to_owned(),
    }
}

/// Bytes as Nova shows fingerprints: colon-separated lowercase hex.
pub(crate) fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Reads a big-endian length-prefixed string at the start of `b`.
fn ssh_string(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let s = b.get(4..4 + len)?;
    Some((s, &b[4 + len..]))
}

const SSH_TYPES: &[&str] = &[
    "ssh-rsa",
    "ssh-dss",
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// The fingerprint of an OpenSSH public key line (`type base64 [comment]`):
/// MD5 of the decoded blob, whose first field must name the same type.
pub fn ssh_fingerprint(public_key: &str) -> Option<String> {
    use md5::Digest;
    let mut parts = public_key.split_whitespace();
    let kind = parts.next()?;
    let data = parts.next()?;
    if !SSH_TYPES.contains(&kind) {
        return None;
    }
    let blob = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    let (inner, rest) = ssh_string(&blob)?;
    if inner != kind.as_bytes() || rest.is_empty() {
        return None;
    }
    // Every field after the type must be a well-formed string.
    let mut r = rest;
    while !r.is_empty() {
        r = ssh_string(r)?.1;
    }
    Some(colon_hex(&md5::Md5::digest(&blob)))
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// A fresh ssh-ed25519 key pair: (OpenSSH public key line, OpenSSH
/// private key PEM).
pub fn generate_ed25519(comment: &str) -> (String, String) {
    use rand::RngCore;
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    let sk = ed25519_dalek::SigningKey::from_bytes(&seed);
    let pk = sk.verifying_key().to_bytes();
    let mut pub_blob = Vec::new();
    put_string(&mut pub_blob, b"ssh-ed25519");
    put_string(&mut pub_blob, &pk);
    let b64 = base64::engine::general_purpose::STANDARD;
    let public = format!("ssh-ed25519 {} {comment}", b64.encode(&pub_blob));
    // openssh-key-v1, unencrypted, one key.
    let check = rand::thread_rng().next_u32().to_be_bytes();
    let mut private = Vec::new();
    private.extend_from_slice(&check);
    private.extend_from_slice(&check);
    put_string(&mut private, b"ssh-ed25519");
    put_string(&mut private, &pk);
    let mut keypair = seed.to_vec();
    keypair.extend_from_slice(&pk);
    put_string(&mut private, &keypair);
    put_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while private.len() % 8 != 0 {
        private.push(pad);
        pad += 1;
    }
    let mut blob = b"openssh-key-v1\0".to_vec();
    put_string(&mut blob, b"none");
    put_string(&mut blob, b"none");
    put_string(&mut blob, b"");
    blob.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut blob, &pub_blob);
    put_string(&mut blob, &private);
    let enc = b64.encode(&blob);
    let mut pem = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for chunk in enc.as_bytes().chunks(70) {
        pem.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    (public, pem)
}

/// A key pair's `name` as Nova's schema has it (`allOf` its `name` and
/// `^[_\- a-zA-Z0-9]+$`, from 2.92 `^[_\-\@\. a-zA-Z0-9]+$`), in the
/// schema's order: type, name format, length, then the pattern.
fn name_field(ctx: &Ctx, v: &Value) -> ApiResult<String> {
    let name = servers::schema::name_field(v)?;
    let (pattern, extra): (&str, &[char]) = if ctx.mv.at_least(92) {
        (r"^[_\-\@\. a-zA-Z0-9]+$", &['_', '-', ' ', '@', '.'])
    } else {
        (r"^[_\- a-zA-Z0-9]+$", &['_', '-', ' '])
    };
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    {
        return Err(invalid_field(
            "name",
            v,
            &format!("{} does not match {}", py_repr(v), python_repr(pattern)),
        ));
    }
    Ok(name)
}

/// A string-typed property of the body, if present.
fn string_field<'a>(o: &'a Map<String, Value>, key: &str) -> ApiResult<Option<&'a str>> {
    match o.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(invalid_field(key, v, &not_of_type(v, "'string'"))),
    }
}

/// The create body, checked as Nova's schema for the microversion:
/// `(name, type, public_key, user_id)`.
type CreateBody = (String, String, Option<String>, Option<String>);

fn create_body(ctx: &Ctx, v: &Value) -> ApiResult<CreateBody> {
    let mut allowed = vec!["name", "public_key"];
    if ctx.mv.at_least(2) {
        allowed.push("type");
    }
    if ctx.mv.at_least(10) {
        allowed.push("user_id");
    }
    let required: &[&str] = if ctx.mv.at_least(92) {
        &["name", "public_key"]
    } else {
        &["name"]
    };
    member(v, "keypair", &allowed, required, |o| {
        let name = o.get("name").map(|n| name_field(ctx, n)).transpose()?;
        let kind = match o.get("type").filter(|_| ctx.mv.at_least(2)) {
            None => "ssh".to_owned(),
            Some(Value::String(t)) if t == "ssh" || t == "x509" => t.clone(),
            Some(t @ Value::String(_)) => {
                return Err(invalid_field(
                    "type",
                    t,
                    &format!("{} is not one of ['ssh', 'x509']", py_repr(t)),
                ))
            }
            Some(t) => return Err(invalid_field("type", t, &not_of_type(t, "'string'"))),
        };
        let public_key = string_field(o, "public_key")?.map(str::to_owned);
        let user = if ctx.mv.at_least(10) {
            string_field(o, "user_id")?.map(str::to_owned)
        } else {
            None
        };
        Ok((name.unwrap_or_default(), kind, public_key, user))
    })
}

/// Nova's 400 for key data it cannot read.
fn invalid_keypair(reason: &str) -> ApiError {
    bad(format!("Keypair data is invalid: {reason}"))
}

/// `POST /os-keypairs`: import `public_key` (an empty one too: Nova's
/// fingerprint refusal), or below 2.92 generate a pair of `type`.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let v = body_schema::parse(&body)?;
    let (name, kind, public_key, user) = create_body(&ctx, &v)?;
    // Nova: an empty user_id is the caller.
    let user = user
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| ctx.user_id().to_owned());
    authorize(&app, &ctx, "os_compute_api:os-keypairs:create", &user)?;
    let (public_key, fingerprint, private_key) = match public_key {
        Some(k) if kind == "x509" => {
            let fp = keypair_x509::fingerprint(&k).map_err(|e| {
                invalid_keypair(&format!(
                    "failed to generate X509 fingerprint. Error message: {e}"
                ))
            })?;
            (k, fp, None)
        }
        Some(k) => {
            let fp = ssh_fingerprint(&k)
                .ok_or_else(|| invalid_keypair("failed to generate fingerprint"))?;
            (k, fp, None)
        }
        None if kind == "x509" => {
            let for_user = user.clone();
            let g = tokio::task::spawn_blocking(move || keypair_x509::generate(&for_user))
                .await
                .map_err(|e| ApiError::Internal(format!("x509 generation: {e}")))?
                .map_err(|e| ApiError::Internal(format!("x509 generation: {e}")))?;
            (g.certificate, g.fingerprint, Some(g.private_key))
        }
        None => {
            let (p, s) = generate_ed25519(&format!("Generated-by-Nova {name}"));
            let fp = ssh_fingerprint(&p)
                .ok_or_else(|| ApiError::Internal("generated key unreadable".into()))?;
            (p, fp, Some(s))
        }
    };
    // Nova: the caller's limit in its project (its own, else the
    // project's).
    let limit = quotas::user_limit(&app, ctx.project_id(), ctx.user_id(), "key_pairs").await?;
    let row = app
        .db
        .keypair_create(&user, &name, &kind, &fingerprint, &public_key, limit)
        .await?;
    let mut out = json!({
        "name": row.name,
        "public_key": row.public_key,
        "fingerprint": row.fingerprint,
        "user_id": row.user_id,
    });
    if ctx.mv.at_least(2) {
        out["type"] = json!(row.kind);
    }
    if let Some(s) = private_key {
        out["private_key"] = json!(s);
    }
    let status = if ctx.mv.at_least(2) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({ "keypair": out }))).into_response())
}

fn parse_limit(q: &HashMap<String, String>, max: usize) -> ApiResult<i64> {
    match q.get("limit") {
        None => Ok(max as i64),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(n.min(max as i64)),
            _ => Err(bad(format!(
                "Invalid input for query parameters limit. Value: {s}. '{s}' does not match '^[0-9]*$'"
            ))),
        },
    }
}

/// `GET /os-keypairs`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::KEYPAIR_LIST.check(ctx.mv, raw.as_deref())?;
    let user = target_user(&ctx, &q);
    authorize(&app, &ctx, "os_compute_api:os-keypairs:index", &user)?;
    let paging = ctx.mv.at_least(35);
    let (limit, marker) = if paging {
        (parse_limit(&q, app.max_limit)?, q.get("marker").cloned())
    } else {
        (i64::MAX, None)
    };
    if let Some(m) = &marker {
        if app.db.keypair(&user, m).await?.is_none() {
            return Err(bad(format!("Marker {m} could not be found.")));
        }
    }
    let rows: Vec<KeyPair> = app.db.keypairs(&user, marker.as_deref(), limit).await?;
    let list: Vec<Value> = rows
        .iter()
        .map(|k| {
            let mut v =
                json!({"name": k.name, "public_key": k.public_key, "fingerprint": k.fingerprint});
            if ctx.mv.at_least(2) {
                v["type"] = json!(k.kind);
            }
            json!({ "keypair": v })
        })
        .collect();
    let mut body = json!({ "keypairs": list });
    if paging && limit > 0 && rows.len() as i64 == limit {
        if let Some(last) = rows.last() {
            let mut href = format!(
                "{}/v2.1/os-keypairs?limit={limit}&marker={}",
                app.public_url(),
                encode(&last.name)
            );
            if q.contains_key("user_id") {
                href.push_str(&format!("&user_id={}", encode(&user)));
            }
            body["keypairs_links"] = json!([{"rel": "next", "href": href}]);
        }
    }
    Ok(Json(body))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `GET /os-keypairs/{name}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::KEYPAIR_ONE.check(ctx.mv, raw.as_deref())?;
    let user = target_user(&ctx, &q);
    authorize(&app, &ctx, "os_compute_api:os-keypairs:show", &user)?;
    let k = app
        .db
        .keypair(&user, &name)
        .await?
        .ok_or_else(|| not_found(&name, &user))?;
    let mut v = json!({
        "name": k.name,
        "public_key": k.public_key,
        "fingerprint": k.fingerprint,
        "user_id": k.user_id,
        "deleted": false,
        "created_at": ts(k.created_at),
        "updated_at": k.updated_at.map(ts),
        "deleted_at": null,
        "id": k.id,
    });
    if ctx.mv.at_least(2) {
        v["type"] = json!(k.kind);
    }
    Ok(Json(json!({ "keypair": v })))
}

/// `DELETE /os-keypairs/{name}`: 202 below 2.2, 204 from 2.2.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    query_schema::KEYPAIR_ONE.check(ctx.mv, raw.as_deref())?;
    let user = target_user(&ctx, &q);
    authorize(&app, &ctx, "os_compute_api:os-keypairs:delete", &user)?;
    if !app.db.keypair_delete(&user, &name).await? {
        return Err(not_found(&name, &user));
    }
    Ok(if ctx.mv.at_least(2) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    }
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys made with `ssh-keygen`, fingerprints from `ssh-keygen -l -E md5`.
    pub const RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCY1fb/jaZKOc+i/NOz0mLhm2/OVBBVQ7fAoPW0TCC/BSYNTISIZ7G5FlzCcxZ0kSueg/kPPDOxlmXGwuSZzP4Ss1zNPNXpBRJZ9jZeEOibGkECxPYO4C+8FZggZQUvA0ftKznBWVOB38qLIItUSy06H5y9KdHXzWgZqs+CXaC6Q== test@example";
    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINIp4W3nq3RqGc17pVDpZ60gLx8MvS/JhqDJwu/m5A2N e";

    #[test]
    fn fingerprints_match_openssh_and_openssl() {
        assert_eq!(
            ssh_fingerprint(RSA).unwrap(),
            "c1:61:81:b2:0e:29:e4:ce:3d:a3:d3:0b:5a:c2:37:c9"
        );
        assert_eq!(
            ssh_fingerprint(ED).unwrap(),
            "c7:cb:09:1a:9b:cc:2f:30:94:da:f1:b9:9e:08:35:aa"
        );
        for bad in [
            "",
            "ssh-rsa",
            "ssh-rsa !!!",
            // The blob says ssh-ed25519.
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAINIp4W3nq3RqGc17pVDpZ60gLx8MvS/JhqDJwu/m5A2N",
            // Truncated blob.
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINIp4W3nq3RqGc17pVDpZ60gLx8M",
            "not-a-type AAAA",
        ] {
            assert!(ssh_fingerprint(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn generated_keys_are_valid_openssh_keys() {
        let (public, private) = generate_ed25519("Generated-by-Nova k");
        assert!(ssh_fingerprint(&public).is_some(), "{public}");
        assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(private.ends_with("-----END OPENSSH PRIVATE KEY-----\n"));
        // Where OpenSSH is installed, it derives the same public key.
        let dir = std::env::temp_dir().join(format!("kp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("id");
        std::fs::write(&file, &private).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        if let Ok(out) = std::process::Command::new("ssh-keygen")
            .arg("-y")
            .arg("-f")
            .arg(&file)
            .output()
        {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let derived = String::from_utf8_lossy(&out.stdout);
            let mine: Vec<&str> = public.split_whitespace().take(2).collect();
            let theirs: Vec<&str> = derived.split_whitespace().take(2).collect();
            assert_eq!(mine, theirs);
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
