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

use super::Filter;
use crate::image_props::parse_requirement;
use crate::scheduler::{Candidate, Request};

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
