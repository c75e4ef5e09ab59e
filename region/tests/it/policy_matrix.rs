//! Roles × APIs across the whole region: for each API that exists, which of
//! admin, member, reader and no token may call it. One table ([`TABLE`],
//! then [`server_ops::ROWS`] and [`legacy_apis::ROWS`]); add a row for
//! every API that is added.

mod legacy_apis;
mod server_ops;

use std::net::SocketAddr;

use serde_json::Value;
use testkit::http::Client;

#[derive(Clone, Copy, Debug)]
enum Svc {
    Identity,
    Compute,
    Image,
    Placement,
}

/// (service, method, path, body, admin, member, reader, no token)
type Row = (
    Svc,
    &'static str,
    &'static str,
    Option<&'static str>,
    u16,
    u16,
    u16,
    u16,
);

const TABLE: &[Row] = &[
    // identity
    (
        Svc::Identity,
        "GET",
        "/v3/auth/projects",
        None,
        200,
        200,
        200,
        401,
    ),
    (Svc::Identity, "GET", "/v3/users", None, 200, 403, 403, 401),
    (
        Svc::Identity,
        "GET",
        "/v3/projects",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Identity,
        "GET",
        "/v3/role_assignments",
        None,
        200,
        403,
        403,
        401,
    ),
    // compute
    (
        Svc::Compute,
        "GET",
        "/v2.1/flavors",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/flavors/detail",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/detail",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/detail?all_tenants=1",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers",
        Some(
            r#"{"server": {"name": "m", "flavorRef": "1", "imageRef": "cirros-0.6.2-x86_64-disk", "networks": "none"}}"#,
        ),
        202,
        202,
        403,
        401,
    ),
    // image
    (Svc::Image, "GET", "/v2/images", None, 200, 200, 200, 401),
    (
        Svc::Image,
        "POST",
        "/v2/images",
        Some(r#"{"name": "m", "disk_format": "qcow2", "container_format": "bare"}"#),
        201,
        201,
        403,
        401,
    ),
    // placement: an administrator's API
    (
        Svc::Placement,
        "GET",
        "/resource_providers",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Placement,
        "GET",
        "/resource_classes",
        None,
        200,
        403,
        403,
        401,
    ),
    (Svc::Placement, "GET", "/traits", None, 200, 403, 403, 401),
    (
        Svc::Placement,
        "PUT",
        "/traits/CUSTOM_MATRIX",
        None,
        201,
        403,
        403,
        401,
    ),
    // compute: one server of the member's project (`{server}`); the power
    // actions are refused on its state (409) once the policy let them by.
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"os-start": null}"#),
        409,
        409,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"unpause": null}"#),
        409,
        409,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"resume": null}"#),
        409,
        409,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"lock": null}"#),
        202,
        202,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"unlock": null}"#),
        202,
        202,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/os-instance-actions",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/os-instance-actions/req-none",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/metadata",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/metadata",
        Some(r#"{"metadata": {"k": "v"}}"#),
        200,
        200,
        403,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/servers/{server}/metadata/k",
        Some(r#"{"meta": {"k": "w"}}"#),
        200,
        200,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/metadata/k",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/tags",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/servers/{server}/tags/t1",
        None,
        201,
        204,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/tags/t1",
        None,
        204,
        204,
        204,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/servers/{server}/tags/t1",
        None,
        204,
        404,
        403,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/servers/{server}/metadata/k",
        None,
        204,
        404,
        403,
        401,
    ),
    // compute: key pairs (each user its own; the reader is a user too)
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-keypairs",
        Some(
            r#"{"keypair": {"name": "matrix", "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINIp4W3nq3RqGc17pVDpZ60gLx8MvS/JhqDJwu/m5A2N m"}}"#,
        ),
        201,
        201,
        201,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-keypairs",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-keypairs/matrix",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/os-keypairs/matrix",
        None,
        204,
        204,
        204,
        401,
    ),
    // compute: flavor management, extra specs, access (admin)
    (
        Svc::Compute,
        "POST",
        "/v2.1/flavors",
        Some(
            r#"{"flavor": {"name": "matrix", "id": "matrix", "ram": 64, "vcpus": 1, "disk": 0, "os-flavor-access:is_public": false}}"#,
        ),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/flavors/1/os-extra_specs",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/flavors/matrix/os-extra_specs",
        Some(r#"{"extra_specs": {"hw:cpu_policy": "shared"}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/flavors/matrix/os-extra_specs/hw:cpu_policy",
        Some(r#"{"hw:cpu_policy": "dedicated"}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/flavors/matrix/os-extra_specs/hw:cpu_policy",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/flavors/matrix/action",
        Some(r#"{"addTenantAccess": {"tenant": "matrix-project"}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/flavors/matrix/os-flavor-access",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/flavors/matrix/action",
        Some(r#"{"removeTenantAccess": {"tenant": "matrix-project"}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/flavors/matrix",
        Some(r#"{"flavor": {"description": "matrix"}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/flavors/matrix",
        None,
        202,
        403,
        403,
        401,
    ),
    // compute: quotas of a project that is not the member's, and limits
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-quota-sets/matrix-project",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-quota-sets/matrix-project/detail",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-quota-sets/matrix-project/defaults",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/os-quota-sets/matrix-project",
        Some(r#"{"quota_set": {"instances": 3}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/os-quota-sets/matrix-project",
        None,
        202,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/limits",
        None,
        200,
        200,
        200,
        401,
    ),
    // compute: usage (all projects: admin; a project: its members)
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-simple-tenant-usage",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-simple-tenant-usage/matrix-project",
        None,
        200,
        403,
        403,
        401,
    ),
    // compute: quota classes and the usage audit log (admin)
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-quota-class-sets/default",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/os-quota-class-sets/matrix-class",
        Some(r#"{"quota_class_set": {"instances": 3}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-instance_usage_audit_log",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-instance_usage_audit_log/2026-01-01%2000:00:00",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-instance-usage-audit-log",
        None,
        200,
        403,
        403,
        401,
    ),
    // compute: operator APIs (services, hypervisors, aggregates, zones, server groups)
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-services",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/os-services/6f1f6a4e-9a47-4c7e-8f0e-000000000001",
        Some(r#"{"status": "enabled"}"#),
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/os-services/6f1f6a4e-9a47-4c7e-8f0e-000000000001",
        None,
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors/detail",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors/6f1f6a4e-9a47-4c7e-8f0e-000000000001",
        None,
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors/cell/search",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors/cell/servers",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors/statistics",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-aggregates",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-aggregates",
        Some(r#"{"aggregate": {"name": "matrix"}}"#),
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-aggregates/999999",
        None,
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "PUT",
        "/v2.1/os-aggregates/999999",
        Some(r#"{"aggregate": {"name": "m2"}}"#),
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/os-aggregates/999999",
        None,
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-aggregates/999999/action",
        Some(r#"{"add_host": {"host": "cell1-host01"}}"#),
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-aggregates/999999/action",
        Some(r#"{"remove_host": {"host": "cell1-host01"}}"#),
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-aggregates/999999/action",
        Some(r#"{"set_metadata": {"metadata": {"k": "v"}}}"#),
        404,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-availability-zone",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-availability-zone/detail",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-server-groups",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-server-groups?all_projects=True",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-server-groups",
        Some(r#"{"server_group": {"name": "m", "policy": "affinity"}}"#),
        200,
        200,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-server-groups/6f1f6a4e-9a47-4c7e-8f0e-000000000001",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/os-server-groups/6f1f6a4e-9a47-4c7e-8f0e-000000000001",
        None,
        404,
        404,
        404,
        401,
    ),
];

fn call(
    addr: SocketAddr,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let mut c = Client::new(addr)
        .with_header("openstack-api-version", "placement 1.39")
        .with_header("x-openstack-nova-api-version", "2.90");
    if let Some(t) = token {
        c = c.with_header("x-auth-token", t);
    }
    let r = c.request(method, path, body).expect("request");
    (r.status, r.body)
}

/// Boots a server as the member and waits until it is ACTIVE.
fn boot_server(compute: SocketAddr, member: &str) -> String {
    let (s, b) = call(
        compute,
        Some(member),
        "POST",
        "/v2.1/servers",
        Some(
            r#"{"server": {"name": "matrix", "flavorRef": "1", "imageRef": "cirros-0.6.2-x86_64-disk", "networks": "none"}}"#,
        ),
    );
    assert_eq!(s, 202, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    let id = v["server"]["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, b) = call(
            compute,
            Some(member),
            "GET",
            &format!("/v2.1/servers/{id}"),
            None,
        );
        let v: Value = serde_json::from_str(&b).unwrap_or_default();
        if v["server"]["status"] == "ACTIVE" {
            return id;
        }
        assert!(std::time::Instant::now() < deadline, "not ACTIVE: {b}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn roles_by_api_across_the_region() {
    let dir = testkit::temp_dir("region_policy_matrix");
    let r = super::start(&dir);
    let identity = r.addr("identity");
    let admin = super::login(identity, "admin", &r.export("OS_PASSWORD", 0), "admin");
    let member = super::login(identity, "demo", &r.export("OS_PASSWORD", 1), "demo");

    // A reader on the member's project, made through the admin API.
    let get = |path: &str| -> Value {
        let (s, b) = call(identity, Some(&admin), "GET", path, None);
        assert_eq!(s, 200, "{path}: {b}");
        serde_json::from_str(&b).unwrap()
    };
    let project = get("/v3/projects?name=demo")["projects"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let role = get("/v3/roles?name=reader")["roles"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, b) = call(
        identity,
        Some(&admin),
        "POST",
        "/v3/users",
        Some(
            r#"{"user": {"name": "viewer", "domain_id": "default", "password": "viewer-pass-1"}}"#,
        ),
    );
    assert_eq!(s, 201, "{b}");
    let user: Value = serde_json::from_str(&b).unwrap();
    let user = user["user"]["id"].as_str().unwrap().to_owned();
    let (s, b) = call(
        identity,
        Some(&admin),
        "PUT",
        &format!("/v3/projects/{project}/users/{user}/roles/{role}"),
        None,
    );
    assert!(s == 204 || s == 201, "{s}: {b}");
    let reader = super::login(identity, "viewer", "viewer-pass-1", "demo");

    let addr = |svc: Svc| match svc {
        Svc::Identity => identity,
        Svc::Compute => r.addr("compute"),
        Svc::Image => r.addr("image"),
        Svc::Placement => r.addr("placement"),
    };
    let server = boot_server(r.addr("compute"), &member);
    let mut failures = Vec::new();
    for &(svc, method, path, body, want_admin, want_member, want_reader, want_none) in TABLE
        .iter()
        .chain(server_ops::ROWS)
        .chain(legacy_apis::ROWS)
    {
        let path = &path.replace("{server}", &server);
        for (who, token, want) in [
            ("admin", Some(admin.as_str()), want_admin),
            ("member", Some(member.as_str()), want_member),
            ("reader", Some(reader.as_str()), want_reader),
            ("no token", None, want_none),
        ] {
            let (got, b) = call(addr(svc), token, method, path, body);
            if got != want {
                failures.push(format!(
                    "{svc:?} {method} {path} as {who}: got {got}, want {want}: {}",
                    b.chars().take(200).collect::<String>()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
