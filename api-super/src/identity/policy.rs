//! The policy engine: oslo.policy's rule language (the subset the default
//! rules use), the default rules of Keystone (the identity subset), Nova and
//! Placement, and overrides from a policy file.
//!
//! Rule language: `@` (always), `!` (never), `role:NAME`, `rule:NAME`,
//! `is_admin:True`, `CRED:%(TARGET)s` (a credential equals a target value),
//! `CRED:literal`, combined with `and`, `or`, `not` and parentheses.
//! Credentials: `user_id`, `project_id`, `domain_id` (the project's domain),
//! `token.project.domain.id`, `token.user.domain.id`, `system_scope` (never
//! set: system scope is not supported).
//!
//! Roles are hierarchical through implied roles (admin ⇒ member ⇒ reader),
//! expanded when the token is issued, so `role:reader` holds for a member.
//!
//! Policy file: YAML (`"rule name": "check string"` per line, as
//! `oslo.policy` writes them) or JSON (a flat object), by extension.
//! A rule in the file replaces the default of the same name.
//!
//! Every denial is logged at `warn` on the `audit` target with the user,
//! project, action and request id. Never a token.

use std::path::Path;

pub use fabric::policy::{PolicyError, Target};

/// Keystone's defaults for the identity APIs served here.
pub const IDENTITY_DEFAULTS: &[(&str, &str)] = &[
    ("admin_required", "role:admin"),
    ("service_role", "role:service"),
    (
        "service_admin_or_token_subject",
        "rule:admin_required or rule:service_role or user_id:%(target.token.user_id)s",
    ),
    ("identity:validate_token", "rule:service_admin_or_token_subject"),
    ("identity:check_token", "rule:service_admin_or_token_subject"),
    ("identity:revoke_token", "rule:service_admin_or_token_subject"),
    (
        "identity:list_revoke_events",
        "rule:admin_required or rule:service_role",
    ),
    (
        "identity:get_domain",
        "rule:admin_required or token.project.domain.id:%(target.domain.id)s or token.user.domain.id:%(target.domain.id)s",
    ),
    ("identity:list_domains", "rule:admin_required"),
    (
        "identity:get_project",
        "rule:admin_required or project_id:%(target.project.id)s",
    ),
    ("identity:list_projects", "rule:admin_required"),
    ("identity:create_project", "rule:admin_required"),
    ("identity:update_project", "rule:admin_required"),
    ("identity:delete_project", "rule:admin_required"),
    (
        "identity:list_user_projects",
        "rule:admin_required or user_id:%(target.user.id)s",
    ),
    (
        "identity:get_user",
        "rule:admin_required or user_id:%(target.user.id)s",
    ),
    ("identity:list_users", "rule:admin_required"),
    ("identity:create_user", "rule:admin_required"),
    ("identity:delete_user", "rule:admin_required"),
    ("identity:update_user", "rule:admin_required"),
    ("identity:get_role", "rule:admin_required"),
    ("identity:list_roles", "rule:admin_required"),
    ("identity:create_role", "rule:admin_required"),
    ("identity:check_grant", "rule:admin_required"),
    ("identity:list_grants", "rule:admin_required"),
    ("identity:create_grant", "rule:admin_required"),
    ("identity:revoke_grant", "rule:admin_required"),
    ("identity:list_role_assignments", "rule:admin_required"),
    // Services and regions as the catalog names them (read-only here).
    ("identity:list_services", "rule:admin_required or rule:service_role"),
    ("identity:get_service", "rule:admin_required or rule:service_role"),
    ("identity:list_regions", ""),
    ("identity:get_region", ""),
    // Unified limits: anyone authenticated reads the defaults and the
    // limits of the project they are scoped to (the handler narrows the
    // list); admins and services read every project's; admins write.
    ("identity:get_registered_limit", ""),
    ("identity:list_registered_limits", ""),
    ("identity:create_registered_limits", "rule:admin_required"),
    ("identity:update_registered_limit", "rule:admin_required"),
    ("identity:delete_registered_limit", "rule:admin_required"),
    ("identity:get_limit_model", ""),
    ("identity:get_limit", ""),
    ("identity:list_limits", ""),
    ("identity:create_limits", "rule:admin_required"),
    ("identity:update_limit", "rule:admin_required"),
    ("identity:delete_limit", "rule:admin_required"),
];

