//! `auth_strategy = "keystone"`: tokens signed by the identity service are
//! validated locally; only admins (or the service role) pass the policy;
//! forged, unscoped, expired and revoked tokens are 401. The identity
//! service is played by a tiny server publishing one public key and a
//! revocation list, exactly the two documents placement polls.

use std::sync::{Arc, Mutex};

use axum::routing::get;
use axum::{Json, Router};
use fabric::token::{
    now_ms, Claims, KeysDocument, Named, ProjectScope, Revocation, RevocationsDocument, TokenSigner,
};
use testkit::http::Client;

fn named(id: &str) -> Named {
    Named {
        id: id.to_owned(),
        name: id.to_owned(),
    }
}

fn claims(roles: &[&str], scoped: bool, expires_in_ms: i64, audit: &str) -> Claims {
    Claims {
        user: named("u1"),
        user_domain: named("default"),
        project: scoped.then(|| ProjectScope {
            project: named("p1"),
            domain: named("default"),
        }),
        roles: roles.iter().map(|r| named(r)).collect(),
        methods: vec!["password".to_owned()],
        issued_at_ms: now_ms() - 1000,
        expires_at_ms: now_ms() + expires_in_ms,
        audit_id: audit.to_owned(),
        parent_audit_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_tokens_are_validated_locally() {
    use axum::response::IntoResponse;
    let signer = TokenSigner::from_seed("k1", &[7u8; 32]);
    let forger = TokenSigner::from_seed("k1", &[8u8; 32]);
    let keys = KeysDocument {
        keys: vec![signer.public_key()],
    };
    let revocations: Arc<Mutex<Vec<Revocation>>> = Arc::default();
    let revs = revocations.clone();
    let identity = Router::new()
        .route(
            "/v3/auth/keys",
            get(move || std::future::ready(Json(keys.clone()))),
        )
        // Placement's service user logs in...
        .route(
            "/v3/auth/tokens",
            axum::routing::post(|| async {
                let mut r = (
                    axum::http::StatusCode::CREATED,
                    Json(
                        serde_json::json!({"token": {"expires_at": "2099-01-01T00:00:00.000000Z"}}),
                    ),
                )
                    .into_response();
                r.headers_mut()
                    .insert("x-subject-token", "svc-token".parse().unwrap());
                r
            }),
        )
        // ...and reads the revocations with its token, never without.
        .route(
            "/v3/auth/revocations",
            get(move |headers: axum::http::HeaderMap| {
                let r = revs.lock().unwrap().clone();
                let authed =
                    headers.get("x-auth-token").and_then(|v| v.to_str().ok()) == Some("svc-token");
                std::future::ready(if authed {
                    Json(RevocationsDocument { revocations: r }).into_response()
                } else {
                    axum::http::StatusCode::UNAUTHORIZED.into_response()
                })
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let identity_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, identity).await.unwrap() });

    let db = testkit::sqlite("placement_keystone_auth");
    let mut cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        auth_strategy: "keystone".to_owned(),
        identity_url: format!("http://{identity_addr}"),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 1,
        },
        ..Default::default()
    };
    // Without a service user to read the revocations, it refuses to start.
    let err = placement::serve(&cfg, None).await.err().expect("refused");
    assert!(err.to_string().contains("revocation list"), "{err}");
    cfg.keystone_remote.auth.username = "placement".into();
    cfg.keystone_remote.auth.password = "s3cret".into();
    cfg.keystone_remote.auth.project_name = "service".into();
    let running = placement::serve(&cfg, None).await.expect("placement");
    let addr = running.addr;

    let admin = signer.sign(&claims(
        &["admin", "member", "reader"],
        true,
        3_600_000,
        "a-admin",
    ));
    let member = signer.sign(&claims(&["member", "reader"], true, 3_600_000, "a-member"));
    let service = signer.sign(&claims(&["service"], true, 3_600_000, "a-service"));
    let unscoped = signer.sign(&claims(&["admin"], false, 3_600_000, "a-unscoped"));
    let expired = signer.sign(&claims(&["admin"], true, -1, "a-expired"));
    let forged = forger.sign(&claims(&["admin"], true, 3_600_000, "a-forged"));

    let status = |token: Option<String>| {
        tokio::task::spawn_blocking(move || {
            let mut c = Client::new(addr);
            if let Some(t) = token {
                c = c.with_header("x-auth-token", &t);
            }
            c.request("GET", "/resource_providers", None)
                .unwrap()
                .status
        })
    };
    assert_eq!(status(Some(admin.clone())).await.unwrap(), 200);
    assert_eq!(status(Some(service)).await.unwrap(), 200);
    assert_eq!(status(Some(member)).await.unwrap(), 403);
    for bad in [
        unscoped,
        expired,
        forged,
        "garbage".to_owned(),
        "admin".to_owned(),
    ] {
        assert_eq!(status(Some(bad)).await.unwrap(), 401);
    }
    assert_eq!(status(None).await.unwrap(), 401);

    // Revoking the admin token's audit id reaches placement within seconds.
    revocations.lock().unwrap().push(Revocation {
        audit_id: Some("a-admin".to_owned()),
        user_id: None,
        project_id: None,
        issued_before_ms: now_ms(),
        expires_at_ms: now_ms() + 3_600_000,
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s = status(Some(admin.clone())).await.unwrap();
        if s == 401 {
            break;
        }
        assert_eq!(s, 200);
        assert!(
            std::time::Instant::now() < deadline,
            "revocation not seen within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// `auth_strategy = "keystone_remote"`: each token is checked with
/// `GET /v3/auth/tokens` at a Keystone (played by a tiny server speaking
/// Keystone's token document), authorized by a service user's token, and
/// the answer is cached for `cache_ttl_secs`: a second request makes no
/// second check, and a token Keystone forgets stops working after the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_remote_asks_keystone_and_caches() {
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn doc(roles: &[&str], scoped: bool) -> serde_json::Value {
        let mut t = serde_json::json!({
            "methods": ["password"],
            "user": {"id": "u1", "name": "alice", "domain": {"id": "default", "name": "Default"}},
            "roles": roles.iter().map(|r| serde_json::json!({"id": format!("r-{r}"), "name": r})).collect::<Vec<_>>(),
            "issued_at": "2026-11-29T00:00:00.000000Z",
            "expires_at": "2099-01-01T00:00:00.000000Z",
            "audit_ids": ["aud1"],
        });
        if scoped {
            t["project"] = serde_json::json!({"id": "p1", "name": "demo", "domain": {"id": "default", "name": "Default"}});
        }
        serde_json::json!({ "token": t })
    }
    let tokens: Arc<Mutex<HashMap<String, serde_json::Value>>> = Arc::new(Mutex::new(
        [
            (
                "tok-admin".to_owned(),
                doc(&["admin", "member", "reader"], true),
            ),
            ("tok-member".to_owned(), doc(&["member", "reader"], true)),
            ("tok-unscoped".to_owned(), doc(&[], false)),
        ]
        .into_iter()
        .collect(),
    ));
    let checks = Arc::new(AtomicUsize::new(0));
    let (t2, c2) = (tokens.clone(), checks.clone());
    let keystone = Router::new().route(
        "/v3/auth/tokens",
        axum::routing::post(|body: Json<serde_json::Value>| async move {
            // The service user's login.
            let pw = &body.0["auth"]["identity"]["password"]["user"]["password"];
            if pw != "s3cret" {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            let mut r = (
                StatusCode::CREATED,
                Json(serde_json::json!({"token": {"expires_at": "2099-01-01T00:00:00.000000Z"}})),
            )
                .into_response();
            r.headers_mut()
                .insert("x-subject-token", "svc-token".parse().unwrap());
            r
        })
        .get(move |headers: HeaderMap| {
            let (tokens, checks) = (t2.clone(), c2.clone());
            async move {
                if headers.get("x-auth-token").and_then(|v| v.to_str().ok()) != Some("svc-token") {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                let subject = headers
                    .get("x-subject-token")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                checks.fetch_add(1, Ordering::SeqCst);
                match tokens.lock().unwrap().get(&subject) {
                    Some(d) => Json(d.clone()).into_response(),
                    None => StatusCode::NOT_FOUND.into_response(),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let keystone_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, keystone).await.unwrap() });

    let db = testkit::sqlite("placement_keystone_remote");
    let mut cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        auth_strategy: "keystone_remote".to_owned(),
        identity_url: format!("http://{keystone_addr}/v3"),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 1,
        },
        ..Default::default()
    };
    // Without a service user it refuses to start, saying why.
    let err = placement::serve(&cfg, None).await.err().expect("refused");
    assert!(err.to_string().contains("keystone_remote.auth"), "{err}");
    cfg.keystone_remote.auth.username = "placement".into();
    cfg.keystone_remote.auth.password = "s3cret".into();
    cfg.keystone_remote.auth.project_name = "service".into();
    cfg.keystone_remote.cache_ttl_secs = 1;
    let running = placement::serve(&cfg, None).await.expect("placement");
    let addr = running.addr;
    let status = |token: Option<&str>| {
        let token = token.map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let mut c = Client::new(addr);
            if let Some(t) = token {
                c = c.with_header("x-auth-token", &t);
            }
            c.request("GET", "/resource_providers", None)
                .unwrap()
                .status
        })
    };
    assert_eq!(status(Some("tok-admin")).await.unwrap(), 200);
    let after_first = checks.load(Ordering::SeqCst);
    assert_eq!(status(Some("tok-admin")).await.unwrap(), 200);
    assert_eq!(
        checks.load(Ordering::SeqCst),
        after_first,
        "the second request must be answered from the cache"
    );
    assert_eq!(status(Some("tok-member")).await.unwrap(), 403);
    assert_eq!(status(Some("tok-unscoped")).await.unwrap(), 401);
    assert_eq!(status(Some("garbage")).await.unwrap(), 401);
    assert_eq!(status(None).await.unwrap(), 401);

    // Keystone forgets the admin token: refused once the cache entry ages out.
    tokens.lock().unwrap().remove("tok-admin");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s = status(Some("tok-admin")).await.unwrap();
        if s == 401 {
            break;
        }
        assert_eq!(s, 200);
        assert!(
            std::time::Instant::now() < deadline,
            "revocation not seen within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
