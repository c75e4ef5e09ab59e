//! The config drive's contents (Nova's `configdrive` and
//! `InstanceMetadata`): the files a guest reads from the volume labelled
//! `config-2`, whatever the driver makes of them (the libvirt driver an
//! ISO 9660 image on a CD-ROM, the fake driver a map it keeps).
//!
//! Written: `openstack/<version>/meta_data.json`, `user_data` (when
//! given), `network_data.json`, `vendor_data.json` and
//! `vendor_data2.json`, for `latest` and for the oldest version
//! cloud-init knows (`2012-08-10`), as Nova writes them. No EC2 tree and
//! no personality files (a create with `personality` is refused).
//! `network_data.json` lists no links or networks until the region has a
//! network service.

use base64::Engine as _;
use fabric::ids::InstanceUuid;
use fabric::rpc::GuestData;
use serde_json::json;

/// The files of a config drive: (path inside the drive, contents).
pub type Files = Vec<(String, Vec<u8>)>;

/// The volume label cloud-init looks for.
pub const LABEL: &str = "config-2";

/// The metadata versions written (Nova writes every one it knows; these
/// are the oldest cloud-init reads and the one it prefers).
pub const VERSIONS: &[&str] = &["2012-08-10", "latest"];

/// Nova's default `[api] dhcp_domain`, appended to the hostname in
/// `meta_data.json`.
pub const DHCP_DOMAIN: &str = "novalocal";

/// The files of the config drive of `instance` (path inside the drive,
/// contents), sorted by path. Fails only on `user_data` that is not
/// base64 (the API checked it at create).
pub fn files(instance: InstanceUuid, project_id: &str, guest: &GuestData) -> Result<Files, String> {
    let user_data = if guest.user_data.is_empty() {
        None
    } else {
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(guest.user_data.trim())
                .map_err(|e| format!("user_data is not base64: {e}"))?,
        )
    };
    let meta: serde_json::Map<String, serde_json::Value> = guest
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let (public_keys, keys) = match &guest.key {
        Some(k) => (
            json!({ k.name.clone(): k.public_key }),
            json!([{"name": k.name, "type": k.kind, "data": k.public_key}]),
        ),
        None => (json!({}), json!([])),
    };
    let hostname = if guest.hostname.is_empty() {
        format!("{instance}.{DHCP_DOMAIN}")
    } else {
        format!("{}.{DHCP_DOMAIN}", guest.hostname)
    };
    let az = if guest.availability_zone.is_empty() {
        "nova"
    } else {
        guest.availability_zone.as_str()
    };
    let meta_data = json!({
        "uuid": instance.to_string(),
        "meta": meta,
        "public_keys": public_keys,
        "keys": keys,
        "hostname": hostname,
        "name": guest.name,
        "launch_index": guest.launch_index,
        "availability_zone": az,
        "random_seed": base64::engine::general_purpose::STANDARD.encode(random_seed()),
        "project_id": project_id,
        "devices": [],
    });
    let network_data = json!({"links": [], "networks": [], "services": []});
    let mut out = Vec::new();
    for v in VERSIONS {
        let dir = format!("openstack/{v}");
        out.push((
            format!("{dir}/meta_data.json"),
            serde_json::to_vec(&meta_data).unwrap_or_default(),
        ));
        out.push((
            format!("{dir}/network_data.json"),
            serde_json::to_vec(&network_data).unwrap_or_default(),
        ));
        out.push((format!("{dir}/vendor_data.json"), b"{}".to_vec()));
        out.push((format!("{dir}/vendor_data2.json"), b"{}".to_vec()));
        if let Some(u) = &user_data {
            out.push((format!("{dir}/user_data"), u.clone()));
        }
    }
    out.sort();
    Ok(out)
}

/// 512 bytes from the kernel's random source (Nova's `random_seed`); zeros
/// where it cannot be read, which only weakens the guest's seeding.
fn random_seed() -> Vec<u8> {
    use std::io::Read as _;
    let mut b = vec![0u8; 512];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest() -> GuestData {
        GuestData {
            name: "web 1".into(),
            hostname: "web-1".into(),
            availability_zone: String::new(),
            launch_index: 2,
            metadata: [
                ("b".to_owned(), "2".to_owned()),
                ("a".to_owned(), "1".to_owned()),
            ]
            .into_iter()
            .collect(),
            user_data: base64::engine::general_purpose::STANDARD.encode("#!/bin/sh\necho hi\n"),
            key: Some(fabric::rpc::GuestKey {
                name: "k1".into(),
                kind: "ssh".into(),
                public_key: "ssh-ed25519 AAAA k1".into(),
            }),
            config_drive: true,
        }
    }

    #[test]
    fn meta_data_user_data_and_network_data_for_each_version() {
        let id = InstanceUuid::new_random();
        let files = files(id, "p1", &guest()).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "openstack/2012-08-10/meta_data.json",
                "openstack/2012-08-10/network_data.json",
                "openstack/2012-08-10/user_data",
                "openstack/2012-08-10/vendor_data.json",
                "openstack/2012-08-10/vendor_data2.json",
                "openstack/latest/meta_data.json",
                "openstack/latest/network_data.json",
                "openstack/latest/user_data",
                "openstack/latest/vendor_data.json",
                "openstack/latest/vendor_data2.json",
            ]
        );
        let get = |n: &str| &files.iter().find(|(p, _)| p == n).unwrap().1;
        assert_eq!(get("openstack/latest/user_data"), b"#!/bin/sh\necho hi\n");
        let m: serde_json::Value =
            serde_json::from_slice(get("openstack/latest/meta_data.json")).unwrap();
        assert_eq!(m["uuid"], id.to_string());
        assert_eq!(m["hostname"], "web-1.novalocal");
        assert_eq!(m["name"], "web 1");
        assert_eq!(m["launch_index"], 2);
        assert_eq!(m["availability_zone"], "nova");
        assert_eq!(m["project_id"], "p1");
        assert_eq!(m["meta"], json!({"a": "1", "b": "2"}));
        assert_eq!(m["public_keys"], json!({"k1": "ssh-ed25519 AAAA k1"}));
        assert_eq!(m["keys"][0]["type"], "ssh");
        let seed = base64::engine::general_purpose::STANDARD
            .decode(m["random_seed"].as_str().unwrap())
            .unwrap();
        assert_eq!(seed.len(), 512);
        let n: serde_json::Value =
            serde_json::from_slice(get("openstack/latest/network_data.json")).unwrap();
        assert_eq!(n, json!({"links": [], "networks": [], "services": []}));
    }

    #[test]
    fn no_user_data_no_file_and_bad_base64_refused() {
        let mut g = guest();
        g.user_data.clear();
        g.key = None;
        let files = files(InstanceUuid::new_random(), "p1", &g).unwrap();
        assert!(files.iter().all(|(n, _)| !n.ends_with("user_data")));
        let m: serde_json::Value = serde_json::from_slice(
            &files
                .iter()
                .find(|(n, _)| n == "openstack/latest/meta_data.json")
                .unwrap()
                .1,
        )
        .unwrap();
        assert_eq!(m["public_keys"], json!({}));
        g.user_data = "not base64!".into();
        assert!(files_err(&g).contains("not base64"));
    }

    fn files_err(g: &GuestData) -> String {
        files(InstanceUuid::new_random(), "p1", g).unwrap_err()
    }
}