/// Nova's defaults (2023.1 "secure RBAC", project scope): readers read,
/// members act on their own project, admins do everything.
pub const NOVA_DEFAULTS: &[(&str, &str)] = &[
    ("context_is_admin", "role:admin"),
    ("admin_api", "role:admin"),
    (
        "project_member_api",
        "role:member and project_id:%(project_id)s",
    ),
    (
        "project_reader_api",
        "role:reader and project_id:%(project_id)s",
    ),
    (
        "project_member_or_admin",
        "rule:project_member_api or rule:context_is_admin",
    ),
    (
        "project_reader_or_admin",
        "rule:project_reader_api or rule:context_is_admin",
    ),
    (
        "os_compute_api:servers:index",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:servers:detail",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:servers:index:get_all_tenants",
        "rule:admin_api",
    ),
    (
        "os_compute_api:servers:detail:get_all_tenants",
        "rule:admin_api",
    ),
    ("os_compute_api:servers:allow_all_filters", "rule:admin_api"),
    (
        "os_compute_api:servers:show",
        "rule:project_reader_or_admin",
    ),
    ("os_compute_api:servers:show:host_status", "rule:admin_api"),
    (
        "os_compute_api:servers:create",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:create:forced_host",
        "rule:admin_api",
    ),
    (
        "os_compute_api:servers:create:trusted_certs",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:rebuild:trusted_certs",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:create:zero_disk_flavor",
        "rule:admin_api",
    ),
    (
        "compute:servers:create:requested_destination",
        "rule:admin_api",
    ),
    (
        "os_compute_api:servers:delete",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:update",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:reboot",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:start",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:stop",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:resize",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:servers:rebuild",
        "rule:project_member_or_admin",
    ),
    ("os_compute_api:os-flavor-manage:create", "rule:admin_api"),
    ("os_compute_api:os-flavor-manage:update", "rule:admin_api"),
    ("os_compute_api:os-flavor-manage:delete", "rule:admin_api"),
    ("os_compute_api:os-services:list", "rule:admin_api"),
    ("os_compute_api:os-services:update", "rule:admin_api"),
    ("os_compute_api:os-services:delete", "rule:admin_api"),
    ("os_compute_api:os-hypervisors:list", "rule:admin_api"),
    (
        "os_compute_api:os-hypervisors:list-detail",
        "rule:admin_api",
    ),
    ("os_compute_api:os-hypervisors:show", "rule:admin_api"),
    ("os_compute_api:os-hypervisors:statistics", "rule:admin_api"),
    ("os_compute_api:os-hypervisors:search", "rule:admin_api"),
    ("os_compute_api:os-hypervisors:uptime", "rule:admin_api"),
    ("os_compute_api:os-hosts:list", "rule:admin_api"),
    ("os_compute_api:os-hosts:show", "rule:admin_api"),
    ("os_compute_api:os-hosts:update", "rule:admin_api"),
    ("os_compute_api:os-hosts:start", "rule:admin_api"),
    ("os_compute_api:os-hosts:shutdown", "rule:admin_api"),
    ("os_compute_api:os-hosts:reboot", "rule:admin_api"),
    ("os_compute_api:os-hypervisors:servers", "rule:admin_api"),
    ("os_compute_api:os-aggregates:index", "rule:admin_api"),
    ("os_compute_api:os-aggregates:create", "rule:admin_api"),
    ("os_compute_api:os-aggregates:delete", "rule:admin_api"),
    ("os_compute_api:os-aggregates:show", "rule:admin_api"),
    ("os_compute_api:os-aggregates:update", "rule:admin_api"),
    ("os_compute_api:os-aggregates:add_host", "rule:admin_api"),
    ("os_compute_api:os-aggregates:remove_host", "rule:admin_api"),
    (
        "os_compute_api:os-aggregates:set_metadata",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-server-groups:index",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-server-groups:index:all_projects",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-server-groups:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-server-groups:create",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-server-groups:delete",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-keypairs:index",
        "rule:admin_api or user_id:%(user_id)s",
    ),
    (
        "os_compute_api:os-keypairs:create",
        "rule:admin_api or user_id:%(user_id)s",
    ),
    (
        "os_compute_api:os-keypairs:delete",
        "rule:admin_api or user_id:%(user_id)s",
    ),
    (
        "os_compute_api:os-keypairs:show",
        "rule:admin_api or user_id:%(user_id)s",
    ),
    (
        "os_compute_api:os-quota-sets:show",
        "rule:project_reader_or_admin",
    ),
    ("os_compute_api:os-quota-sets:update", "rule:admin_api"),
    ("os_compute_api:os-quota-sets:delete", "rule:admin_api"),
    ("os_compute_api:os-quota-sets:defaults", "@"),
    (
        "os_compute_api:os-quota-sets:detail",
        "rule:project_reader_or_admin",
    ),
    ("os_compute_api:limits:other_project", "rule:admin_api"),
    ("os_compute_api:os-quota-class-sets:show", "rule:admin_api"),
    (
        "os_compute_api:os-quota-class-sets:update",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-instance-usage-audit-log:list",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-instance-usage-audit-log:show",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-flavor-extra-specs:index",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-flavor-extra-specs:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-flavor-extra-specs:create",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-flavor-extra-specs:update",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-flavor-extra-specs:delete",
        "rule:admin_api",
    ),
    ("os_compute_api:os-flavor-access", "rule:admin_api"),
    (
        "os_compute_api:os-flavor-access:add_tenant_access",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-flavor-access:remove_tenant_access",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-simple-tenant-usage:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-simple-tenant-usage:list",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-instance-actions:list",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-instance-actions:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-instance-actions:events",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-instance-actions:events:details",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-console-output",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-remote-consoles",
        "rule:project_member_or_admin",
    ),
    ("os_compute_api:os-console-auth-tokens", "rule:admin_api"),
    (
        "os_compute_api:os-lock-server:lock",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-lock-server:unlock",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-lock-server:unlock:unlock_override",
        "rule:admin_api",
    ),
    (
        "os_compute_api:os-pause-server:pause",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-pause-server:unpause",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-suspend-server:suspend",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-suspend-server:resume",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-deferred-delete:force_delete",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-deferred-delete:restore",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-admin-actions:reset_state",
        "rule:admin_api",
    ),
    ("os_compute_api:os-server-diagnostics", "rule:admin_api"),
    (
        "os_compute_api:os-server-external-events:create",
        "rule:admin_api or role:service",
    ),
    (
        "os_compute_api:os-security-groups:add",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-security-groups:remove",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-security-groups:list",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-server-password:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-server-password:clear",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:server-metadata:index",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:server-metadata:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:server-metadata:create",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:server-metadata:update_all",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:server-metadata:update",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:server-metadata:delete",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-server-tags:index",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-server-tags:show",
        "rule:project_reader_or_admin",
    ),
    (
        "os_compute_api:os-server-tags:update",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-server-tags:update_all",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-server-tags:delete",
        "rule:project_member_or_admin",
    ),
    (
        "os_compute_api:os-server-tags:delete_all",
        "rule:project_member_or_admin",
    ),
    ("os_compute_api:os-migrate-server:migrate", "rule:admin_api"),
    (
        "os_compute_api:os-migrate-server:migrate_live",
        "rule:admin_api",
    ),
    ("os_compute_api:limits", "@"),
    ("os_compute_api:extensions", "@"),
    ("os_compute_api:os-availability-zone:list", "@"),
    (
        "os_compute_api:os-availability-zone:detail",
        "rule:admin_api",
    ),
];

