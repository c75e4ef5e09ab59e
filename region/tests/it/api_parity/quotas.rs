//! Quota parity with Nova (issue 37): per-user quota sets, quota classes
//! (the `default` class as the defaults), the 2.40 paging of
//! `os-simple-tenant-usage` and `os-instance_usage_audit_log`, through
//! the `openstack` CLI and openstacksdk against the region binary (the
//! harness in [`super`]).

use std::process::Command;

use serde_json::{json, Value};

use super::{call, region, stdout_of, User, BOOT};

/// The caller's `(project_id, user_id)`.
fn ids(user: &User) -> (String, String) {
    let t = user.json(&["token", "issue"]);
    (
        t["project_id"].as_str().expect("project_id").to_owned(),
        t["user_id"].as_str().expect("user_id").to_owned(),
    )
}

/// A row of the CLI's `quota show` (a list of Resource/Limit rows or an
/// object).
fn field(v: &Value, name: &str) -> Value {
    if let Some(a) = v.as_array() {
        return a
            .iter()
            .find(|r| r.get("Resource").and_then(Value::as_str) == Some(name))
            .and_then(|r| r.get("Limit").cloned())
            .unwrap_or(Value::Null);
    }
    v.get(name).cloned().unwrap_or(Value::Null)
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

/// Per-user quota sets: shown, set, detailed and deleted with `user_id`
/// as Nova's; a user's limit within the project's (Nova's 400s) and the
/// project's at least the sum of its users'; `force`; a server create
/// held to the user's limit.
#[test]
fn openstack_cli_per_user_quotas_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_user_quotas") else {
        return;
    };
    let (project, user) = ids(&member);
    let q = format!("/v2.1/os-quota-sets/{project}");
    let uq = format!("{q}?user_id={user}");
    let aq = format!("{q}?user_id={}", ids(&admin).1);
    let put = |path: &str, set: Value| call("PUT", path, None, Some(json!({ "quota_set": set })));
    let a = admin.calls(vec![
        call("GET", uq.clone(), None, None),
        put(&uq, json!({"cores": 21})),
        put(&uq, json!({"instances": 1, "key_pairs": 5})),
        call("GET", uq.clone(), None, None),
        call("GET", q.clone(), None, None),
        put(&q, json!({"key_pairs": 4})),
        put(&q, json!({"key_pairs": 4, "force": true})),
        put(&aq, json!({"instances": 10})),
        put(&aq, json!({"instances": 9})),
        put(&q, json!({"key_pairs": 100})),
        call("GET", format!("{q}?user_id="), None, None),
    ]);
    // Without limits of its own, the user has the project's.
    assert_eq!(a[0].status, 200, "{}", a[0].text);
    assert_eq!(a[0].json()["quota_set"]["instances"], 10);
    assert_eq!(a[0].json()["quota_set"]["id"], project.as_str());
    a[1].assert_error(
        400,
        "badRequest",
        "Quota limit 21 for cores must be less than or equal to 20.",
    );
    assert_eq!(a[2].status, 200, "{}", a[2].text);
    let set = a[2].json()["quota_set"].clone();
    assert_eq!(set["instances"], 1, "{set}");
    assert_eq!(set["key_pairs"], 5, "{set}");
    assert_eq!(set["cores"], 20, "{set}");
    assert!(set.get("id").is_none(), "{set}");
    assert_eq!(a[3].json()["quota_set"]["instances"], 1);
    // The project's own are unchanged.
    assert_eq!(a[4].json()["quota_set"]["instances"], 10);
    // The project's limit covers its users' limits ...
    a[5].assert_error(
        400,
        "badRequest",
        "Quota limit 4 for key_pairs must be greater than or equal to already used and reserved 5.",
    );
    // ... unless forced.
    assert_eq!(a[6].status, 200, "{}", a[6].text);
    // Another user's most: what the project has left to give out (10
    // less the member's 1).
    a[7].assert_error(
        400,
        "badRequest",
        "Quota limit 10 for instances must be less than or equal to 9.",
    );
    assert_eq!(a[8].status, 200, "{}", a[8].text);
    assert_eq!(a[9].status, 200, "{}", a[9].text);
    // An empty user_id is the project.
    assert_eq!(a[10].json()["quota_set"]["instances"], 10);

    // A member may read but not set its quotas.
    let m = member.calls(vec![
        call("GET", uq.clone(), None, None),
        put(&uq, json!({"instances": 5})),
        call("DELETE", uq.clone(), None, None),
    ]);
    assert_eq!(m[0].json()["quota_set"]["instances"], 1, "{}", m[0].text);
    assert_eq!(m[1].status, 403, "{}", m[1].text);
    assert_eq!(m[2].status, 403, "{}", m[2].text);

    // The server create is held to the user's limit of 1 instance.
    let mut args = BOOT.to_vec();
    args.extend(["--wait", "mine"]);
    member.json(&args);
    let mut args = BOOT.to_vec();
    args.push("second");
    let (ok, _, err) = member.run(&args);
    assert!(!ok, "a second server past the user's limit: {err}");
    assert!(
        err.contains(
            "Quota exceeded for instances: Requested 1, but already used 1 of 1 instances"
        ),
        "{err}"
    );
    // detail: the user's usage; key_pairs is never counted (Nova: 0).
    member.ok(&["keypair", "create", "k1"]);
    let d = admin.calls(vec![
        call("GET", format!("{q}/detail?user_id={user}"), None, None),
        call("GET", format!("{q}/detail"), None, None),
        put(&uq, json!({"instances": 0})),
    ]);
    let det = d[0].json()["quota_set"].clone();
    assert_eq!(
        det["instances"],
        json!({"limit": 1, "in_use": 1, "reserved": 0}),
        "{det}"
    );
    assert_eq!(det["cores"]["in_use"], 1, "{det}");
    assert_eq!(det["key_pairs"]["in_use"], 0, "{det}");
    assert_eq!(det["id"], project.as_str(), "{det}");
    assert_eq!(d[1].json()["quota_set"]["instances"]["in_use"], 1);
    // A user's limit may not go below what the user uses.
    d[2].assert_error(
        400,
        "badRequest",
        "Quota limit 0 for instances must be greater than or equal to already used and reserved 1.",
    );
    // A user's own server_groups limit holds at group create.
    assert_eq!(admin.one(put(&uq, json!({"server_groups": 1}))).status, 200);
    member.ok(&["server", "group", "create", "--policy", "affinity", "g1"]);
    let (ok, _, err) = member.run(&["server", "group", "create", "--policy", "affinity", "g2"]);
    assert!(!ok, "a second group past the user's limit: {err}");
    assert!(
        err.contains("Quota exceeded, too many server groups."),
        "{err}"
    );
    let g = admin.one(call(
        "GET",
        format!("{q}/detail?user_id={user}"),
        None,
        None,
    ));
    assert_eq!(
        g.json()["quota_set"]["server_groups"]["in_use"],
        1,
        "{}",
        g.text
    );
    // DELETE with user_id: the user back to the project's limits.
    let del = admin.calls(vec![
        call("DELETE", uq.clone(), None, None),
        call("GET", uq.clone(), None, None),
    ]);
    assert_eq!(del[0].status, 202, "{}", del[0].text);
    assert_eq!(del[1].json()["quota_set"]["instances"], 10);
    let mut args = BOOT.to_vec();
    args.extend(["--wait", "second"]);
    member.json(&args);
}

