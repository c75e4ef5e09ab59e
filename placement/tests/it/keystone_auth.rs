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
        .route(
            "/v3/auth/revocations",
            get(move || {
                let r = revs.lock().unwrap().clone();
                std::future::ready(Json(RevocationsDocument { revocations: r }))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let identity_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, identity).await.unwrap() });

    let db = testkit::sqlite("placement_keystone_auth");
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        auth_strategy: "keystone".to_owned(),
        identity_url: format!("http://{identity_addr}"),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 1,
        },
        ..Default::default()
    };
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
