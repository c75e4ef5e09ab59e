//! The host's traits for placement, as Nova's libvirt driver reports them:
//! CPU features (`HW_CPU_X86_*`) from libvirt's host capabilities, and what
//! this driver can give a guest (`COMPUTE_*`: architecture, NIC models,
//! disk buses, graphics models, image types), taken from the same lists
//! the driver checks image properties against, so the two never disagree.

use std::collections::BTreeSet;

use quick_xml::events::Event;
use quick_xml::Reader;

use super::guest::{ARCHITECTURES, BUSES, VIDEO_MODELS, VIF_MODELS};
use super::images::{DISK_FORMATS, FILE_FORMATS};

/// libvirt's x86 CPU feature names and the traits they are (os-traits'
/// names; Nova's mapping).
const CPU_FEATURES: &[(&str, &str)] = &[
    ("3dnow", "HW_CPU_X86_3DNOW"),
    ("abm", "HW_CPU_X86_ABM"),
    ("aes", "HW_CPU_X86_AESNI"),
    ("avx", "HW_CPU_X86_AVX"),
    ("avx2", "HW_CPU_X86_AVX2"),
    ("avx512bw", "HW_CPU_X86_AVX512BW"),
    ("avx512cd", "HW_CPU_X86_AVX512CD"),
    ("avx512dq", "HW_CPU_X86_AVX512DQ"),
    ("avx512er", "HW_CPU_X86_AVX512ER"),
    ("avx512f", "HW_CPU_X86_AVX512F"),
    ("avx512pf", "HW_CPU_X86_AVX512PF"),
    ("avx512vl", "HW_CPU_X86_AVX512VL"),
    ("avx512-vnni", "HW_CPU_X86_AVX512VNNI"),
    ("bmi1", "HW_CPU_X86_BMI"),
    ("bmi2", "HW_CPU_X86_BMI2"),
    ("pclmuldq", "HW_CPU_X86_CLMUL"),
    ("f16c", "HW_CPU_X86_F16C"),
    ("fma", "HW_CPU_X86_FMA3"),
    ("fma4", "HW_CPU_X86_FMA4"),
    ("mmx", "HW_CPU_X86_MMX"),
    ("mpx", "HW_CPU_X86_MPX"),
    ("pdpe1gb", "HW_CPU_X86_PDPE1GB"),
    ("sha-ni", "HW_CPU_X86_SHA"),
    ("sse", "HW_CPU_X86_SSE"),
    ("sse2", "HW_CPU_X86_SSE2"),
    ("pni", "HW_CPU_X86_SSE3"),
    ("sse4.1", "HW_CPU_X86_SSE41"),
    ("sse4.2", "HW_CPU_X86_SSE42"),
    ("sse4a", "HW_CPU_X86_SSE4A"),
    ("ssse3", "HW_CPU_X86_SSSE3"),
    ("svm", "HW_CPU_X86_SVM"),
    ("tbm", "HW_CPU_X86_TBM"),
    ("vmx", "HW_CPU_X86_VMX"),
    ("xop", "HW_CPU_X86_XOP"),
];

/// What every x86_64 CPU has, whatever model libvirt names (the model's
/// own features are not listed in the capabilities, only those beyond it).
const X86_64_BASELINE: &[&str] = &["HW_CPU_X86_MMX", "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2"];

