//! The image properties a server's scheduling matches
//! (`ImagePropertiesFilter`), read once from the image and kept in the
//! request spec: shared by the Compute API, which parses and records them,
//! and the scheduler, which matches hosts against them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The image properties the scheduler matches, canonicalized as Nova does.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageProps {
    /// `hw_architecture`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hw_architecture: Option<String>,
    /// `img_hv_type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub img_hv_type: Option<String>,
    /// `hw_vm_mode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hw_vm_mode: Option<String>,
    /// `img_hv_requested_version`: comma-separated `<op><version>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub img_hv_requested_version: Option<String>,
}

/// Architecture names Nova recognises (`nova.objects.fields.Architecture`).
const ARCHITECTURES: &[&str] = &[
    "alpha",
    "armv6",
    "armv7l",
    "armv7b",
    "aarch64",
    "cris",
    "i686",
    "ia64",
    "lm32",
    "m68k",
    "microblaze",
    "microblazeel",
    "mips",
    "mipsel",
    "mips64",
    "mips64el",
    "openrisc",
    "parisc",
    "parisc64",
    "ppc",
    "ppcle",
    "ppc64",
    "ppc64le",
    "ppcemb",
    "s390",
    "s390x",
    "sh4",
    "sh4eb",
    "sparc",
    "sparc64",
    "unicore32",
    "x86_64",
    "xtensa",
    "xtensaeb",
];

/// VM modes Nova recognises (`nova.objects.fields.VMMode`).
const VM_MODES: &[&str] = &["hvm", "xen", "uml", "exe"];

impl ImageProps {
    /// Reads and canonicalizes the scheduling properties of an image
    /// (new names win over the legacy ones); an unrecognised architecture
    /// or vm mode is the boot's 400 message.
    pub fn from_image(props: &BTreeMap<String, String>) -> Result<Self, String> {
        let get = |new: &str, old: &str| {
            props
                .get(new)
                .or_else(|| props.get(old))
                .map(|v| v.trim().to_lowercase())
                .filter(|v| !v.is_empty())
        };
        let hw_architecture = match get("hw_architecture", "architecture") {
            None => None,
            Some(a) => {
                let a = match a.as_str() {
                    "amd64" | "x64" => "x86_64".to_owned(),
                    "i386" | "i486" | "i586" => "i686".to_owned(),
                    _ => a,
                };
                if !ARCHITECTURES.contains(&a.as_str()) {
                    return Err(format!(
                        "Invalid image metadata. Error: Architecture name '{a}' is not recognised"
                    ));
                }
                Some(a)
            }
        };
        let img_hv_type = get("img_hv_type", "hypervisor_type").map(|t| match t.as_str() {
            "xapi" => "xen".to_owned(),
            _ => t,
        });
        let hw_vm_mode = match get("hw_vm_mode", "vm_mode") {
            None => None,
            Some(m) => {
                let m = match m.as_str() {
                    "pv" => "xen".to_owned(),
                    "hv" | "baremetal" => "hvm".to_owned(),
                    _ => m,
                };
                if !VM_MODES.contains(&m.as_str()) {
                    return Err(format!(
                        "Invalid image metadata. Error: Virtual machine mode '{m}' is not recognised"
                    ));
                }
                Some(m)
            }
        };
        let img_hv_requested_version = props
            .get("img_hv_requested_version")
            .or_else(|| props.get("hypervisor_version_requires"))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty());
        if let Some(v) = &img_hv_requested_version {
            parse_requirement(v).map_err(|e| {
                format!("Invalid image metadata. Error: img_hv_requested_version {v:?}: {e}")
            })?;
        }
        Ok(Self {
            hw_architecture,
            img_hv_type,
            hw_vm_mode,
            img_hv_requested_version,
        })
    }

    /// None of the properties is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// `>=6.0, <7` → `[(">=", [6, 0]), ("<", [7])]`; a bare version means `==`.
pub(crate) fn parse_requirement(s: &str) -> Result<Vec<(&str, Vec<u64>)>, String> {
    s.split(',')
        .map(|part| {
            let part = part.trim();
            let op = ["<=", ">=", "==", "!=", "<", ">"]
                .into_iter()
                .find(|op| part.starts_with(op));
            let (op, version) = match op {
                Some(op) => (op, part[op.len()..].trim()),
                None => ("==", part),
            };
            let version = version
                .split('.')
                .map(|n| {
                    n.parse::<u64>()
                        .map_err(|_| format!("bad version {version:?}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((op, version))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn legacy_names_and_canonical_values() {
        let p = ImageProps::from_image(&props(&[
            ("architecture", "AMD64"),
            ("hypervisor_type", "xapi"),
            ("vm_mode", "hv"),
            ("hypervisor_version_requires", ">=1.0"),
        ]))
        .unwrap();
        assert_eq!(p.hw_architecture.as_deref(), Some("x86_64"));
        assert_eq!(p.img_hv_type.as_deref(), Some("xen"));
        assert_eq!(p.hw_vm_mode.as_deref(), Some("hvm"));
        assert_eq!(p.img_hv_requested_version.as_deref(), Some(">=1.0"));
        // The new name wins.
        let p = ImageProps::from_image(&props(&[
            ("architecture", "x86_64"),
            ("hw_architecture", "aarch64"),
        ]))
        .unwrap();
        assert_eq!(p.hw_architecture.as_deref(), Some("aarch64"));
        assert!(ImageProps::from_image(&props(&[("os_distro", "cirros")]))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn unrecognised_values_are_refused() {
        let e = ImageProps::from_image(&props(&[("hw_architecture", "z80")])).unwrap_err();
        assert_eq!(
            e,
            "Invalid image metadata. Error: Architecture name 'z80' is not recognised"
        );
        assert!(ImageProps::from_image(&props(&[("hw_vm_mode", "weird")])).is_err());
        assert!(ImageProps::from_image(&props(&[("img_hv_requested_version", ">=x")])).is_err());
    }
}
