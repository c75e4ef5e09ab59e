//! Compute API parity with Nova (issue 37), through the real `openstack`
//! CLI and openstacksdk against the region binary: each call's status
//! and body, errors included, as Nova's API reference and code give them.
//! openstacksdk's session makes the raw calls (any path, microversion and
//! body), the CLI the ordinary ones.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

mod extensions;
mod hosts;
mod images;
mod quotas;
mod server_ops;
mod servers;

/// Runs raw calls through openstacksdk's authenticated session: reads a
/// JSON list of `[method, path, microversion or null, body or null,
/// authenticated]` on stdin, the path relative to the Compute API's root
/// (the catalog's endpoint without `/v2.1`); prints `[status, body,
/// headers]` for each.
const SDK_CALLS: &str = r#"
import json, sys
import openstack
conn = openstack.connect()
endpoint = conn.compute.get_endpoint().rstrip('/')
root = endpoint[: -len('/v2.1')] if endpoint.endswith('/v2.1') else endpoint
out = []
for method, path, mv, body, authed in json.load(sys.stdin):
    headers = {'Accept': 'application/json'}
    if mv:
        headers['OpenStack-API-Version'] = 'compute ' + mv
    kw = {'headers': headers, 'raise_exc': False, 'authenticated': authed}
    if body is not None:
        kw['json'] = body
    r = conn.session.request(root + path, method, **kw)
    out.append([r.status_code, r.text, {k.lower(): v for k, v in r.headers.items()}])
print(json.dumps(out))
"#;

/// One raw call.
pub(crate) struct Call {
    method: &'static str,
    path: String,
    mv: Option<&'static str>,
    body: Option<Value>,
    authed: bool,
}

/// A call at `mv` (None: no microversion header).
pub(crate) fn call(
    method: &'static str,
    path: impl Into<String>,
    mv: Option<&'static str>,
    body: Option<Value>,
) -> Call {
    Call {
        method,
        path: path.into(),
        mv,
        body,
        authed: true,
    }
}

/// What a raw call answered.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) text: String,
    pub(crate) headers: serde_json::Map<String, Value>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// Nova's error body: `{kind: {"code": status, "message": …}}`.
    pub(crate) fn assert_error(&self, status: u16, kind: &str, message: &str) {
        assert_eq!(self.status, status, "{}", self.text);
        let v = self.json();
        assert_eq!(v[kind]["code"], status, "{v}");
        assert_eq!(v[kind]["message"], message, "{v}");
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(Value::as_str)
    }
}

/// A user of the region through openstacksdk (raw calls) and the CLI.
pub(crate) struct User {
    pub(crate) cli: Cli,
}

impl std::ops::Deref for User {
    type Target = Cli;
    fn deref(&self) -> &Cli {
        &self.cli
    }
}