/// The policy of identity and the Compute API: the engine
/// ([`fabric::policy::Policy`]) with Keystone's and Nova's defaults.
#[derive(Debug, Clone)]
pub struct Policy(fabric::policy::Policy);

impl std::ops::Deref for Policy {
    type Target = fabric::policy::Policy;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Policy {
    /// The defaults of Keystone (identity subset) and Nova.
    pub fn defaults() -> Self {
        Self(fabric::policy::Policy::from_defaults(&[
            IDENTITY_DEFAULTS,
            NOVA_DEFAULTS,
        ]))
    }

    /// Replaces rules by those given (name, check string).
    pub fn with_overrides<'a>(
        self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, PolicyError> {
        Ok(Self(self.0.with_overrides(overrides)?))
    }

    /// The defaults, with the overrides of `policy_file` when it is not
    /// empty (the `policy_file` setting of identity and the Compute API).
    pub fn load(policy_file: &str) -> Result<Self, PolicyError> {
        Ok(Self(Self::defaults().0.with_policy_file(policy_file)?))
    }

    /// The defaults with the overrides of a policy file (YAML or JSON).
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        Ok(Self(Self::defaults().0.with_file(path)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::token::{Claims, Named, ProjectScope};

    fn claims(roles: &[&str], project: &str) -> Claims {
        let n = |s: &str| Named {
            id: s.into(),
            name: s.into(),
        };
        Claims {
            user: n("u1"),
            user_domain: n("default"),
            project: Some(ProjectScope {
                project: n(project),
                domain: n("default"),
            }),
            roles: roles.iter().map(|r| n(r)).collect(),
            methods: vec!["password".into()],
            issued_at_ms: 0,
            expires_at_ms: i64::MAX,
            audit_id: "a".into(),
            parent_audit_id: None,
        }
    }

    #[test]
    fn nova_defaults_isolate_projects_and_rank_roles() {
        let p = Policy::defaults();
        let own: Target<'_> = &[("project_id", "p1")];
        let other: Target<'_> = &[("project_id", "p2")];
        let reader = claims(&["reader"], "p1");
        let member = claims(&["member", "reader"], "p1");
        let admin = claims(&["admin", "member", "reader"], "p1");
        assert!(p.allows("os_compute_api:servers:show", &reader, own));
        assert!(!p.allows("os_compute_api:servers:create", &reader, own));
        assert!(p.allows("os_compute_api:servers:create", &member, own));
        assert!(!p.allows("os_compute_api:servers:show", &member, other));
        assert!(p.allows("os_compute_api:servers:show", &admin, other));
        assert!(!p.allows("os_compute_api:servers:create:forced_host", &member, own));
        assert!(p.allows("os_compute_api:servers:detail:get_all_tenants", &admin, own));
        assert!(!p.allows("no:such:rule", &admin, own));
    }
}
