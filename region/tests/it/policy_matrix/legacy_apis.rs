//! The rows of the extensions list and of the APIs Nova keeps for old
//! clients (the image and network proxies, `os-hypervisors/{id}/uptime`,
//! `os-hosts`): run after [`super::TABLE`]'s.

use super::{Row, Svc};

pub(super) const ROWS: &[Row] = &[
    (
        Svc::Compute,
        "GET",
        "/v2.1/extensions",
        None,
        200,
        200,
        200,
        401,
    ),
    // The image and network proxies: gone at 2.36 and 2.39, so 404 at
    // the latest microversion whatever the role (api_parity checks them).
    (
        Svc::Compute,
        "GET",
        "/v2.1/images",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/images/6f1f6a4e-9a47-4c7e-8f0e-000000000001/metadata",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-networks",
        None,
        404,
        404,
        404,
        401,
    ),
    // Gone at 2.88 (uptime) and 2.43 (os-hosts): 404 at the latest
    // microversion whatever the role; api_parity checks them below.
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hypervisors/6f1f6a4e-9a47-4c7e-8f0e-000000000001/uptime",
        None,
        404,
        404,
        404,
        401,
    ),
    (
        Svc::Compute,
        "GET",
        "/v2.1/os-hosts",
        None,
        404,
        404,
        404,
        401,
    ),
];