impl User {
    pub(crate) fn calls(&self, calls: Vec<Call>) -> Vec<Answer> {
        let input: Vec<Value> = calls
            .iter()
            .map(|c| json!([c.method, c.path, c.mv, c.body, c.authed]))
            .collect();
        let mut child = Command::new(self.cli.bin.join("python"))
            .args(["-c", SDK_CALLS])
            .envs(self.cli.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run python");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(Value::Array(input).to_string().as_bytes())
            .expect("write calls");
        let out = child.wait_with_output().expect("python");
        assert!(
            out.status.success(),
            "openstacksdk calls failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("answers");
        v.as_array()
            .expect("a list")
            .iter()
            .map(|a| Answer {
                status: a[0].as_u64().expect("status") as u16,
                text: a[1].as_str().unwrap_or_default().to_owned(),
                headers: a[2].as_object().cloned().unwrap_or_default(),
            })
            .collect()
    }

    pub(crate) fn one(&self, c: Call) -> Answer {
        self.calls(vec![c]).pop().expect("one answer")
    }
}

/// The region binary with the admin and the member, or `None` (skip)
/// when the clients cannot be installed.
pub(crate) fn region(test: &str) -> Option<(super::Running, User, User)> {
    let bin = testkit::python::venv_or_skip(VENV, PACKAGES)?;
    let dir = testkit::temp_dir(test);
    let r = super::start_catalog(&dir, &[]);
    let admin = User {
        cli: Cli {
            bin: bin.clone(),
            env: os_env(&r, "admin", 0, "admin"),
        },
    };
    let member = User {
        cli: Cli {
            bin,
            env: os_env(&r, "demo", 1, "demo"),
        },
    };
    Some((r, admin, member))
}

/// Aggregates: every call's status and body as Nova's (create 200 without
/// hosts and metadata, actions 200 with the aggregate, DELETE 200 without
/// a body), and Nova's 400/404/409 with its wording.
#[test]
fn openstack_cli_aggregates_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_aggregates") else {
        return;
    };
    // The CLI's whole cycle.
    let agg = admin.json(&["aggregate", "create", "--zone", "az1", "rack1"]);
    assert_eq!(agg["availability_zone"], "az1", "{agg}");
    admin.ok(&["aggregate", "add", "host", "rack1", "cell1-host01"]);
    admin.ok(&["aggregate", "set", "--property", "ssd=true", "rack1"]);
    admin.ok(&["aggregate", "remove", "host", "rack1", "cell1-host01"]);
    admin.ok(&["aggregate", "delete", "rack1"]);
    let (ok, _, err) = admin.run(&["aggregate", "show", "rack1"]);
    assert!(!ok, "{err}");

