//! The rows of the server operations (`os-resetState`, `restore`,
//! diagnostics, the server password, a server's security groups) and of
//! external events: run after [`super::TABLE`]'s, on the same server.

use super::{Row, Svc};

pub(super) const ROWS: &[Row] = &[
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"os-resetState": {"state": "active"}}"#),
        202,
        403,
        403,
        401,
    ),
    // Never soft-deleted here: 409 once the policy let it by.
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"restore": null}"#),
        409,
        409,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/diagnostics",
        None,
        200,
        403,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/os-server-password",
        None,
        200,
        200,
        200,
        401,
    ),
    (
        Svc::Compute,
        "DELETE",
        "/v2.1/servers/{server}/os-server-password",
        None,
        204,
        204,
        403,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/servers/{server}/os-security-groups",
        None,
        200,
        200,
        200,
        401,
    ),
    // No port for `default` (404) once the policy let it by.
    (
        Svc::Compute,
        "POST",
        "/v2.1/servers/{server}/action",
        Some(r#"{"addSecurityGroup": {"name": "default"}}"#),
        404,
        404,
        403,
        401,
    ),
    // An event for no instance: 207 (its code 404) once the policy let
    // it by.
    (
        Svc::Compute,
        "POST",
        "/v2.1/os-server-external-events",
        Some(
            r#"{"events": [{"server_uuid": "6f1f6a4e-9a47-4c7e-8f0e-000000000001", "name": "network-changed"}]}"#,
        ),
        207,
        403,
        403,
        401,
    ),
];
