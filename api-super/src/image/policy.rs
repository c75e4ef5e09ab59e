//! Glance's default rules (2023.x secure RBAC, project scope), on the
//! shared policy engine ([`crate::identity::policy`]).
//!
//! The target's `project_id` is the image's owner (for a create: the owner
//! it will have). Visibility is checked in code before any rule: an image
//! the caller may not see is a 404, never a 403 (oslo's rule language here
//! has no `'public':%(visibility)s` check), so `get_image` and
//! `download_image` only ask for the role.

use std::path::Path;

use crate::identity::policy::{Policy, PolicyError};

/// Glance's rules served here.
pub const GLANCE_DEFAULTS: &[(&str, &str)] = &[
    ("get_images", "role:reader or role:service"),
    ("get_image", "role:reader or role:service"),
    ("download_image", "role:member or role:service"),
    (
        "add_image",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
    (
        "modify_image",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
    (
        "upload_image",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
    (
        "delete_image",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
    ("publicize_image", "role:admin"),
    (
        "communitize_image",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
    ("set_image_owner", "role:admin"),
    (
        "deactivate",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
    (
        "reactivate",
        "role:admin or (role:member and project_id:%(project_id)s)",
    ),
];

/// Keystone's, Nova's, Placement's and Glance's defaults, then the
/// overrides of `policy_file` (empty for none).
pub fn load(policy_file: &str) -> Result<Policy, PolicyError> {
    if policy_file.is_empty() {
        return Policy::defaults().with_overrides(GLANCE_DEFAULTS.iter().copied());
    }
    let path = Path::new(policy_file);
    // `from_file` is the engine's defaults plus the file; add each Glance
    // default the file does not name.
    let named = rule_names(path)?;
    Policy::from_file(path)?.with_overrides(
        GLANCE_DEFAULTS
            .iter()
            .copied()
            .filter(|(name, _)| !named.iter().any(|n| n == name)),
    )
}

/// The rule names in a policy file (JSON object keys, or the keys of
/// oslo's one-rule-per-line YAML).
fn rule_names(path: &Path) -> Result<Vec<String>, PolicyError> {
    let err = |message: String| PolicyError {
        name: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    if path.extension().is_some_and(|e| e == "json") {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        return Ok(map.keys().cloned().collect());
    }
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")
        .filter_map(|l| {
            let l = l.trim_start_matches(['"', '\'']);
            l.find(['"', '\'', ':']).map(|i| l[..i].to_owned())
        })
        .collect())
}
