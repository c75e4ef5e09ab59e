//! `/os-keypairs`: import (or, below 2.92, generate an ssh-ed25519 key),
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
use serde_json::{json, Value};

use super::db::KeyPair;
use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::{quotas, App, Ctx};

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

fn colon_hex(bytes: &[u8]) -> String {
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

/// The fingerprint of a PEM certificate: SHA-1 of its DER.
pub fn x509_fingerprint(pem: &str) -> Option<String> {
    use sha1::Digest;
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN CERTIFICATE-----")?
        .trim_end()
        .strip_suffix("-----END CERTIFICATE-----")?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    // A DER certificate is a SEQUENCE.
    if der.first() != Some(&0x30) || der.len() < 16 {
        return None;
    }
    Some(colon_hex(&sha1::Sha1::digest(&der)))
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

fn validate_name(ctx: &Ctx, v: Option<&Value>) -> ApiResult<String> {
    let name = match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute name. Value: {other}. {other} is not of type 'string'"
            )))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute keypair. 'name' is a required property",
            ))
        }
    };
    let n = name.chars().count();
    if n == 0 || n > 255 {
        return Err(bad(
            "Keypair data is invalid: Keypair name must be string and between 1 and 255 characters long",
        ));
    }
    let extra: &[char] = if ctx.mv.at_least(92) {
        &['_', '-', ' ', '@', '.']
    } else {
        &['_', '-', ' ']
    };
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
        || name.trim() != name
    {
        return Err(bad(
            "Keypair data is invalid: Keypair name contains unsafe characters",
        ));
    }
    Ok(name)
}

/// `POST /os-keypairs`.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad("Malformed request body"))?;
    let Some(kp) = v.get("keypair").and_then(Value::as_object) else {
        return Err(bad(
            "Invalid input for field/attribute keypair. Value: None. 'keypair' is a required property",
        ));
    };
    let mut allowed = vec!["name", "public_key"];
    if ctx.mv.at_least(2) {
        allowed.push("type");
    }
    if ctx.mv.at_least(10) {
        allowed.push("user_id");
    }
    if let Some(k) = kp.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!(
            "Invalid input for field/attribute keypair. Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let user = match kp.get("user_id") {
        None => ctx.user_id().to_owned(),
        Some(Value::String(u)) if !u.is_empty() => u.clone(),
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute user_id. Value: {other}. {other} is not of type 'string'"
            )))
        }
    };
    authorize(&app, &ctx, "os_compute_api:os-keypairs:create", &user)?;
    let name = validate_name(&ctx, kp.get("name"))?;
    let kind = match kp.get("type") {
        None => "ssh".to_owned(),
        Some(Value::String(t)) if t == "ssh" || t == "x509" => t.clone(),
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute type. Value: {other}. {other} is not one of ['ssh', 'x509']"
            )))
        }
    };
    let (public_key, private_key) = match kp.get("public_key") {
        Some(Value::String(k)) if !k.trim().is_empty() => (k.trim().to_owned(), None),
        Some(Value::String(_)) | None if ctx.mv.at_least(92) => {
            return Err(bad(
                "Invalid input for field/attribute keypair. 'public_key' is a required property",
            ))
        }
        Some(Value::String(_)) | None => {
            if kind == "x509" {
                return Err(bad(
                    "Keypair data is invalid: generating x509 key pairs is not supported; import a certificate with public_key",
                ));
            }
            let (p, s) = generate_ed25519(&format!("Generated-by-Nova {name}"));
            (p, Some(s))
        }
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute public_key. Value: {other}. {other} is not of type 'string'"
            )))
        }
    };
    let fingerprint = if kind == "x509" {
        x509_fingerprint(&public_key)
    } else {
        ssh_fingerprint(&public_key)
    }
    .ok_or_else(|| bad("Keypair data is invalid: failed to generate fingerprint"))?;
    let limit = quotas::limit(&app, ctx.project_id(), "key_pairs").await?;
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

    /// Keys made with `ssh-keygen`, fingerprints from `ssh-keygen -l -E md5`
    /// and `openssl x509 -fingerprint -sha1`.
    pub const RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCY1fb/jaZKOc+i/NOz0mLhm2/OVBBVQ7fAoPW0TCC/BSYNTISIZ7G5FlzCcxZ0kSueg/kPPDOxlmXGwuSZzP4Ss1zNPNXpBRJZ9jZeEOibGkECxPYO4C+8FZggZQUvA0ftKznBWVOB38qLIItUSy06H5y9KdHXzWgZqs+CXaC6Q== test@example";
    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINIp4W3nq3RqGc17pVDpZ60gLx8MvS/JhqDJwu/m5A2N e";
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBbDCCAROgAwIBAgIUTZx3Rsf4Hoz/EjEZ28e6L4IvBmswCgYIKoZIzj0EAwIw
DDEKMAgGA1UEAwwBdDAeFw0yNjExMjkyMDIxMDFaFw0zNjExMjYyMDIxMDFaMAwx
CjAIBgNVBAMMAXQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASNUM1HhYeJM6He
fFQqb+jYUNDrkrlaGqwQmJ4/2TwhHZ5Kfm75W/D3Aqyq4EYpphYGyd/ZN2c5q8l5
yeZYU7mfo1MwUTAdBgNVHQ4EFgQUc0jwBmTA5o5pbdp1o/SIeRgIfQ8wHwYDVR0j
BBgwFoAUc0jwBmTA5o5pbdp1o/SIeRgIfQ8wDwYDVR0TAQH/BAUwAwEB/zAKBggq
hkjOPQQDAgNHADBEAiA7UqbZ27JVi6c0R6X1oRMnVnwGqT6EvKVY40PnbqeMMwIg
BVoYCslXeZuYkVHm5WSMXAq5z4Q8ySIv3GeTDmWwZEM=
-----END CERTIFICATE-----";

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
        assert_eq!(
            x509_fingerprint(CERT).unwrap(),
            "96:8a:3b:8b:1c:f2:23:b6:a9:33:43:22:33:16:71:be:f1:00:5e:3e"
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
        assert!(
            x509_fingerprint("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")
                .is_none()
        );
        assert!(x509_fingerprint(ED).is_none());
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
