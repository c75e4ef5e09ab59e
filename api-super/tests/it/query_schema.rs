//! Unknown query parameters as Nova's query schemas treat them: ignored
//! below the microversion where a call's schema forbids them (2.53, 2.58,
//! 2.75 or 2.102), a 400 in the OpenStack error format from it; ignored
//! at every microversion by the calls whose schema never forbids them.

use serde_json::{json, Value};

use crate::common::json as body;
use crate::compute::Region;

/// One request at microversion `2.<mv>`.
async fn at(
    region: &Region,
    mv: u32,
    token: &str,
    method: &str,
    path: &str,
    b: Option<Value>,
) -> testkit::http::Response {
    crate::operator::at(region, token, &format!("2.{mv}"), method, path, b).await
}

/// `path` with one more query parameter.
fn plus(path: &str, param: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{param}")
}

/// Nova's 400 for one unknown parameter (`pattern`: the server list's
/// schema, which has `patternProperties`).
fn unexpected(name: &str, pattern: bool) -> Value {
    let message = if pattern {
        format!("'{name}' does not match any of the regexes: '^_'")
    } else {
        format!("Additional properties are not allowed ('{name}' was unexpected)")
    };
    json!({"badRequest": {"code": 400, "message": message}})
}

/// A call with a query schema: token, method, path, the microversion
/// from which an unknown parameter is a 400, the answer without one, body.
type Case<'a> = (&'a str, &'static str, String, u32, u16, Option<Value>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused_from_each_schemas_microversion() {
    let region = Region::start("query_schema", 1, 1).await;
    let (admin, member) = (region.admin.clone(), region.member.clone());
    let (admin, member) = (admin.as_str(), member.as_str());
    let project = region.env.boot.member.clone().unwrap().1;

    // What the calls below name: a server (with metadata and a tag), an
    // extra spec, a private flavor, a key pair, an aggregate, a group.
    let server = region.boot(member, "q1", "1").await;
    region.wait(&server, |s| s["status"] == "ACTIVE").await;
    let base = format!("/v2.1/servers/{server}");
    let r = region
        .call(
            member,
            "PUT",
            &format!("{base}/metadata/k"),
            Some(json!({"meta": {"k": "v"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = region
        .call(member, "PUT", &format!("{base}/tags/t1"), None)
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = region
        .call(member, "GET", &format!("{base}/os-instance-actions"), None)
        .await;
    let request_id = body(&r)["instanceActions"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = region
        .call(
            admin,
            "POST",
            "/v2.1/flavors/2/os-extra_specs",
            Some(json!({"extra_specs": {"hw:watchdog_action": "none"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = region
        .call(
            admin,
            "POST",
            "/v2.1/flavors",
            Some(
                json!({"flavor": {"name": "private", "id": "priv", "ram": 64, "vcpus": 1,
                "disk": 1, "os-flavor-access:is_public": false}}),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        &region,
        91,
        member,
        "POST",
        "/v2.1/os-keypairs",
        Some(json!({"keypair": {"name": "kp"}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = region
        .call(
            admin,
            "POST",
            "/v2.1/os-aggregates",
            Some(json!({"aggregate": {"name": "agg"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let aggregate = body(&r)["aggregate"]["id"].clone();
    let r = region
        .call(
            member,
            "POST",
            "/v2.1/os-server-groups",
            Some(json!({"server_group": {"name": "g", "policy": "affinity"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let group = body(&r)["server_group"]["id"].as_str().unwrap().to_owned();

    let quota = json!({"quota_set": {"key_pairs": 100}});
    let cases: Vec<Case<'_>> = vec![
        (member, "GET", "/v2.1/flavors".into(), 75, 200, None),
        (
            member,
            "GET",
            "/v2.1/flavors/detail?minRam=0".into(),
            75,
            200,
            None,
        ),
        (member, "GET", "/v2.1/flavors/1".into(), 102, 200, None),
        (
            member,
            "GET",
            "/v2.1/flavors/2/os-extra_specs".into(),
            102,
            200,
            None,
        ),
        (
            member,
            "GET",
            "/v2.1/flavors/2/os-extra_specs/hw:watchdog_action".into(),
            102,
            200,
            None,
        ),
        (
            admin,
            "GET",
            "/v2.1/flavors/priv/os-flavor-access".into(),
            102,
            200,
            None,
        ),
        (member, "GET", "/v2.1/os-keypairs".into(), 75, 200, None),
        (member, "GET", "/v2.1/os-keypairs/kp".into(), 75, 200, None),
        (
            admin,
            "GET",
            format!("/v2.1/os-quota-sets/{project}"),
            75,
            200,
            None,
        ),
        (
            admin,
            "GET",
            format!("/v2.1/os-quota-sets/{project}/detail"),
            75,
            200,
            None,
        ),
        (
            admin,
            "PUT",
            format!("/v2.1/os-quota-sets/{project}"),
            75,
            200,
            Some(quota),
        ),
        (
            admin,
            "DELETE",
            format!("/v2.1/os-quota-sets/{project}"),
            75,
            202,
            None,
        ),
        (member, "GET", "/v2.1/limits".into(), 75, 200, None),
        (
            admin,
            "GET",
            "/v2.1/os-simple-tenant-usage?detailed=1".into(),
            75,
            200,
            None,
        ),
        (
            member,
            "GET",
            format!("/v2.1/os-simple-tenant-usage/{project}"),
            75,
            200,
            None,
        ),
        (member, "GET", "/v2.1/servers?name=q".into(), 75, 200, None),
        (member, "GET", "/v2.1/servers/detail".into(), 75, 200, None),
        (member, "GET", base.clone(), 102, 200, None),
        (
            member,
            "GET",
            format!("{base}/os-instance-actions"),
            58,
            200,
            None,
        ),
        (
            member,
            "GET",
            format!("{base}/os-instance-actions/{request_id}"),
            102,
            200,
            None,
        ),
        (member, "GET", format!("{base}/metadata"), 102, 200, None),
        (member, "GET", format!("{base}/metadata/k"), 102, 200, None),
        (
            admin,
            "GET",
            "/v2.1/os-services?binary=nova-compute".into(),
            75,
            200,
            None,
        ),
        (admin, "GET", "/v2.1/os-hypervisors".into(), 53, 200, None),
        (
            admin,
            "GET",
            "/v2.1/os-hypervisors/detail".into(),
            53,
            200,
            None,
        ),
        (admin, "GET", "/v2.1/os-aggregates".into(), 102, 200, None),
        (
            admin,
            "GET",
            format!("/v2.1/os-aggregates/{aggregate}"),
            102,
            200,
            None,
        ),
        (
            member,
            "GET",
            "/v2.1/os-availability-zone".into(),
            102,
            200,
            None,
        ),
        (
            admin,
            "GET",
            "/v2.1/os-availability-zone/detail".into(),
            102,
            200,
            None,
        ),
        (
            member,
            "GET",
            "/v2.1/os-server-groups".into(),
            75,
            200,
            None,
        ),
        (
            member,
            "GET",
            format!("/v2.1/os-server-groups/{group}"),
            102,
            200,
            None,
        ),
    ];
    for (tok, method, path, from, ok, b) in &cases {
        let servers = path.starts_with("/v2.1/servers?") || path == "/v2.1/servers/detail";
        // Below: ignored, the answer is the one without it.
        for mv in [from - 1, *from] {
            let r = at(&region, mv, tok, method, path, b.clone()).await;
            assert_eq!(r.status, *ok, "{method} {path} at 2.{mv}: {}", r.body);
        }
        let r = at(
            &region,
            from - 1,
            tok,
            method,
            &plus(path, "bogus=1"),
            b.clone(),
        )
        .await;
        assert_eq!(
            r.status,
            *ok,
            "{method} {path}&bogus at 2.{}: {}",
            from - 1,
            r.body
        );
        // From it: Nova's 400, and nothing done.
        for mv in [*from, 104] {
            let r = at(&region, mv, tok, method, &plus(path, "bogus=1"), b.clone()).await;
            assert_eq!(r.status, 400, "{method} {path}&bogus at 2.{mv}: {}", r.body);
            assert_eq!(
                body(&r),
                unexpected("bogus", servers),
                "{method} {path} at 2.{mv}"
            );
        }
    }

    // The hypervisor's id is its uuid from 2.53.
    let r = at(&region, 52, admin, "GET", "/v2.1/os-hypervisors", None).await;
    let old_id = body(&r)["hypervisors"][0]["id"].clone();
    let r = at(&region, 53, admin, "GET", "/v2.1/os-hypervisors", None).await;
    let uuid = body(&r)["hypervisors"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = at(
        &region,
        52,
        admin,
        "GET",
        &format!("/v2.1/os-hypervisors/{old_id}?bogus=1"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        &region,
        53,
        admin,
        "GET",
        &format!("/v2.1/os-hypervisors/{uuid}?with_servers=true"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        &region,
        53,
        admin,
        "GET",
        &format!("/v2.1/os-hypervisors/{uuid}?bogus=1"),
        None,
    )
    .await;
    assert_eq!(body(&r), unexpected("bogus", false));

    // The 400 comes before anything else the call would say: policy, a
    // server that does not exist.
    let r = at(
        &region,
        75,
        member,
        "GET",
        "/v2.1/os-services?bogus=1",
        None,
    )
    .await;
    assert_eq!(body(&r), unexpected("bogus", false));
    let gone = "/v2.1/servers/00000000-0000-0000-0000-000000000000?bogus=1";
    assert_eq!(
        at(&region, 101, member, "GET", gone, None).await.status,
        404
    );
    assert_eq!(
        body(&at(&region, 102, member, "GET", gone, None).await),
        unexpected("bogus", false)
    );

    // Several unknown parameters: all of them, sorted, quoted as Python
    // quotes them.
    let r = at(
        &region,
        75,
        member,
        "GET",
        "/v2.1/flavors?zz=1&minRam=0&it%27s=2&zz=3",
        None,
    )
    .await;
    assert_eq!(
        body(&r)["badRequest"]["message"],
        "Additional properties are not allowed (\"it's\", 'zz' were unexpected)"
    );
    let r = at(&region, 75, member, "GET", "/v2.1/servers?b=1&a=2", None).await;
    assert_eq!(
        body(&r)["badRequest"]["message"],
        "'a', 'b' do not match any of the regexes: '^_'"
    );
    // What a schema knows depends on the microversion: `name` filters
    // flavors from 2.102 (an unknown parameter from 2.75 until then);
    // `changes-before` lists instance actions from 2.66.
    let r = at(&region, 74, member, "GET", "/v2.1/flavors?name=tiny", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        body(&r)["flavors"].as_array().unwrap().len(),
        6,
        "ignored: {}",
        r.body
    );
    let r = at(&region, 101, member, "GET", "/v2.1/flavors?name=tiny", None).await;
    assert_eq!(body(&r), unexpected("name", false));
    let r = at(&region, 102, member, "GET", "/v2.1/flavors?name=tiny", None).await;
    assert_eq!(body(&r)["flavors"][0]["name"], "m1.tiny", "{}", r.body);
    let actions = format!("{base}/os-instance-actions?changes-before=2100-01-01T00:00:00Z");
    let r = at(&region, 65, member, "GET", &actions, None).await;
    assert_eq!(body(&r), unexpected("changes-before", false));
    assert_eq!(
        at(&region, 66, member, "GET", &actions, None).await.status,
        200
    );
    // The server list knows names starting with `_` (its pattern) and
    // refuses them itself, for a caller that may use every filter; other
    // callers' are dropped.
    let r = at(&region, 75, admin, "GET", "/v2.1/servers?_x=1", None).await;
    assert_eq!(
        body(&r)["badRequest"]["message"],
        "Invalid filter field: _x."
    );
    let r = at(&region, 75, member, "GET", "/v2.1/servers?_x=1", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Below 2.75 an unknown parameter does not filter, for anyone.
    for (tok, q) in [(admin, "?all_tenants=1&bogus=x"), (member, "?bogus=x")] {
        let r = at(&region, 74, tok, "GET", &format!("/v2.1/servers{q}"), None).await;
        assert_eq!(body(&r)["servers"][0]["id"], server, "{q}: {}", r.body);
    }

    // Calls whose schema never forbids unknown parameters ignore them at
    // every microversion: version discovery, server tags and the quota
    // defaults (Nova defines 2.102 schemas for these two but its handlers
    // do not use them), the hypervisor statistics, search and servers,
    // and calls without a query schema (a server update, an action).
    for (tok, mv, method, path, ok, b) in [
        (
            member,
            104,
            "GET",
            format!("{base}/tags?bogus=1"),
            200,
            None,
        ),
        (
            member,
            104,
            "GET",
            format!("{base}/tags/t1?bogus=1"),
            204,
            None,
        ),
        (
            member,
            104,
            "GET",
            format!("/v2.1/os-quota-sets/{project}/defaults?bogus=1"),
            200,
            None,
        ),
        (
            admin,
            87,
            "GET",
            "/v2.1/os-hypervisors/statistics?bogus=1".into(),
            200,
            None,
        ),
        (
            admin,
            52,
            "GET",
            "/v2.1/os-hypervisors/c1-host1/search?bogus=1".into(),
            200,
            None,
        ),
        (
            admin,
            52,
            "GET",
            "/v2.1/os-hypervisors/c1-host1/servers?bogus=1".into(),
            200,
            None,
        ),
        (
            member,
            104,
            "PUT",
            format!("{base}?bogus=1"),
            200,
            Some(json!({"server": {"name": "q1"}})),
        ),
        (
            member,
            104,
            "POST",
            format!("{base}/action?bogus=1"),
            202,
            Some(json!({"lock": null})),
        ),
        (member, 104, "GET", "/v2.1?bogus=1".into(), 200, None),
    ] {
        let r = at(&region, mv, tok, method, &path, b).await;
        assert_eq!(r.status, ok, "{method} {path} at 2.{mv}: {}", r.body);
    }

    // A key pair's delete has a schema: refused from 2.75 (the key pair
    // stays), done below.
    let r = at(
        &region,
        75,
        member,
        "DELETE",
        "/v2.1/os-keypairs/kp?bogus=1",
        None,
    )
    .await;
    assert_eq!(body(&r), unexpected("bogus", false));
    let r = at(
        &region,
        74,
        member,
        "DELETE",
        "/v2.1/os-keypairs/kp?bogus=1",
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        at(&region, 74, member, "GET", "/v2.1/os-keypairs/kp", None)
            .await
            .status,
        404
    );
    region.stop().await;
}
