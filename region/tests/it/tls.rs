//! The region on https: every API serves TLS with a certificate of the
//! region's CA (`[region.http] tls_cert_file`/`tls_key_file`), and its own
//! clients (the services' login, the computes' and conductors' placement
//! clients) trust that CA (`[region] tls_ca_file`). The `openstack` CLI
//! given the `OS_CACERT` the region prints boots, lists and deletes a
//! server and reads placement; without it the CLI refuses the region, and
//! plain http gets no answer.

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

#[test]
fn openstack_cli_drives_the_region_over_https() {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_tls");
    let pki_dir = testkit::temp_dir("region_tls_pki");
    let pki = testkit::pki::TestPki::new().write_to(&pki_dir);
    let r = super::start_catalog(
        &dir,
        &[
            ("REGION__REGION__CELLS", "1".into()),
            ("REGION__REGION__HOSTS_PER_CELL", "2".into()),
            (
                "REGION__REGION__HTTP__TLS_CERT_FILE",
                pki.cert_file.display().to_string(),
            ),
            (
                "REGION__REGION__HTTP__TLS_KEY_FILE",
                pki.key_file.display().to_string(),
            ),
            (
                "REGION__REGION__TLS_CA_FILE",
                pki.ca_file.display().to_string(),
            ),
        ],
    );
    for svc in ["identity", "placement", "compute", "image"] {
        assert!(r.url(svc).starts_with("https://"), "{svc}: {:?}", r.lines);
    }
    let cacert = r.export("OS_CACERT", 0);
    assert_eq!(cacert.trim_matches('\''), pki.ca_file.display().to_string());

    let with_ca = |mut env: Vec<(String, String)>| {
        env.push(("OS_CACERT".into(), pki.ca_file.display().to_string()));
        Cli {
            bin: bin.clone(),
            env,
        }
    };
    let member = with_ca(os_env(&r, "demo", 1, "demo"));
    let admin = with_ca(os_env(&r, "admin", 0, "admin"));

    // The catalog names https endpoints.
    let catalog = member.json(&["catalog", "list"]);
    let text = catalog.to_string();
    assert!(
        text.contains("https://") && !text.contains("http://"),
        "{text}"
    );

    // A boot goes through the scheduler, placement and a compute host
    // whose placement client reported its inventory over https.
    let server = member.json(&[
        "server",
        "create",
        "--flavor",
        "m1.tiny",
        "--image",
        "cirros-0.6.2-x86_64-disk",
        "--wait",
        "tls-vm",
    ]);
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let id = server["id"].as_str().unwrap().to_owned();
    let providers = admin.json(&["resource", "provider", "list"]);
    assert_eq!(providers.as_array().unwrap().len(), 2, "{providers}");
    let allocations = admin.json(&["resource", "provider", "allocation", "show", &id]);
    assert_eq!(allocations.as_array().unwrap().len(), 1, "{allocations}");
    member.ok(&["server", "delete", "--wait", &id]);
    let listed = member.json(&["server", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 0, "{listed}");

    // Without the CA the CLI refuses the region's certificate.
    let untrusting = Cli {
        bin: bin.clone(),
        env: os_env(&r, "demo", 1, "demo"),
    };
    let (ok, _, err) = untrusting.run(&["flavor", "list"]);
    assert!(!ok);
    assert!(
        err.contains("SSL") || err.contains("certificate"),
        "expected a certificate error: {err}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Placement's absolute `Location` names https.
    let token = admin.ok(&["token", "issue", "-f", "value", "-c", "id"]);
    let created = rt.block_on(async {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca_file).unwrap()).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .unwrap()
            .post(format!("{}/resource_providers", r.url("placement")))
            .header("X-Auth-Token", token.trim())
            .json(&serde_json::json!({"name": "tls-rp"}))
            .send()
            .await
            .unwrap()
    });
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap();
    assert!(
        location.starts_with(&format!("{}/resource_providers/", r.url("placement"))),
        "{location}"
    );

    // Plain http to the identity port gets no HTTP answer.
    let plain = rt.block_on(async {
        reqwest::Client::new()
            .get(format!("http://{}/v3", r.addr("identity")))
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
    });
    assert!(plain.is_err(), "{plain:?}");

    drop(r);
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&pki_dir).ok();
}
