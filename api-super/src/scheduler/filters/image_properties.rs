//! `ImagePropertiesFilter`: the host can run the image's guest.
//!
//! As Nova's filter: the image's architecture (`hw_architecture`, formerly
//! `architecture`), hypervisor type (`img_hv_type`, formerly
//! `hypervisor_type`) and vm mode (`hw_vm_mode`, formerly `vm_mode`) must
//! all appear together in one of the host's supported-instance triples
//! (reported by its driver, `compute_nodes.supported_instances`); a host
//! that reports none passes no image that names one. When one of them
//! matches and the image also asks for a hypervisor version
//! (`img_hv_requested_version`, formerly `hypervisor_version_requires`,
//! e.g. `>=6.0,<7`), the host's `hypervisor_version` must satisfy it. An
//! image with none of the three passes every host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Filter;
use crate::scheduler::{Candidate, Request};

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
fn parse_requirement(s: &str) -> Result<Vec<(&str, Vec<u64>)>, String> {
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

/// Nova's integer hypervisor version as its parts: 6_001_002 → [6, 1, 2].
fn version_parts(mut v: i64) -> Vec<u64> {
    let mut parts = Vec::new();
    while v > 0 {
        parts.insert(0, (v % 1000) as u64);
        v /= 1000;
    }
    parts
}

fn compare(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// Whether `hypervisor_version` satisfies `requirement` (an unknown
/// version, 0, or an unreadable requirement: yes, as Nova).
fn version_ok(hypervisor_version: i64, requirement: Option<&str>) -> bool {
    let (Some(req), true) = (requirement, hypervisor_version > 0) else {
        return true;
    };
    let Ok(req) = parse_requirement(req) else {
        return true;
    };
    let have = version_parts(hypervisor_version);
    req.iter().all(|(op, want)| {
        let o = compare(&have, want);
        match *op {
            "<" => o.is_lt(),
            "<=" => o.is_le(),
            ">" => o.is_gt(),
            ">=" => o.is_ge(),
            "!=" => o.is_ne(),
            _ => o.is_eq(),
        }
    })
}

/// The filter.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImagePropertiesFilter;

impl Filter for ImagePropertiesFilter {
    fn name(&self) -> &'static str {
        "ImagePropertiesFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        let img = &req.image;
        let wanted = [&img.hw_architecture, &img.img_hv_type, &img.hw_vm_mode];
        if wanted.iter().all(|w| w.is_none()) {
            return true;
        }
        host.info.supported_instances.iter().any(|triple| {
            wanted
                .iter()
                .zip(triple)
                .all(|(w, have)| w.as_deref().is_none_or(|w| w.eq_ignore_ascii_case(have)))
                && version_ok(
                    host.info.hypervisor_version,
                    img.img_hv_requested_version.as_deref(),
                )
        })
    }
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

    #[test]
    fn versions_compare_as_nova_encodes_them() {
        assert_eq!(version_parts(6_001_002), vec![6, 1, 2]);
        assert_eq!(version_parts(1_000), vec![1, 0]);
        assert!(version_ok(1_000, Some(">=1.0")));
        assert!(version_ok(1_000, Some("==1")));
        assert!(!version_ok(1_000, Some(">1.0")));
        assert!(version_ok(6_001_002, Some(">=6.0, <7")));
        assert!(!version_ok(7_000_000, Some(">=6.0, <7")));
        assert!(version_ok(0, Some(">=99")), "unknown host version passes");
        assert!(version_ok(5, None));
    }
}