    let agg = |name: &str, zone: Option<&str>| {
        let mut a = json!({"aggregate": {"name": name}});
        if let Some(z) = zone {
            a["aggregate"]["availability_zone"] = json!(z);
        }
        call("POST", "/v2.1/os-aggregates", Some("2.41"), Some(a))
    };
    let created = admin.calls(vec![
        agg("p1", None),
        agg("p2", Some("az2")),
        agg("p1", None),
        agg("p5", None),
        agg(" p3", None),
        agg("p3", Some("a:b")),
        call(
            "POST",
            "/v2.1/os-aggregates",
            None,
            Some(json!({"aggregate": {}})),
        ),
        call(
            "POST",
            "/v2.1/os-aggregates",
            None,
            Some(json!({"aggregate": {"name": "p4", "x": 1}})),
        ),
    ]);
    assert_eq!(created[0].status, 200, "{}", created[0].text);
    let p1 = created[0].json()["aggregate"].clone();
    assert!(
        p1.get("hosts").is_none() && p1.get("metadata").is_none(),
        "{p1}"
    );
    assert_eq!(p1["availability_zone"], Value::Null, "{p1}");
    assert_eq!(p1["deleted"], false, "{p1}");
    assert!(p1["uuid"].is_string(), "{p1}");
    let p2 = created[1].json()["aggregate"].clone();
    assert_eq!(p2["availability_zone"], "az2", "{p2}");
    created[2].assert_error(409, "conflictingRequest", "Aggregate p1 already exists.");
    created[4].assert_error(
        400,
        "badRequest",
        "An invalid 'name' value was provided. The name must be: printable characters. \
         Can not start or end with whitespace.",
    );
    created[5].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute availability_zone. Value: a:b. \
         'a:b' is not valid under any of the given schemas",
    );
    created[6].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute aggregate. Value: {}. 'name' is a required property",
    );
    created[7].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute aggregate. Value: {'name': 'p4', 'x': 1}. \
         Additional properties are not allowed ('x' was unexpected)",
    );
    let (id1, id2) = (p1["id"].as_i64().unwrap(), p2["id"].as_i64().unwrap());
    let id5 = created[3].json()["aggregate"]["id"].as_i64().unwrap();
    let action = |id: i64, body: Value| {
        call(
            "POST",
            format!("/v2.1/os-aggregates/{id}/action"),
            Some("2.41"),
            Some(body),
        )
    };
    let host = "cell1-host01";
    let a = admin.calls(vec![
        action(id1, json!({"add_host": {"host": host}})),
        action(id1, json!({"add_host": {"host": host}})),
        action(id1, json!({"add_host": {"host": "no-such-host"}})),
        action(99999, json!({"add_host": {"host": host}})),
        action(id1, json!({"add_host": {"host": "bad host"}})),
        action(
            id1,
            json!({"set_metadata": {"metadata": {"availability_zone": "az1", "k": "v"}}}),
        ),
        // p2 is in az2: the host cannot be in both.
        action(id2, json!({"add_host": {"host": host}})),
        action(
            id1,
            json!({"set_metadata": {"metadata": {"k": null, "k!": "v"}}}),
        ),
        action(
            id1,
            json!({"set_metadata": {"metadata": {"availability_zone": null}}}),
        ),
        action(
            id1,
            json!({"add_host": {"host": host}, "remove_host": {"host": host}}),
        ),
        action(id1, json!({"rename": {"name": "x"}})),
        call("DELETE", format!("/v2.1/os-aggregates/{id1}"), None, None),
        call("DELETE", "/v2.1/os-aggregates/abc", None, None),
        // p5 (no zone) takes the host; a zone for p5 would put it in two.
        action(id5, json!({"add_host": {"host": host}})),
        call(
            "PUT",
            format!("/v2.1/os-aggregates/{id5}"),
            None,
            Some(json!({"aggregate": {"availability_zone": "az5"}})),
        ),
        action(id1, json!({"remove_host": {"host": "cell1-host02"}})),
        action(id1, json!({"remove_host": {"host": "no-such-host"}})),
        action(99999, json!({"remove_host": {"host": host}})),
        action(id1, json!({"remove_host": {"host": host}})),
        call("DELETE", format!("/v2.1/os-aggregates/{id1}"), None, None),
        call("DELETE", format!("/v2.1/os-aggregates/{id1}"), None, None),
    ]);
    assert_eq!(a[0].status, 200, "{}", a[0].text);
    let added = a[0].json()["aggregate"].clone();
    assert_eq!(added["hosts"], json!([host]), "{added}");
    assert_eq!(added["metadata"], json!({}), "{added}");
    assert_eq!(added["uuid"], p1["uuid"], "{added}");
    a[1].assert_error(
        409,
        "conflictingRequest",
        &format!("Aggregate {id1} already has host {host}."),
    );
    a[2].assert_error(
        404,
        "itemNotFound",
        "Compute host no-such-host could not be found.",
    );
    a[3].assert_error(404, "itemNotFound", "Aggregate 99999 could not be found.");
    a[4].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute host. Value: bad host. \
         'bad host' does not match '^[a-zA-Z0-9-._]*$'",
    );
    assert_eq!(a[5].status, 200, "{}", a[5].text);
    let meta = a[5].json()["aggregate"].clone();
    assert_eq!(
        meta["metadata"],
        json!({"availability_zone": "az1", "k": "v"}),
        "{meta}"
    );
    assert_eq!(meta["availability_zone"], "az1", "{meta}");
    a[6].assert_error(
        409,
        "conflictingRequest",
        &format!(
            "Cannot add host to aggregate {id2}. Reason: One or more hosts already in \
             availability zone(s) ['az1']."
        ),
    );
    a[7].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute metadata. Value: {'k': None, 'k!': 'v'}. \
         'k!' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{1,255}$'",
    );
    a[8].assert_error(
        400,
        "badRequest",
        &format!(
            "Cannot update metadata of aggregate {id1}. Reason: Aggregate p1 does not \
             support empty named availability zone."
        ),
    );
    a[9].assert_error(400, "badRequest", "Malformed request body");
    a[10].assert_error(400, "badRequest", "There is no such action: rename");
    a[11].assert_error(
        400,
        "badRequest",
        &format!("Cannot remove host from aggregate {id1}. Reason: Host aggregate is not empty."),
    );
    a[12].assert_error(
        400,
        "badRequest",
        "Invalid input received: id must be an integer",
    );
    assert_eq!(a[13].status, 200, "{}", a[13].text);
    a[14].assert_error(
        400,
        "badRequest",
        &format!(
            "Cannot update aggregate {id5}. Reason: One or more hosts already in \
             availability zone(s) ['az1']."
        ),
    );
    for (i, h, id) in [
        (15, "cell1-host02", id1),
        (16, "no-such-host", id1),
        (17, host, 99999),
    ] {
        a[i].assert_error(
            404,
            "itemNotFound",
            &format!("Cannot remove host {h} in aggregate {id}"),
        );
    }
    assert_eq!(a[18].status, 200, "{}", a[18].text);
    let removed = a[18].json()["aggregate"].clone();
    assert_eq!(removed["hosts"], json!([]), "{removed}");
    assert_eq!(removed["metadata"]["k"], "v", "{removed}");
    // DELETE: 200 without a body.
    assert_eq!(a[19].status, 200, "{}", a[19].text);
    assert_eq!(a[19].text, "", "DELETE answered a body");
    assert!(
        a[19].header("x-compute-request-id").is_some(),
        "{:?}",
        a[19].headers
    );
    a[20].assert_error(
        404,
        "itemNotFound",
        &format!("Aggregate {id1} could not be found."),
    );
    // Below 2.41 no uuid; a member may not.
    let shown = admin.one(call(
        "GET",
        format!("/v2.1/os-aggregates/{id2}"),
        None,
        None,
    ));
    assert_eq!(shown.status, 200, "{}", shown.text);
    assert!(
        shown.json()["aggregate"].get("uuid").is_none(),
        "{}",
        shown.text
    );
    let denied = member.one(call(
        "DELETE",
        format!("/v2.1/os-aggregates/{id2}"),
        None,
        None,
    ));
    denied.assert_error(
        403,
        "forbidden",
        "Policy doesn't allow os_compute_api:os-aggregates:delete to be performed.",
    );
}