/// `os-quota-class-sets`: the CLI's `quota show --class` and `quota set
/// --class`; the resources of each microversion (2.50, 2.57); the
/// `default` class's limits as every project's defaults, shown and held to
/// at server create; admin only.
#[test]
fn openstack_cli_quota_classes_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_quota_classes") else {
        return;
    };
    let (project, _) = ids(&member);
    // python-openstackclient 7.4 dropped `quota show --class` (its `quota
    // set --class` stays); openstacksdk reads the class as it did.
    let class = |user: &User| -> Value {
        let out = stdout_of(
            Command::new(user.bin.join("python"))
                .args([
                    "-c",
                    "import json, openstack\nc = openstack.connect()\n\
                     print(json.dumps(c.compute.get_quota_class_set('default').to_dict()))",
                ])
                .envs(user.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        );
        serde_json::from_str(out.trim()).expect("json")
    };
    assert_eq!(class(&admin)["instances"], 10);
    admin.ok(&["quota", "set", "--class", "--instances", "7", "default"]);
    let c = class(&admin);
    assert_eq!(c["instances"], 7, "{c}");
    // openstacksdk asks for 2.56: the server group resources, no network
    // ones.
    assert_eq!(c["server_groups"], 10, "{c}");
    // The default class is every project's default.
    let q = member.json(&["quota", "show", "--compute"]);
    assert_eq!(field(&q, "instances"), 7, "{q}");
    let q = admin.json(&["quota", "show", "--default", "--compute", &project]);
    assert_eq!(field(&q, "instances"), 7, "{q}");

    let c = "/v2.1/os-quota-class-sets/default";
    let put = |mv: &'static str, set: Value| {
        call("PUT", c, Some(mv), Some(json!({ "quota_class_set": set })))
    };
    let a = admin.calls(vec![
        call("GET", c, Some("2.1"), None),
        call("GET", c, Some("2.50"), None),
        call("GET", c, Some("2.57"), None),
        put("2.1", json!({"server_groups": 9})),
        put("2.50", json!({"fixed_ips": 1})),
        put("2.57", json!({"injected_files": 1})),
        put("2.57", json!({"instances": -2})),
        put("2.57", json!({"force": true})),
        call("GET", c, Some("2.57"), None),
        call("GET", "/v2.1/os-quota-class-sets/gold", Some("2.57"), None),
        call("PUT", c, Some("2.57"), Some(json!({"quota_set": {}}))),
    ]);
    let base = ["cores", "instances", "key_pairs", "metadata_items", "ram"];
    let with = |extra: &[&str]| {
        let mut k: Vec<String> = base.iter().chain(extra).map(|s| s.to_string()).collect();
        k.push("id".into());
        k.sort();
        k
    };
    let injected = [
        "injected_file_content_bytes",
        "injected_file_path_bytes",
        "injected_files",
    ];
    let network = [
        "fixed_ips",
        "floating_ips",
        "security_group_rules",
        "security_groups",
    ];
    let groups = ["server_group_members", "server_groups"];
    let below_50: Vec<&str> = injected.iter().chain(&network).copied().collect();
    let at_50: Vec<&str> = injected.iter().chain(&groups).copied().collect();
    assert_eq!(
        keys(&a[0].json()["quota_class_set"]),
        with(&below_50),
        "{}",
        a[0].text
    );
    assert_eq!(a[0].json()["quota_class_set"]["id"], "default");
    assert_eq!(
        keys(&a[1].json()["quota_class_set"]),
        with(&at_50),
        "{}",
        a[1].text
    );
    assert_eq!(
        keys(&a[2].json()["quota_class_set"]),
        with(&groups),
        "{}",
        a[2].text
    );
    // 2.1 accepts the server group resources but does not show them.
    assert_eq!(a[3].status, 200, "{}", a[3].text);
    let mut shown = with(&below_50);
    shown.retain(|k| k != "id");
    assert_eq!(
        keys(&a[3].json()["quota_class_set"]),
        shown,
        "{}",
        a[3].text
    );
    a[4].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute quota_class_set. Value: {'fixed_ips': 1}. Additional properties are not allowed ('fixed_ips' was unexpected)",
    );
    a[5].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute quota_class_set. Value: {'injected_files': 1}. Additional properties are not allowed ('injected_files' was unexpected)",
    );
    assert_eq!(a[6].status, 400, "{}", a[6].text);
    a[7].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute quota_class_set. Value: {'force': True}. Additional properties are not allowed ('force' was unexpected)",
    );
    assert_eq!(
        a[8].json()["quota_class_set"]["server_groups"],
        9,
        "{}",
        a[8].text
    );
    // Another class: its own (none) over the default class.
    assert_eq!(
        a[9].json()["quota_class_set"]["instances"],
        7,
        "{}",
        a[9].text
    );
    assert_eq!(a[9].json()["quota_class_set"]["id"], "gold");
    a[10].assert_error(
        400,
        "badRequest",
        "'quota_class_set' is a required property",
    );
    // Admin only.
    let m = member.calls(vec![
        call("GET", c, None, None),
        put("2.57", json!({"instances": 100})),
    ]);
    assert_eq!(m[0].status, 403, "{}", m[0].text);
    assert_eq!(m[1].status, 403, "{}", m[1].text);
    // A server create is held to the default class's limits.
    admin.ok(&["quota", "set", "--class", "--cores", "0", "default"]);
    let (ok, _, err) = member.run(&BOOT.iter().copied().chain(["held"]).collect::<Vec<_>>());
    assert!(!ok, "a server past the default class's cores: {err}");
    assert!(
        err.contains("Quota exceeded for cores: Requested 1, but already used 0 of 0 cores"),
        "{err}"
    );
    admin.ok(&["quota", "set", "--class", "--cores", "20", "default"]);
}

