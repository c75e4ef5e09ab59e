//! `user_id` policy rules are checked against the server's user, as Nova
//! does: with `user_id:%(user_id)s` on a server API, a colleague in the
//! same project is refused what the server's own user may do.

use api_super::identity::policy::Policy;
use api_super::identity::BootstrapSpec;

use crate::common::{self, json as body, ADMIN_PW, MEMBER_PW};
use crate::compute::Region;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_id_rules_are_checked_against_the_servers_user() {
    let policy = Policy::defaults()
        .with_overrides([
            (
                "os_compute_api:servers:show",
                "rule:admin_api or user_id:%(user_id)s",
            ),
            (
                "os_compute_api:servers:delete",
                "rule:admin_api or user_id:%(user_id)s",
            ),
        ])
        .unwrap();
    let region = Region::start_full("owner_policy", 1, 1, |_| {}, None, policy).await;
    // A colleague: another user with the member role on the same project.
    region
        .env
        .running
        .identity
        .bootstrap(&BootstrapSpec {
            member: Some(("colleague".into(), MEMBER_PW.into(), "demo".into())),
            ..BootstrapSpec::admin(ADMIN_PW)
        })
        .await
        .unwrap();
    let (colleague, _) =
        common::token(region.env.addr(), "colleague", MEMBER_PW, Some("demo")).await;
    let id = region.boot(&region.member, "mine", "1").await;
    region.wait(&id, |s| s["status"] == "ACTIVE").await;
    // Twice each: the first read finds the mapping in the database, the
    // second in this process's memory of landed servers.
    for _ in 0..2 {
        let r = region.show(&region.member, &id).await;
        assert_eq!(r.status, 200, "the owner sees it: {}", r.body);
        // Same project, so not hidden: a 403 naming the policy.
        let r = region.show(&colleague, &id).await;
        assert_eq!(r.status, 403, "{}", r.body);
        let msg = body(&r)["forbidden"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(msg.contains("os_compute_api:servers:show"), "{}", r.body);
        let r = region.show(&region.admin, &id).await;
        assert_eq!(r.status, 200, "the admin sees it: {}", r.body);
    }
    let r = region
        .call(&colleague, "DELETE", &format!("/v2.1/servers/{id}"), None)
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        region.show(&region.member, &id).await.status,
        200,
        "not deleted"
    );
    let r = region
        .call(
            &region.member,
            "DELETE",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "the owner deletes it: {}", r.body);
    region.stop().await;
}
