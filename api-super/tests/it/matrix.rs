//! Roles × APIs: for every API that exists, which of admin, member and
//! reader (each holding a project-scoped token on their own project) may
//! call it. "Allowed" is any answer but 401/403 (a 404 or 409 means the
//! policy let the request through); "denied" is exactly 403.
//!
//! Add a row for every API you add (Compute, Image, Placement when they
//! take tokens from here), with upstream's default expectation.

use serde_json::{json, Value};

use crate::common::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum E {
    Allow,
    Deny,
}
use E::{Allow, Deny};

/// (method, path template, body, admin, member, reader). Templates:
/// `{admin_project}`, `{demo_project}`, `{demo_user}`, `{admin_user}`,
/// `{reader_role}`, `{self_token}` (the caller's own token as subject),
/// `{admin_token}` (the admin's token as subject), `{n}` (a fresh name).
/// One row: method, path template, body, then admin, member, reader.
type Row = (&'static str, &'static str, Option<&'static str>, E, E, E);

const TABLE: &[Row] = &[
    ("GET", "/v3/auth/projects", None, Allow, Allow, Allow),
    ("GET", "/v3/auth/catalog", None, Allow, Allow, Allow),
    (
        "GET",
        "/v3/auth/tokens#{self_token}",
        None,
        Allow,
        Allow,
        Allow,
    ),
    (
        "HEAD",
        "/v3/auth/tokens#{self_token}",
        None,
        Allow,
        Allow,
        Allow,
    ),
    (
        "GET",
        "/v3/auth/tokens#{admin_token}",
        None,
        Allow,
        Deny,
        Deny,
    ),
    (
        "DELETE",
        "/v3/auth/tokens#{admin_token}",
        None,
        Allow,
        Deny,
        Deny,
    ),
    ("GET", "/v3/domains", None, Allow, Deny, Deny),
    ("GET", "/v3/domains/default", None, Allow, Allow, Allow),
    ("GET", "/v3/projects", None, Allow, Deny, Deny),
    (
        "POST",
        "/v3/projects",
        Some(r#"{"project": {"name": "{n}"}}"#),
        Allow,
        Deny,
        Deny,
    ),
    (
        "GET",
        "/v3/projects/{demo_project}",
        None,
        Allow,
        Allow,
        Allow,
    ),
    (
        "GET",
        "/v3/projects/{admin_project}",
        None,
        Allow,
        Deny,
        Deny,
    ),
    (
        "DELETE",
        "/v3/projects/nonexistent",
        None,
        Allow,
        Deny,
        Deny,
    ),
    ("GET", "/v3/users", None, Allow, Deny, Deny),
    (
        "POST",
        "/v3/users",
        Some(r#"{"user": {"name": "{n}", "password": "x"}}"#),
        Allow,
        Deny,
        Deny,
    ),
    ("GET", "/v3/users/{demo_user}", None, Allow, Allow, Deny),
    ("GET", "/v3/users/{admin_user}", None, Allow, Deny, Deny),
    (
        "GET",
        "/v3/users/{demo_user}/projects",
        None,
        Allow,
        Allow,
        Deny,
    ),
    ("DELETE", "/v3/users/nonexistent", None, Allow, Deny, Deny),
    ("GET", "/v3/roles", None, Allow, Deny, Deny),
    (
        "POST",
        "/v3/roles",
        Some(r#"{"role": {"name": "{n}"}}"#),
        Allow,
        Deny,
        Deny,
    ),
    ("GET", "/v3/roles/{reader_role}", None, Allow, Deny, Deny),
    (
        "GET",
        "/v3/projects/{demo_project}/users/{demo_user}/roles",
        None,
        Allow,
        Deny,
        Deny,
    ),
    (
        "PUT",
        "/v3/projects/{demo_project}/users/{demo_user}/roles/{reader_role}",
        None,
        Allow,
        Deny,
        Deny,
    ),
    (
        "HEAD",
        "/v3/projects/{demo_project}/users/{demo_user}/roles/{reader_role}",
        None,
        Allow,
        Deny,
        Deny,
    ),
    (
        "DELETE",
        "/v3/projects/{demo_project}/users/nobody/roles/{reader_role}",
        None,
        Allow,
        Deny,
        Deny,
    ),
    ("GET", "/v3/role_assignments", None, Allow, Deny, Deny),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_by_identity_api() {
    let env = start("matrix", |_| {}).await;
    let a = env.addr();
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let (member, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    // A reader on the demo project.
    let (demo_user, demo_project) = env.boot.member.clone().unwrap();
    let r = authed(
        a,
        &admin,
        "POST",
        "/v3/users",
        Some(json!({"user": {"name": "viewer", "password": "vpw"}})),
    )
    .await;
    let viewer = json(&r)["user"]["id"].as_str().unwrap().to_owned();
    let reader_role = env
        .boot
        .roles
        .iter()
        .find(|(n, _)| n == "reader")
        .unwrap()
        .1
        .clone();
    let grant = format!("/v3/projects/{demo_project}/users/{viewer}/roles/{reader_role}");
    assert_eq!(authed(a, &admin, "PUT", &grant, None).await.status, 204);
    let (reader, body) = token(a, "viewer", "vpw", Some("demo")).await;
    assert_eq!(body["token"]["roles"].as_array().unwrap().len(), 1);

    let mut failures = Vec::new();
    let mut n = 0;
    for (method, template, body, want_admin, want_member, want_reader) in TABLE {
        for (who, tok, want) in [
            ("admin", &admin, want_admin),
            ("member", &member, want_member),
            ("reader", &reader, want_reader),
        ] {
            n += 1;
            let fill = |s: &str| {
                s.replace("{admin_project}", &env.boot.admin_project_id)
                    .replace("{demo_project}", &demo_project)
                    .replace("{demo_user}", &demo_user)
                    .replace("{admin_user}", &env.boot.admin_user_id)
                    .replace("{reader_role}", &reader_role)
                    .replace("{n}", &format!("matrix-{who}-{n}"))
            };
            let path = fill(template);
            let (path, subject) = match path.split_once('#') {
                Some((p, "{self_token}")) => (p.to_owned(), Some(tok.to_string())),
                Some((p, _)) => (p.to_owned(), Some(admin.clone())),
                None => (path, None),
            };
            // Revoking the admin's token would end the test: revoke a fresh one.
            let subject = match (method, subject) {
                (&"DELETE", Some(_)) => Some(token(a, "admin", ADMIN_PW, Some("admin")).await.0),
                (_, s) => s,
            };
            let mut headers = vec![("x-auth-token", tok.as_str())];
            if let Some(s) = &subject {
                headers.push(("x-subject-token", s.as_str()));
            }
            let body: Option<Value> = body.map(|b| serde_json::from_str(&fill(b)).unwrap());
            let r = req(a, method, &path, &headers, body).await;
            let got = match r.status {
                403 => Deny,
                401 => {
                    failures.push(format!("{who} {method} {path}: 401 {}", r.body));
                    continue;
                }
                _ => Allow,
            };
            if got != *want {
                failures.push(format!(
                    "{who} {method} {path}: expected {want:?}, got {} {}",
                    r.status, r.body
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "policy mismatches:\n{}",
        failures.join("\n")
    );
}