/// Boots `name` as `user` in `zone` (`az:host` forces a host, admins
/// only); its id once ACTIVE.
fn boot_on(user: &User, zone: &str, name: &str) -> String {
    let mut args = BOOT.to_vec();
    args.extend(["--availability-zone", zone, "--wait", name]);
    user.json(&args)["id"].as_str().unwrap().to_owned()
}

/// The cirros image every region serves.
pub(crate) const IMAGE: &str = "cirros-0.6.2-x86_64-disk";

/// `openstack server create` of m1.tiny from [`IMAGE`] without networks.
pub(crate) const BOOT: &[&str] = &[
    "server", "create", "--flavor", "m1.tiny", "--image", IMAGE, "--nic", "none",
];

/// Aggregates and instances, as Nova: a host holding instances may not
/// change zone by joining or leaving an aggregate (409), nor may the zone
/// of an aggregate whose hosts hold instances change (400).
#[test]
fn openstack_cli_aggregates_keep_instances_in_their_zone() {
    let Some((_r, admin, _member)) = region("parity_aggregate_instances") else {
        return;
    };
    let host = "cell1-host02";
    let vm = boot_on(&admin, &format!("nova:{host}"), "pinned");
    let zoned = admin.json(&["aggregate", "create", "--zone", "az9", "zoned"]);
    let plain = admin.json(&["aggregate", "create", "plain"]);
    admin.ok(&["aggregate", "add", "host", "plain", host]);
    let (zoned, plain) = (zoned["id"].as_i64().unwrap(), plain["id"].as_i64().unwrap());
    let path = |id: i64| format!("/v2.1/os-aggregates/{id}");
    let a = admin.calls(vec![
        call(
            "POST",
            format!("{}/action", path(zoned)),
            None,
            Some(json!({"add_host": {"host": host}})),
        ),
        call(
            "POST",
            format!("{}/action", path(plain)),
            None,
            Some(json!({"set_metadata": {"metadata": {"availability_zone": "az8"}}})),
        ),
        call(
            "PUT",
            path(plain),
            None,
            Some(json!({"aggregate": {"availability_zone": "az8"}})),
        ),
    ]);
    a[0].assert_error(
        409,
        "conflictingRequest",
        &format!(
            "Cannot add host to aggregate {zoned}. Reason: The host cannot be added to the \
             aggregate as the availability zone of the host would change from 'None' to 'az9' \
             but the host already has 1 instance(s). Changing the AZ of an existing instance is \
             not supported by this action. Move the instances away from this host then try \
             again. If you need to move the instances between AZs then you can use \
             shelve_offload and unshelve to achieve this.."
        ),
    );
    let in_zone = "Reason: One or more hosts contain instances in this zone.";
    a[1].assert_error(
        400,
        "badRequest",
        &format!("Cannot update metadata of aggregate {plain}. {in_zone}"),
    );
    a[2].assert_error(
        400,
        "badRequest",
        &format!("Cannot update aggregate {plain}. {in_zone}"),
    );
    // A zone-less aggregate leaves the host's zone as it is.
    admin.ok(&["aggregate", "remove", "host", "plain", host]);
    admin.ok(&["server", "delete", "--wait", &vm]);
    admin.ok(&["aggregate", "add", "host", "zoned", host]);
    // Leaving its zone with an instance: the remove's words.
    let vm = boot_on(&admin, &format!("az9:{host}"), "zoned-vm");
    let r = admin.one(call(
        "POST",
        format!("{}/action", path(zoned)),
        None,
        Some(json!({"remove_host": {"host": host}})),
    ));
    r.assert_error(
        409,
        "conflictingRequest",
        &format!(
            "Cannot remove host from aggregate {zoned}. Reason: The host cannot be removed from \
             the aggregate as the availability zone of the host would change from 'az9' to \
             'None' but the host already has 1 instance(s). Changing the AZ of an existing \
             instance is not supported by this action. Move the instances away from this host \
             then try again. If you need to move the instances between AZs then you can use \
             shelve_offload and unshelve to achieve this.."
        ),
    );
    admin.ok(&["server", "delete", "--wait", &vm]);
    admin.ok(&["aggregate", "remove", "host", "zoned", host]);
}

