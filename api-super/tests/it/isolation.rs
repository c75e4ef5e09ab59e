//! A member of another project gets 404 from every server-scoped API on a
//! server it does not own, and changes nothing: the server's state, its
//! metadata, tags and actions are the same afterwards.

use serde_json::{json, Value};

use crate::common::json as body;
use crate::compute::Region;

/// Every server-scoped call: (method, path after `/v2.1/servers/{id}`,
/// body).
fn calls() -> Vec<(&'static str, &'static str, Option<Value>)> {
    let mut v: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "", None),
        ("PUT", "", Some(json!({"server": {"name": "taken"}}))),
        ("DELETE", "", None),
        (
            "POST",
            "/remote-consoles",
            Some(json!({"remote_console": {"protocol": "serial", "type": "serial"}})),
        ),
        ("GET", "/os-instance-actions", None),
        (
            "GET",
            "/os-instance-actions/req-00000000-0000-0000-0000-000000000000",
            None,
        ),
        ("GET", "/metadata", None),
        (
            "POST",
            "/metadata",
            Some(json!({"metadata": {"k": "taken"}})),
        ),
        ("PUT", "/metadata", Some(json!({"metadata": {}}))),
        ("GET", "/metadata/owner", None),
        (
            "PUT",
            "/metadata/owner",
            Some(json!({"meta": {"owner": "taken"}})),
        ),
        ("DELETE", "/metadata/owner", None),
        ("GET", "/tags", None),
        ("PUT", "/tags", Some(json!({"tags": []}))),
        ("DELETE", "/tags", None),
        ("GET", "/tags/mine", None),
        ("PUT", "/tags/taken", None),
        ("DELETE", "/tags/mine", None),
    ];
    for action in [
        json!({"os-stop": null}),
        json!({"os-start": null}),
        json!({"reboot": {"type": "SOFT"}}),
        json!({"pause": null}),
        json!({"unpause": null}),
        json!({"suspend": null}),
        json!({"resume": null}),
        json!({"rebuild": {"imageRef": crate::compute::IMAGE}}),
        json!({"os-getConsoleOutput": {}}),
        json!({"os-getVNCConsole": {"type": "novnc"}}),
        json!({"os-getSerialConsole": {"type": "serial"}}),
        json!({"lock": null}),
        json!({"unlock": null}),
        json!({"forceDelete": null}),
    ] {
        v.push(("POST", "/action", Some(action)));
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_projects_member_gets_404_everywhere_and_changes_nothing() {
    let region = Region::start("isolation", 1, 1).await;
    let id = region.boot(&region.member, "mine", "1").await;
    region.wait(&id, |s| s["status"] == "ACTIVE").await;
    let path = format!("/v2.1/servers/{id}");
    let r = region
        .call(
            &region.member,
            "PUT",
            &format!("{path}/metadata/owner"),
            Some(json!({"meta": {"owner": "me"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = region
        .call(&region.member, "PUT", &format!("{path}/tags/mine"), None)
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let before = snapshot(&region, &path).await;
    for (method, suffix, b) in calls() {
        let r = region
            .call(&region.other, method, &format!("{path}{suffix}"), b.clone())
            .await;
        assert_eq!(
            r.status, 404,
            "{method} {suffix} {b:?} as another project: {}",
            r.body
        );
        let msg = body(&r)["itemNotFound"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            msg.contains("could not be found"),
            "{method} {suffix}: {}",
            r.body
        );
    }
    assert_eq!(snapshot(&region, &path).await, before, "nothing changed");
    // And the owner still can.
    let r = region
        .call(&region.member, "GET", &format!("{path}/tags/mine"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    region.stop().await;
}

/// What a server looks like to its owner: name, status, task state, lock,
/// metadata, tags and how many actions it has.
async fn snapshot(r: &Region, path: &str) -> Vec<Value> {
    let s = body(&r.call(&r.member, "GET", path, None).await)["server"].clone();
    let actions = body(
        &r.call(
            &r.member,
            "GET",
            &format!("{path}/os-instance-actions"),
            None,
        )
        .await,
    )["instanceActions"]
        .as_array()
        .map_or(0, Vec::len);
    let mut v: Vec<Value> = [
        "name",
        "status",
        "OS-EXT-STS:task_state",
        "locked",
        "metadata",
        "tags",
    ]
    .iter()
    .map(|k| s[*k].clone())
    .collect();
    v.push(json!(actions));
    v
}
