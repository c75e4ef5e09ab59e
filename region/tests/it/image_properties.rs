//! `ImagePropertiesFilter` end to end (issue 6): images created through
//! the region's image API with `hw_architecture` and friends, fake hosts
//! that report different architectures (`region.host_architectures`), and
//! boots that land only where the guest can run, or end in cell0 with a
//! "No valid host" fault naming the filter.

use std::time::{Duration, Instant};

use region::{Region, RegionConfig};
use serde_json::{json, Value};

struct Api {
    http: reqwest::Client,
    compute: String,
    image: String,
    admin: String,
}

impl Api {
    async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let resp = req
            .header("x-auth-token", &self.admin)
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// A public, active image with `props` as its extra properties.
    async fn image(&self, name: &str, props: &[(&str, &str)]) -> String {
        let mut body = json!({
            "name": name,
            "disk_format": "qcow2",
            "container_format": "bare",
            "visibility": "public",
        });
        for (k, v) in props {
            body[*k] = json!(v);
        }
        let (status, v) = self
            .send(
                self.http
                    .post(format!("{}/v2/images", self.image))
                    .json(&body),
            )
            .await;
        assert_eq!(status, 201, "create image {name}: {v}");
        let id = v["id"].as_str().expect("image id").to_owned();
        let (status, v) = self
            .send(
                self.http
                    .put(format!("{}/v2/images/{id}/file", self.image))
                    .header("content-type", "application/octet-stream")
                    .body(vec![0u8; 1024]),
            )
            .await;
        assert_eq!(status, 204, "upload {name}: {v}");
        id
    }

    async fn boot_request(&self, name: &str, image: &str) -> (u16, Value) {
        self.send(
            self.http
                .post(format!("{}/v2.1/servers", self.compute))
                .header("openstack-api-version", "compute 2.1")
                .json(&json!({"server": {
                    "name": name, "flavorRef": "1", "imageRef": image,
                }})),
        )
        .await
    }

    /// Deletes a server (the project's instance quota is 10).
    async fn delete(&self, id: &str) {
        let (status, v) = self
            .send(
                self.http
                    .delete(format!("{}/v2.1/servers/{id}", self.compute))
                    .header("openstack-api-version", "compute 2.1"),
            )
            .await;
        assert_eq!(status, 204, "delete {id}: {v}");
    }

    /// Boots and waits for ACTIVE or ERROR; the server as the admin sees it.
    async fn boot(&self, name: &str, image: &str) -> Value {
        let (status, v) = self.boot_request(name, image).await;
        assert_eq!(status, 202, "boot {name}: {v}");
        let id = v["server"]["id"].as_str().expect("id").to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, v) = self
                .send(
                    self.http
                        .get(format!("{}/v2.1/servers/{id}", self.compute))
                        .header("openstack-api-version", "compute 2.1"),
                )
                .await;
            assert_eq!(status, 200, "show {id}: {v}");
            let st = v["server"]["status"].as_str().unwrap_or_default();
            if st == "ACTIVE" || st == "ERROR" {
                return v["server"].clone();
            }
            assert!(Instant::now() < deadline, "{id} not settled: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boots_land_on_hosts_that_run_the_image() {
    let mut cfg = RegionConfig::default();
    cfg.region.data_dir = testkit::temp_dir("image_properties");
    cfg.region.cells = 2;
    cfg.region.hosts_per_cell = 2;
    cfg.region.fake_spawn_latency_ms = 20;
    // host01 of each cell is x86_64, host02 aarch64.
    cfg.region.host_architectures = vec!["x86_64".into(), "aarch64".into()];
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let identity = format!("http://{}", region.identity.addr);
    let admin = region::password_token(&identity, &region.admin)
        .await
        .expect("admin token")
        .0;
    let api = Api {
        http: reqwest::Client::new(),
        compute: format!("http://{}", region.compute.addr),
        image: format!("http://{}", region.image.addr),
        admin,
    };

    // Every aarch64 boot lands on a host02.
    let arm = api.image("arm", &[("hw_architecture", "aarch64")]).await;
    for i in 0..4 {
        let s = api.boot(&format!("arm-{i}"), &arm).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        let host = s["OS-EXT-SRV-ATTR:host"].as_str().unwrap();
        assert!(host.ends_with("-host02"), "aarch64 guest on {host}");
        api.delete(s["id"].as_str().unwrap()).await;
    }
    // Legacy names and aliases: `architecture=amd64` is x86_64, with the
    // fake hypervisor's type and mode and a version it satisfies (1.0).
    let x86 = api
        .image(
            "x86",
            &[
                ("architecture", "amd64"),
                ("hypervisor_type", "fake"),
                ("hw_vm_mode", "hvm"),
                ("img_hv_requested_version", ">=1.0"),
            ],
        )
        .await;
    for i in 0..4 {
        let s = api.boot(&format!("x86-{i}"), &x86).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        let host = s["OS-EXT-SRV-ATTR:host"].as_str().unwrap();
        assert!(host.ends_with("-host01"), "x86_64 guest on {host}");
        api.delete(s["id"].as_str().unwrap()).await;
    }
    // No host runs ppc64le, or a hypervisor newer than 1.0: ERROR in cell0,
    // the fault naming the filter that removed all four hosts.
    for (name, props) in [
        ("ppc", vec![("hw_architecture", "ppc64le")]),
        (
            "new-hv",
            vec![
                ("hw_architecture", "x86_64"),
                ("img_hv_requested_version", ">=2.0"),
            ],
        ),
        ("qemu", vec![("img_hv_type", "qemu")]),
    ] {
        let img = api.image(name, &props).await;
        let s = api.boot(name, &img).await;
        assert_eq!(s["status"], "ERROR", "{s}");
        let fault = &s["fault"];
        assert!(
            fault["message"]
                .as_str()
                .unwrap()
                .starts_with("No valid host was found."),
            "{s}"
        );
        let details = fault["details"].as_str().unwrap();
        assert!(
            details.contains("ImagePropertiesFilter removed 4"),
            "{name}: {details}"
        );
        api.delete(s["id"].as_str().unwrap()).await;
    }
    // An image without scheduling properties boots anywhere.
    let (status, v) = api.boot_request("plain", "cirros-0.6.2-x86_64-disk").await;
    assert_eq!(status, 202, "{v}");
    // An architecture Nova does not know is the boot's 400, nothing written.
    let bad = api.image("z80", &[("hw_architecture", "z80")]).await;
    let (status, v) = api.boot_request("z80", &bad).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v["badRequest"]["message"],
        "Invalid image metadata. Error: Architecture name 'z80' is not recognised",
        "{v}"
    );
    region.shutdown().await;
    std::fs::remove_dir_all(&cfg.region.data_dir).ok();
}