/// The CPU feature names under `<host><cpu>` of libvirt's capabilities XML.
pub fn host_cpu_features(capabilities: &str) -> Vec<String> {
    let mut r = Reader::from_str(capabilities);
    let mut path: Vec<Vec<u8>> = Vec::new();
    let mut out = Vec::new();
    loop {
        match r.read_event() {
            Ok(Event::Start(e)) => path.push(e.name().as_ref().to_vec()),
            Ok(Event::End(_)) => {
                path.pop();
            }
            Ok(Event::Empty(e)) => {
                let in_host_cpu = path.len() >= 3
                    && path[path.len() - 1] == b"cpu"
                    && path[path.len() - 2] == b"host"
                    && path[path.len() - 3] == b"capabilities";
                if in_host_cpu && e.name().as_ref() == b"feature" {
                    if let Some(Ok(a)) = e
                        .attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == b"name")
                        .map(|a| a.unescape_value().map(|v| v.into_owned()))
                    {
                        out.push(a);
                    }
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
    }
    out
}

/// The CPU traits this driver decides on: those a host without the
/// feature loses (any other trait on the provider, an operator's, stays).
pub fn cpu_traits() -> Vec<String> {
    CPU_FEATURES.iter().map(|(_, t)| (*t).to_owned()).collect()
}

/// The traits of a host whose capabilities XML is `capabilities`.
pub fn host_traits(capabilities: &str) -> BTreeSet<String> {
    let mut t: BTreeSet<String> = X86_64_BASELINE.iter().map(|s| (*s).to_owned()).collect();
    for f in host_cpu_features(capabilities) {
        if let Some((_, trait_name)) = CPU_FEATURES.iter().find(|(n, _)| *n == f) {
            t.insert((*trait_name).to_owned());
        }
    }
    t.insert("COMPUTE_NODE".to_owned());
    for a in ARCHITECTURES {
        t.insert(format!("COMPUTE_ARCH_{}", a.to_ascii_uppercase()));
    }
    for m in VIF_MODELS {
        t.insert(format!("COMPUTE_NET_VIF_MODEL_{}", m.to_ascii_uppercase()));
    }
    for b in BUSES {
        t.insert(format!(
            "COMPUTE_STORAGE_BUS_{}",
            b.as_str().to_ascii_uppercase()
        ));
    }
    for v in VIDEO_MODELS {
        t.insert(format!("COMPUTE_GRAPHICS_MODEL_{}", v.to_ascii_uppercase()));
    }
    for f in DISK_FORMATS.iter().chain(FILE_FORMATS) {
        t.insert(format!("COMPUTE_IMAGE_TYPE_{}", f.to_ascii_uppercase()));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: &str = "<capabilities><host><uuid>x</uuid><cpu><arch>x86_64</arch>\
        <model>kvm64</model><feature name='avx2'/><feature name='pni'/>\
        <feature name='sse4.2'/><feature name='made-up'/></cpu>\
        <topology><cells num='1'><cell id='0'><cpus num='1'>\
        <cpu id='0'/></cpus></cell></cells></topology></host>\
        <guest><arch name='x86_64'><feature name='vmx'/></arch></guest></capabilities>";

    #[test]
    fn cpu_features_come_from_the_hosts_cpu_only() {
        assert_eq!(
            host_cpu_features(CAPS),
            ["avx2", "pni", "sse4.2", "made-up"]
        );
        let t = host_traits(CAPS);
        for want in [
            "HW_CPU_X86_AVX2",
            "HW_CPU_X86_SSE3",
            "HW_CPU_X86_SSE42",
            "HW_CPU_X86_SSE2",
            "COMPUTE_NODE",
            "COMPUTE_ARCH_X86_64",
            "COMPUTE_NET_VIF_MODEL_VIRTIO",
            "COMPUTE_NET_VIF_MODEL_NE2K_PCI",
            "COMPUTE_STORAGE_BUS_SCSI",
            "COMPUTE_GRAPHICS_MODEL_NONE",
            "COMPUTE_IMAGE_TYPE_QCOW2",
            "COMPUTE_IMAGE_TYPE_AKI",
        ] {
            assert!(t.contains(want), "{want} missing from {t:?}");
        }
        // A guest's feature is not the host's.
        assert!(!t.contains("HW_CPU_X86_VMX"));
    }

    #[test]
    fn every_trait_is_a_standard_one() {
        let standard = include_str!("../../../../placement/data/standard-traits.txt");
        for t in host_traits(CAPS) {
            assert!(
                standard.lines().any(|l| l == t),
                "{t} is not a standard trait"
            );
        }
        for (_, t) in CPU_FEATURES {
            assert!(
                standard.lines().any(|l| l == *t),
                "{t} is not a standard trait"
            );
        }
    }
}
