//! Removing a grant, disabling a user, disabling a project or deleting a
//! project takes effect at once: the tokens it covers get 401 from
//! compute, image and placement (the region's services validate
//! in-process, so "within the poll interval" is at once; a polling
//! validator is tested in api-super).

use std::time::Duration;

use fabric::token::TokenValidator;
use region::Region;
use serde_json::{json, Value};

/// Status of `GET path` with `token` on `base` (placement at its newest
/// microversion).
async fn status(http: &reqwest::Client, base: &str, path: &str, token: &str) -> u16 {
    http.get(format!("{base}{path}"))
        .header("x-auth-token", token)
        .header("openstack-api-version", "placement 1.39")
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// `[compute, image, placement]` statuses for `token`.
async fn statuses(http: &reqwest::Client, region: &Region, token: &str) -> [u16; 3] {
    [
        status(
            http,
            &format!("http://{}", region.compute.addr),
            "/v2.1/servers",
            token,
        )
        .await,
        status(
            http,
            &format!("http://{}", region.image.addr),
            "/v2/images",
            token,
        )
        .await,
        status(
            http,
            &format!("http://{}", region.placement.addr),
            "/resource_providers",
            token,
        )
        .await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_grant_disabling_a_user_or_deleting_a_project_revokes_their_tokens() {
    let cfg = crate::one_host("revocation");
    let region = Region::start(&cfg, None).await.expect("start the region");
    let identity = format!("http://{}", region.identity.addr);
    let http = reqwest::Client::new();
    let admin = region::password_token(&identity, &region.admin)
        .await
        .expect("admin token")
        .0;
    let login = || region::password_token(&identity, &region.member);
    let member = login().await.expect("member token").0;
    let (_, claims) = TokenValidator::decode_unverified(&member).unwrap();
    let user = claims.user.id.clone();
    let project = claims.project.as_ref().unwrap().project.id.clone();
    let role = claims
        .roles
        .iter()
        .find(|r| r.name == "member")
        .expect("the member role")
        .id
        .clone();
    // A member: compute and image serve it, placement forbids it.
    assert_eq!(statuses(&http, &region, &member).await, [200, 200, 403]);
    let grant = format!("{identity}/v3/projects/{project}/users/{user}/roles/{role}");
    let admin_call = |method: reqwest::Method, url: String, body: Option<Value>| {
        let mut r = http.request(method, url).header("x-auth-token", &admin);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send()
    };

    // The grant removed: the token is refused everywhere, and no new one
    // is issued on the project.
    let r = admin_call(reqwest::Method::DELETE, grant.clone(), None)
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(statuses(&http, &region, &member).await, [401, 401, 401]);
    assert!(login().await.is_err(), "no role on the project: no token");
    // Granted again: a new token works, the old one stays revoked.
    let r = admin_call(reqwest::Method::PUT, grant.clone(), None)
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let again = login().await.expect("a new token").0;
    assert_eq!(statuses(&http, &region, &again).await, [200, 200, 403]);
    assert_eq!(statuses(&http, &region, &member).await, [401, 401, 401]);

    // The user disabled (`openstack user set --disable`): refused.
    let r = admin_call(
        reqwest::Method::PATCH,
        format!("{identity}/v3/users/{user}"),
        Some(json!({"user": {"enabled": false}})),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["user"]["enabled"], false);
    assert_eq!(statuses(&http, &region, &again).await, [401, 401, 401]);
    assert!(login().await.is_err(), "a disabled user gets no token");
    let r = admin_call(
        reqwest::Method::PATCH,
        format!("{identity}/v3/users/{user}"),
        Some(json!({"user": {"enabled": true}})),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let third = login().await.expect("enabled again").0;
    assert_eq!(statuses(&http, &region, &third).await, [200, 200, 403]);

    // The project disabled (`openstack project set --disable`): its
    // tokens are refused and none is issued on it; a member may not do
    // it; enabled again, a new token works and the old one stays revoked.
    let project_url = format!("{identity}/v3/projects/{project}");
    let r = http
        .patch(&project_url)
        .header("x-auth-token", &third)
        .json(&json!({"project": {"enabled": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a member disabled its project");
    let patch = |body: Value| admin_call(reqwest::Method::PATCH, project_url.clone(), Some(body));
    let r = patch(json!({"project": {"enabled": "no"}})).await.unwrap();
    assert_eq!(r.status(), 400);
    let r = patch(json!({"project": {"parent_id": "x"}})).await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(statuses(&http, &region, &third).await, [200, 200, 403]);
    let r = patch(json!({"project": {"enabled": false, "description": "frozen"}}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["project"]["enabled"], false);
    assert_eq!(body["project"]["description"], "frozen");
    assert_eq!(statuses(&http, &region, &third).await, [401, 401, 401]);
    assert!(login().await.is_err(), "a disabled project gets no token");
    let r = patch(json!({"project": {"enabled": true}})).await.unwrap();
    assert_eq!(r.status(), 200);
    let fourth = login().await.expect("the project enabled again").0;
    assert_eq!(statuses(&http, &region, &fourth).await, [200, 200, 403]);
    assert_eq!(statuses(&http, &region, &third).await, [401, 401, 401]);
    let third = fourth;

    // The project deleted: everybody's tokens on it are refused; the
    // admin's own token (another project) is not.
    let r = admin_call(
        reqwest::Method::DELETE,
        format!("{identity}/v3/projects/{project}"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(statuses(&http, &region, &third).await, [401, 401, 401]);
    assert_eq!(statuses(&http, &region, &admin).await, [200, 200, 200]);
    region.shutdown().await;
}