/// `os-simple-tenant-usage` at 2.40: `limit` and `marker` page the
/// instances (project, uuid order) with a `next` link when the page is
/// full; an unknown marker is Nova's 400; the CLI's `usage list` follows
/// the links.
#[test]
fn openstack_cli_simple_tenant_usage_pages_as_nova() {
    let Some((_r, admin, member)) = region("parity_usage_paging") else {
        return;
    };
    let (project, _) = ids(&member);
    let mut servers: Vec<String> = ["u1", "u2", "u3"]
        .iter()
        .map(|n| {
            let mut args = BOOT.to_vec();
            args.extend(["--wait", n]);
            member.json(&args)["id"].as_str().unwrap().to_owned()
        })
        .collect();
    servers.sort();
    let period = "start=2026-01-01T00:00:00";
    let list = |q: &str| {
        call(
            "GET",
            format!("/v2.1/os-simple-tenant-usage?{period}&detailed=1{q}"),
            Some("2.40"),
            None,
        )
    };
    let a = admin.calls(vec![
        list("&limit=2"),
        list("&limit=2&marker=MARKER"),
        list("&marker=nope"),
        list("&limit=x"),
        list(""),
        call(
            "GET",
            format!("/v2.1/os-simple-tenant-usage?{period}&detailed=1&limit=1"),
            Some("2.39"),
            None,
        ),
        call(
            "GET",
            format!("/v2.1/os-simple-tenant-usage/{project}?{period}&limit=2"),
            Some("2.40"),
            None,
        ),
    ]);
    let uuids = |v: &Value| -> Vec<String> {
        v["tenant_usages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["server_usages"].as_array().unwrap().clone())
            .map(|s| s["instance_id"].as_str().unwrap().to_owned())
            .collect()
    };
    // Nova's order: cell after cell, by project and uuid in each.
    let all = a[4].json();
    let order = uuids(&all);
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, servers, "{all}");
    assert!(all.get("tenant_usages_links").is_none(), "{all}");
    let p1 = a[0].json();
    assert_eq!(uuids(&p1), order[..2].to_vec(), "{p1}");
    let next = p1["tenant_usages_links"][0].clone();
    assert_eq!(next["rel"], "next", "{p1}");
    let href = next["href"].as_str().unwrap();
    assert!(
        href.contains("/v2.1/os-simple-tenant-usage?")
            && href.contains(&format!("marker={}", order[1]))
            && href.contains("limit=2"),
        "{href}"
    );
    let p2 = admin
        .one(list(&format!("&limit=2&marker={}", order[1])))
        .json();
    assert_eq!(uuids(&p2), order[2..].to_vec(), "{p2}");
    assert!(p2.get("tenant_usages_links").is_none(), "{p2}");
    a[2].assert_error(400, "badRequest", "Marker nope could not be found.");
    a[3].assert_error(
        400,
        "badRequest",
        "Invalid input for query parameters limit. Value: x. 'x' does not match '^[0-9]*$'",
    );
    a[1].assert_error(400, "badRequest", "Marker MARKER could not be found.");
    // Below 2.40 limit is no paging.
    assert_eq!(uuids(&a[5].json()), order, "{}", a[5].text);
    assert!(a[5].json().get("tenant_usages_links").is_none());
    // One project: tenant_usage_links.
    let one = a[6].json();
    let n = one["tenant_usage"]["server_usages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(n, 2, "{one}");
    let href = one["tenant_usage_links"][0]["href"].as_str().unwrap();
    assert!(
        href.contains(&format!("/v2.1/os-simple-tenant-usage/{project}?")),
        "{href}"
    );
    // The CLI's usage list (openstacksdk sends `detailed=True`, which
    // Nova, taking only "1", answers without `server_usages`).
    let u = admin.json(&["usage", "list", "--start", "2026-01-01"]);
    let row = u
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["Project"] == project.as_str() || r["Project"] == "demo")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(row["CPU Hours"].as_f64().unwrap_or(0.0) > 0.0, "{u}");
    assert_eq!(row["Servers"], Value::Null, "{u}");
}