/// Versions: `GET /` lists v2.0 (deprecated, as Nova since 2025.2) then
/// v2.1; `/v2` is the v2.1 API at 2.1 whatever microversion is asked,
/// and answers without microversion headers.
#[test]
fn openstack_cli_versions_and_the_v2_api_answer_as_nova() {
    let Some((_r, admin, _member)) = region("parity_versions") else {
        return;
    };
    let unauthed = |path: &str| Call {
        authed: false,
        ..call("GET", path, None, None)
    };
    let a = admin.calls(vec![
        unauthed("/"),
        unauthed("/v2"),
        unauthed("/v2/"),
        unauthed("/v2.1/"),
        call("GET", "/v2/flavors/detail", Some("2.61"), None),
        call("GET", "/v2.1/flavors/detail", Some("2.61"), None),
        call("GET", "/v2/flavors/detail", Some("9.9"), None),
        call("GET", "/v2/os-keypairs", None, None),
        call("GET", "/v2/no-such-thing", None, None),
        unauthed("/v2/servers"),
    ]);
    assert_eq!(a[0].status, 200, "{}", a[0].text);
    let root = a[0].json();
    let versions = root["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 2, "{root}");
    assert_eq!(versions[0]["id"], "v2.0", "{root}");
    assert_eq!(versions[0]["status"], "DEPRECATED", "{root}");
    assert_eq!(versions[0]["version"], "", "{root}");
    assert_eq!(versions[0]["min_version"], "", "{root}");
    assert!(
        versions[0]["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with("/v2/"),
        "{root}"
    );
    assert_eq!(versions[1]["id"], "v2.1", "{root}");
    assert_eq!(versions[1]["status"], "CURRENT", "{root}");
    assert_eq!(versions[1]["version"], "2.104", "{root}");
    assert_eq!(versions[1]["min_version"], "2.1", "{root}");
    assert_eq!(versions[1]["links"].as_array().unwrap().len(), 1, "{root}");
    for v2 in &a[1..3] {
        assert_eq!(v2.status, 200, "{}", v2.text);
        let v = v2.json()["version"].clone();
        assert_eq!(v["id"], "v2.0", "{v}");
        assert_eq!(v["status"], "DEPRECATED", "{v}");
        assert_eq!(
            v["media-types"][0]["type"], "application/vnd.openstack.compute+json;version=2",
            "{v}"
        );
        assert!(
            v["links"][0]["href"].as_str().unwrap().ends_with("/v2/"),
            "{v}"
        );
    }
    assert_eq!(a[3].json()["version"]["id"], "v2.1", "{}", a[3].text);
    // `/v2` ignores the microversion: 2.1's flavors, no version headers.
    assert_eq!(a[4].status, 200, "{}", a[4].text);
    let legacy = a[4].json();
    assert!(
        legacy["flavors"][0].get("extra_specs").is_none()
            && legacy["flavors"][0].get("description").is_none(),
        "{legacy}"
    );
    assert!(
        a[4].header("openstack-api-version").is_none(),
        "{:?}",
        a[4].headers
    );
    assert!(a[4].header("x-openstack-nova-api-version").is_none());
    assert!(
        a[4].header("x-compute-request-id").is_some(),
        "{:?}",
        a[4].headers
    );
    let current = a[5].json();
    assert!(
        current["flavors"][0].get("extra_specs").is_some(),
        "{current}"
    );
    assert_eq!(a[5].header("openstack-api-version"), Some("compute 2.61"));
    // A version the v2.1 API would refuse (406) is ignored under /v2.
    assert_eq!(a[6].status, 200, "{}", a[6].text);
    assert_eq!(a[7].status, 200, "{}", a[7].text);
    assert!(a[7].json()["keypairs"].is_array(), "{}", a[7].text);
    a[8].assert_error(404, "itemNotFound", "The resource could not be found.");
    assert_eq!(a[9].status, 401, "/v2 needs a token too: {}", a[9].text);
}

/// Flavor extra specs: set (POST) 200 answering the body as given, PUT
/// of a key 200, DELETE 200 without a body; Nova's errors.
#[test]
fn openstack_cli_flavor_extra_specs_answer_as_nova() {
    let Some((_r, admin, _member)) = region("parity_extra_specs") else {
        return;
    };
    admin.ok(&[
        "flavor",
        "create",
        "--ram",
        "256",
        "--disk",
        "1",
        "--vcpus",
        "1",
        "--id",
        "x1",
        "--property",
        "hw:cpu_policy=shared",
        "x.one",
    ]);
    admin.ok(&["flavor", "set", "--property", "a=b", "x.one"]);
    admin.ok(&["flavor", "unset", "--property", "a", "x.one"]);
    let shown = admin.json(&["flavor", "show", "x.one"]);
    let props = shown["properties"].to_string();
    assert!(
        props.contains("hw:cpu_policy") && !props.contains("\"a\""),
        "{shown}"
    );

    let specs = "/v2.1/flavors/x1/os-extra_specs";
    let a = admin.calls(vec![
        call(
            "POST",
            specs,
            None,
            Some(json!({"extra_specs": {"n": 1, "s": "x"}})),
        ),
        call("GET", format!("{specs}/n"), None, None),
        call("PUT", format!("{specs}/n"), None, Some(json!({"n": "2"}))),
        call("PUT", format!("{specs}/n"), None, Some(json!({"m": "2"}))),
        call(
            "PUT",
            format!("{specs}/n"),
            None,
            Some(json!({"n": "2", "m": "3"})),
        ),
        call(
            "POST",
            specs,
            None,
            Some(json!({"extra_specs": {"t": true}})),
        ),
        call(
            "POST",
            specs,
            None,
            Some(json!({"extra_specs": {"k!": "v"}})),
        ),
        call("POST", specs, None, Some(json!({"specs": {}}))),
        call("DELETE", format!("{specs}/n"), None, None),
        call("DELETE", format!("{specs}/n"), None, None),
        call(
            "POST",
            "/v2.1/flavors/nope/os-extra_specs",
            None,
            Some(json!({"extra_specs": {"a": "b"}})),
        ),
        call("GET", specs, None, None),
    ]);
    assert_eq!(a[0].status, 200, "{}", a[0].text);
    assert_eq!(a[0].json(), json!({"extra_specs": {"n": 1, "s": "x"}}));
    assert_eq!(a[1].json(), json!({"n": "1"}), "{}", a[1].text);
    assert_eq!(a[2].status, 200, "{}", a[2].text);
    assert_eq!(a[2].json(), json!({"n": "2"}));
    a[3].assert_error(400, "badRequest", "Request body and URI mismatch");
    a[4].assert_error(
        400,
        "badRequest",
        "{'m': '3', 'n': '2'} has too many properties",
    );
    a[5].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute t. Value: True. True is not of type 'string', 'number'",
    );
    a[6].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute extra_specs. Value: {'k!': 'v'}. \
         'k!' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{1,255}$'",
    );
    a[7].assert_error(400, "badRequest", "'extra_specs' is a required property");
    assert_eq!(a[8].status, 200, "{}", a[8].text);
    assert_eq!(a[8].text, "", "DELETE answered a body");
    a[9].assert_error(
        404,
        "itemNotFound",
        "Flavor x1 has no extra specs with key n.",
    );
    a[10].assert_error(404, "itemNotFound", "Flavor nope could not be found.");
    assert_eq!(
        a[11].json(),
        json!({"extra_specs": {"hw:cpu_policy": "shared", "s": "x"}}),
        "{}",
        a[11].text
    );
}

