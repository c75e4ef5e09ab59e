//! Compute hosts and conductors log in as a service user of their own,
//! holding the role `service` only: enough for placement and for reading
//! any image a server boots from, not for the administrator's APIs.

use fabric::token::TokenValidator;
use region::Region;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_token_holds_the_service_role_only() {
    let cfg = crate::one_host("service_user");
    let region = Region::start(&cfg, None).await.expect("start the region");
    let token = region.service_token.get();
    let (_, claims) = TokenValidator::decode_unverified(&token).unwrap();
    assert_eq!(claims.user.name, "nova");
    let roles: Vec<&str> = claims.roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(roles, ["service"], "no admin, no member");
    // Its password is private to the region's user.
    let mode = std::fs::metadata(cfg.region.data_dir.join("nova.secret"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );

    let http = reqwest::Client::new();
    let get = |url: String, token: String| {
        let http = http.clone();
        async move {
            http.get(url)
                .header("x-auth-token", token)
                .header("openstack-api-version", "placement 1.39")
                .send()
                .await
                .unwrap()
        }
    };
    // Placement: yes. The Compute API's administrator's calls: no.
    let p = format!("http://{}/resource_providers", region.placement.addr);
    assert_eq!(get(p, token.clone()).await.status(), 200);
    let c = format!("http://{}/v2.1/os-hypervisors", region.compute.addr);
    assert_eq!(get(c, token.clone()).await.status(), 403);
    // A member's private image: readable and downloadable by the service
    // (a host boots it), not by another project's member.
    let identity = format!("http://{}", region.identity.addr);
    let member = region::password_token(&identity, &region.member)
        .await
        .unwrap()
        .0;
    let images = format!("http://{}/v2/images", region.image.addr);
    let created: Value = http
        .post(&images)
        .header("x-auth-token", &member)
        .json(&json!({"name": "mine", "disk_format": "raw", "container_format": "bare"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["visibility"], "shared", "{created}");
    let r = http
        .put(format!("{images}/{id}/file"))
        .header("x-auth-token", &member)
        .header("content-type", "application/octet-stream")
        .body(vec![1u8; 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = get(format!("{images}/{id}/file"), token.clone()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), 1024);
    let admin = region::password_token(&identity, &region.admin)
        .await
        .unwrap()
        .0;
    // (The admin sees everything; the service user is no admin: it cannot
    // change the image.)
    let r = http
        .delete(format!("{images}/{id}"))
        .header("x-auth-token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(get(format!("{images}/{id}"), admin).await.status(), 200);
    region.shutdown().await;
}

/// A compute host and a cell conductor whose `[placement.auth] auth_url`
/// is plain http to another machine exit at start, naming the option,
/// before they connect anywhere or send the password; allowed explicitly,
/// they go on (and fail later, at their bus, which is not there).
#[test]
fn compute_and_conductor_refuse_to_send_their_password_over_plain_http() {
    for (bin, prefix) in [("compute", "COMPUTE"), ("cell-conductor", "CELL_CONDUCTOR")] {
        let run = |allow: &str| {
            std::process::Command::new(super::distributed::bin(bin))
                .env(
                    format!("{prefix}__PLACEMENT__AUTH__AUTH_URL"),
                    "http://192.0.2.1:5000/v3",
                )
                .env(format!("{prefix}__PLACEMENT__AUTH__USERNAME"), "nova")
                .env(format!("{prefix}__PLACEMENT__AUTH__PASSWORD"), "hunter2")
                .env(
                    format!("{prefix}__PLACEMENT__AUTH__ALLOW_PLAIN_HTTP"),
                    allow,
                )
                .env(
                    format!("{prefix}__PLACEMENT__ENDPOINT"),
                    "http://127.0.0.1:1",
                )
                .env(
                    format!("{prefix}__BUS__TRANSPORT_URL"),
                    "amqp://guest:guest@127.0.0.1:1/%2f",
                )
                .output()
                .expect("run the binary")
        };
        let out = run("false");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin}: {err}");
        assert!(
            err.contains("[placement.auth]")
                && err.contains("auth_url = http://192.0.2.1:5000/v3")
                && err.contains("allow_plain_http")
                && !err.contains("hunter2"),
            "{bin}: {err}"
        );
        let out = run("true");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin}: {err}");
        assert!(!err.contains("allow_plain_http"), "{bin}: {err}");
    }
}