/// `os-instance_usage_audit_log`: Nova's answer with the audit task off
/// (every compute host not run, the last completed month), before a
/// timestamp, Nova's 400 for a bad one; admin only.
#[test]
fn openstack_cli_instance_usage_audit_log_answers_as_nova() {
    let Some((_r, admin, member)) = region("parity_usage_audit") else {
        return;
    };
    let services = admin.json(&["compute", "service", "list", "--service", "nova-compute"]);
    let mut hosts: Vec<String> = services
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Host"].as_str().unwrap().to_owned())
        .collect();
    hosts.sort();
    hosts.dedup();
    assert!(!hosts.is_empty(), "{services}");
    let a = admin.calls(vec![
        call("GET", "/v2.1/os-instance_usage_audit_log", None, None),
        call(
            "GET",
            "/v2.1/os-instance_usage_audit_log/2026-02-01%2000:00:00",
            None,
            None,
        ),
        call(
            "GET",
            "/v2.1/os-instance_usage_audit_log/2026-03-15%2010:00:00.5",
            None,
            None,
        ),
        call("GET", "/v2.1/os-instance_usage_audit_log/bad", None, None),
        call("GET", "/v2.1/os-instance-usage-audit-log", None, None),
    ]);
    let l = a[0].json()["instance_usage_audit_logs"].clone();
    let mut not_run: Vec<String> = serde_json::from_value(l["hosts_not_run"].clone()).unwrap();
    not_run.sort();
    assert_eq!(not_run, hosts, "{l}");
    assert_eq!(l["num_hosts"], hosts.len(), "{l}");
    assert_eq!(l["num_hosts_not_run"], hosts.len(), "{l}");
    assert_eq!(l["num_hosts_done"], 0, "{l}");
    assert_eq!(l["num_hosts_running"], 0, "{l}");
    assert_eq!(l["total_instances"], 0, "{l}");
    assert_eq!(l["total_errors"], 0, "{l}");
    assert_eq!(l["log"], json!({}), "{l}");
    assert_eq!(
        l["overall_status"],
        format!("0 of {} hosts done. 0 errors.", hosts.len()),
        "{l}"
    );
    let b = a[1].json()["instance_usage_audit_log"].clone();
    assert_eq!(b["period_beginning"], "2025-12-01 00:00:00", "{b}");
    assert_eq!(b["period_ending"], "2026-01-01 00:00:00", "{b}");
    let c = a[2].json()["instance_usage_audit_log"].clone();
    assert_eq!(c["period_beginning"], "2026-02-01 00:00:00", "{c}");
    assert_eq!(c["period_ending"], "2026-03-01 00:00:00", "{c}");
    a[3].assert_error(400, "badRequest", "Invalid timestamp for date bad");
    assert_eq!(a[4].status, 200, "{}", a[4].text);
    let m = member.one(call("GET", "/v2.1/os-instance_usage_audit_log", None, None));
    assert_eq!(m.status, 403, "{}", m.text);
}