/// Runs `cmd`, which must succeed; its standard output.
pub(crate) fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh self-signed certificate (PEM) and its SHA-1 fingerprint as
/// Nova shows it, made with the `openssl` CLI in `dir`.
fn certificate(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let cert = dir.join("cert.pem");
    stdout_of(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=t"])
            .args(["-days", "1", "-keyout"])
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(&cert),
    );
    let text = stdout_of(
        Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha1", "-in"])
            .arg(&cert),
    );
    let fp = text.trim().rsplit('=').next().unwrap().to_lowercase();
    (cert, fp)
}

/// Key pairs: an empty `public_key` is Nova's fingerprint 400 (it is an
/// import); x509 certificates import (2.2+) and are generated below 2.92
/// as Nova's (a self-signed certificate, the key as a PKCS#12 bundle);
/// from 2.92 `public_key` is required.
#[test]
fn openstack_cli_keypairs_answer_as_nova() {
    let Some((r, _admin, member)) = region("parity_keypairs") else {
        return;
    };
    let dir = testkit::temp_dir("parity_keypairs_files");
    let empty = dir.join("empty.pub");
    std::fs::write(&empty, "").unwrap();
    let (cert, cert_fp) = certificate(&dir);
    let (ok, _, err) = member.run(&[
        "keypair",
        "create",
        "--public-key",
        empty.to_str().unwrap(),
        "k0",
    ]);
    assert!(
        !ok && err.contains("Keypair data is invalid: failed to generate fingerprint"),
        "{err}"
    );
    // openstacksdk imports a certificate (the CLI's `--type` does not
    // reach the body with python-openstackclient 7.4.0: it passes
    // `key_type`, which openstacksdk's key pair does not know).
    let fp = stdout_of(
        Command::new(member.bin.join("python"))
            .args([
                "-c",
                "import openstack, sys; c = openstack.connect(); \
                 k = c.compute.create_keypair(name='kx', public_key=open(sys.argv[1]).read(), type='x509'); \
                 print(k.fingerprint)",
                cert.to_str().unwrap(),
            ])
            .envs(member.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    );
    assert_eq!(fp.trim(), cert_fp);
    let shown = member.json(&["--os-compute-api-version", "2.2", "keypair", "show", "kx"]);
    assert_eq!(shown["type"], "x509", "{shown}");

    let create = |mv: &'static str, kp: Value| {
        call(
            "POST",
            "/v2.1/os-keypairs",
            Some(mv),
            Some(json!({ "keypair": kp })),
        )
    };
    let a = member.calls(vec![
        create("2.2", json!({"name": "gen-x", "type": "x509"})),
        create("2.91", json!({"name": "e1", "public_key": ""})),
        create(
            "2.2",
            json!({"name": "e2", "type": "x509", "public_key": ""}),
        ),
        create("2.92", json!({"name": "g2", "type": "x509"})),
        create("2.1", json!({"name": "t1", "type": "x509"})),
        create("2.2", json!({"name": "t2", "type": "pgp"})),
        create("2.91", json!({"name": "bad@name", "public_key": ""})),
        create("2.1", json!({"name": "gen-ssh"})),
    ]);
    assert_eq!(a[0].status, 201, "{}", a[0].text);
    let g = a[0].json()["keypair"].clone();
    assert_eq!(g["type"], "x509", "{g}");
    assert!(
        g["public_key"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----"),
        "{g}"
    );
    assert_eq!(g["fingerprint"].as_str().unwrap().len(), 59, "{g}");
    // The private key is a PKCS#12 bundle (base64) without a password,
    // holding the certificate shown: openssl reads it.
    let p12 = dir.join("gen-x.p12.b64");
    std::fs::write(&p12, g["private_key"].as_str().unwrap()).unwrap();
    let text = stdout_of(Command::new("sh").arg("-c").arg(format!(
        "base64 -d {} | openssl pkcs12 -nokeys -passin pass: | openssl x509 -noout -subject -fingerprint -sha1",
        p12.display()
    )))
    .to_lowercase();
    let user = g["user_id"].as_str().unwrap();
    assert!(text.contains(&format!("cn = {user}")), "{text}");
    assert!(
        text.contains(&g["fingerprint"].as_str().unwrap().to_lowercase()),
        "{text}"
    );
    a[1].assert_error(
        400,
        "badRequest",
        "Keypair data is invalid: failed to generate fingerprint",
    );
    a[2].assert_error(
        400,
        "badRequest",
        "Keypair data is invalid: failed to generate X509 fingerprint. Error message: \
         Unable to load PEM file. See \
         https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file for more \
         details. MalformedFraming",
    );
    a[3].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute keypair. Value: {'name': 'g2', 'type': 'x509'}. \
         'public_key' is a required property",
    );
    a[4].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute keypair. Value: {'name': 't1', 'type': 'x509'}. \
         Additional properties are not allowed ('type' was unexpected)",
    );
    a[5].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute type. Value: pgp. 'pgp' is not one of ['ssh', 'x509']",
    );
    a[6].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute name. Value: bad@name. \
         'bad@name' does not match '^[_\\\\- a-zA-Z0-9]+$'",
    );
    // 2.1: 200, a generated ssh key, no `type`.
    assert_eq!(a[7].status, 200, "{}", a[7].text);
    assert!(
        a[7].json()["keypair"].get("type").is_none(),
        "{}",
        a[7].text
    );
    let listed = member.json(&["keypair", "list"]);
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["Name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["gen-ssh", "gen-x", "kx"], "{listed}");
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
