//! Placement's policy: upstream Placement's default rules, overridden by
//! the file `policy_file` (YAML or JSON, as oslo.policy writes them),
//! evaluated by the engine every API shares ([`fabric::policy`]).
//!
//! Upstream's defaults make every API but the version document an
//! administrator's or a service's (`admin_or_service_api`: the roles
//! `admin` or `service`, which the services' own users hold); a policy
//! file can open an API to others, e.g.
//! `"placement:resource_providers:list": "role:reader"`.

use fabric::policy::{Policy, PolicyError};

/// Upstream Placement's defaults.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("admin_api", "role:admin"),
    ("service_api", "role:service"),
    ("admin_or_service_api", "rule:admin_api or rule:service_api"),
    (
        "placement:allocation_candidates:list",
        "rule:admin_or_service_api",
    ),
    ("placement:allocations:delete", "rule:admin_or_service_api"),
    ("placement:allocations:list", "rule:admin_or_service_api"),
    ("placement:allocations:manage", "rule:admin_or_service_api"),
    ("placement:allocations:update", "rule:admin_or_service_api"),
    ("placement:reshaper:reshape", "rule:admin_or_service_api"),
    (
        "placement:resource_classes:create",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_classes:delete",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_classes:list",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_classes:show",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_classes:update",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:aggregates:list",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:aggregates:update",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:allocations:list",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:create",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:delete",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:inventories:create",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:inventories:delete",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:inventories:list",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:inventories:show",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:inventories:update",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:list",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:show",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:traits:delete",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:traits:list",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:traits:update",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:update",
        "rule:admin_or_service_api",
    ),
    (
        "placement:resource_providers:usages",
        "rule:admin_or_service_api",
    ),
    ("placement:traits:delete", "rule:admin_or_service_api"),
    ("placement:traits:list", "rule:admin_or_service_api"),
    ("placement:traits:show", "rule:admin_or_service_api"),
    ("placement:traits:update", "rule:admin_or_service_api"),
    ("placement:usages", "rule:admin_or_service_api"),
];

/// The defaults, with the overrides of `policy_file` when it is not empty.
pub fn load(policy_file: &str) -> Result<Policy, PolicyError> {
    Policy::from_defaults(&[DEFAULTS]).with_policy_file(policy_file)
}
