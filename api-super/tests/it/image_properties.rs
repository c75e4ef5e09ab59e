//! Microversion 2.98: a server's `image` shows `properties`, the image's
//! properties as recorded when the server was booted (or rebuilt): only
//! those Nova knows (its `ImageMetaProps` fields, legacy names included),
//! in server show, the detailed list, update and rebuild, for landed
//! servers and build requests alike; absent below 2.98.

use std::collections::BTreeMap;
use std::sync::Arc;

use api_super::compute_api::error::ApiError;
use api_super::compute_api::images::{BootNeeds, ImageLookup, LookupFuture, ResolvedImage};
use serde_json::{json, Value};

use crate::common::json as body;
use crate::compute::{Region, IMAGE};

const REBUILD_IMAGE: &str = "0b1c2d3e-0000-4000-8000-000000000002";
const BARE_IMAGE: &str = "0b1c2d3e-0000-4000-8000-000000000003";

/// Images by id, with their properties.
#[derive(Debug)]
struct Images(BTreeMap<&'static str, BTreeMap<String, String>>);

impl ImageLookup for Images {
    fn resolve<'a>(&'a self, image_ref: &'a str, _needs: BootNeeds<'a>) -> LookupFuture<'a> {
        let found = self
            .0
            .get(image_ref)
            .map(|p| ResolvedImage {
                id: image_ref.to_owned(),
                properties: p.clone(),
            })
            .ok_or_else(|| ApiError::BadRequest(format!("Image {image_ref} could not be found.")));
        Box::pin(std::future::ready(found))
    }
}

fn props(p: &[(&str, &str)]) -> BTreeMap<String, String> {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn at(
    region: &Region,
    mv: &str,
    token: &str,
    method: &str,
    path: &str,
    b: Option<Value>,
) -> testkit::http::Response {
    crate::operator::at(region, token, mv, method, path, b).await
}

/// `{"id", "links"}` of an image, and `properties` when given.
fn image(region: &Region, id: &str, properties: Option<Value>) -> Value {
    let mut v = json!({"id": id, "links": [{"rel": "bookmark",
        "href": format!("{}/images/{id}", region.compute.url())}]});
    if let Some(p) = properties {
        v["properties"] = p;
    }
    v
}

/// The `image` of each server of a detailed list, by id.
fn images_of(r: &testkit::http::Response) -> BTreeMap<String, Value> {
    assert_eq!(r.status, 200, "{}", r.body);
    body(r)["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_owned(), s["image"].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_properties_are_shown_from_2_98() {
    let images = Images(BTreeMap::from([
        (
            IMAGE,
            props(&[
                ("os_distro", "cirros"),
                ("hw_architecture", "x86_64"),
                ("hw_rng_model", "virtio"),
                // A legacy name, shown as given.
                ("vm_mode", "hvm"),
                // Not properties Nova knows: recorded by Nova, never shown.
                ("os_version", "0.6.2"),
                ("owner_specified.openstack.sha256", "abc"),
                // Never recorded (too big for system metadata).
                ("img_mappings", "[]"),
            ]),
        ),
        (
            REBUILD_IMAGE,
            props(&[("hw_qemu_guest_agent", "yes"), ("os_type", "linux")]),
        ),
        (BARE_IMAGE, BTreeMap::new()),
    ]));
    // No healer: a build request written below stays one.
    let region = Region::start_full(
        "image_props",
        1,
        1,
        |c| c.build_heal.interval_secs = 0,
        Some(Arc::new(images)),
        api_super::identity::policy::Policy::defaults(),
    )
    .await;
    let member = region.member.clone();
    let member = member.as_str();
    let shown = json!({"hw_architecture": "x86_64", "hw_rng_model": "virtio",
        "os_distro": "cirros", "vm_mode": "hvm"});
    let web = region.boot(member, "web", "1").await;
    let r = region
        .call(
            member,
            "POST",
            "/v2.1/servers",
            Some(json!({"server": {"name": "bare", "flavorRef": "1",
                "imageRef": BARE_IMAGE, "networks": "none"}})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let bare = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    for id in [&web, &bare] {
        region.wait(id, |s| s["status"] == "ACTIVE").await;
    }

    // Show: from 2.98 (an image without such properties shows `{}`).
    let show = |mv: &'static str, id: String| {
        let region = &region;
        async move {
            let r = at(
                region,
                mv,
                member,
                "GET",
                &format!("/v2.1/servers/{id}"),
                None,
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.body);
            body(&r)["server"]["image"].clone()
        }
    };
    assert_eq!(show("2.97", web.clone()).await, image(&region, IMAGE, None));
    for mv in ["2.98", "2.104"] {
        assert_eq!(
            show(mv, web.clone()).await,
            image(&region, IMAGE, Some(shown.clone())),
            "{mv}"
        );
        assert_eq!(
            show(mv, bare.clone()).await,
            image(&region, BARE_IMAGE, Some(json!({})))
        );
    }
    // The detailed list alike; the brief one has no image.
    let r = at(&region, "2.97", member, "GET", "/v2.1/servers/detail", None).await;
    assert_eq!(images_of(&r)[&web], image(&region, IMAGE, None));
    let r = at(&region, "2.98", member, "GET", "/v2.1/servers/detail", None).await;
    let list = images_of(&r);
    assert_eq!(list[&web], image(&region, IMAGE, Some(shown.clone())));
    assert_eq!(list[&bare], image(&region, BARE_IMAGE, Some(json!({}))));
    let r = at(&region, "2.98", member, "GET", "/v2.1/servers", None).await;
    assert!(body(&r)["servers"][0].get("image").is_none(), "{}", r.body);
    // The answer of an update.
    let path = format!("/v2.1/servers/{web}");
    let rename = Some(json!({"server": {"name": "web-1"}}));
    let r = at(&region, "2.97", member, "PUT", &path, rename.clone()).await;
    assert_eq!(body(&r)["server"]["image"], image(&region, IMAGE, None));
    let r = at(&region, "2.98", member, "PUT", &path, rename).await;
    assert_eq!(
        body(&r)["server"]["image"],
        image(&region, IMAGE, Some(shown.clone())),
        "{}",
        r.body
    );

    // A rebuild records its image's properties: in its answer and after.
    let action = format!("/v2.1/servers/{web}/action");
    let rebuild = Some(json!({"rebuild": {"imageRef": REBUILD_IMAGE}}));
    let rebuilt = json!({"hw_qemu_guest_agent": "yes", "os_type": "linux"});
    let r = at(&region, "2.98", member, "POST", &action, rebuild.clone()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        body(&r)["server"]["image"],
        image(&region, REBUILD_IMAGE, Some(rebuilt.clone()))
    );
    region.wait(&web, |s| s["status"] == "ACTIVE").await;
    assert_eq!(
        show("2.98", web.clone()).await,
        image(&region, REBUILD_IMAGE, Some(rebuilt.clone()))
    );
    let r = at(&region, "2.97", member, "POST", &action, rebuild).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        body(&r)["server"]["image"],
        image(&region, REBUILD_IMAGE, None)
    );
    region.wait(&web, |s| s["status"] == "ACTIVE").await;
    let r = at(&region, "2.98", member, "GET", "/v2.1/servers/detail", None).await;
    assert_eq!(
        images_of(&r)[&web],
        image(&region, REBUILD_IMAGE, Some(rebuilt))
    );
    // Back to an image without such properties: none shown.
    let r = at(
        &region,
        "2.98",
        member,
        "POST",
        &action,
        Some(json!({"rebuild": {"imageRef": BARE_IMAGE}})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    region.wait(&web, |s| s["status"] == "ACTIVE").await;
    assert_eq!(
        show("2.98", web.clone()).await,
        image(&region, BARE_IMAGE, Some(json!({})))
    );

    // A build request shows what its create recorded.
    let db = api_super::compute_api::db::ComputeDb::new(region.api.clone());
    let mut b = crate::heal::builds(&db, "pending", 1, chrono::Utc::now()).await;
    b[0].0.image_properties = props(&[("os_distro", "fedora")]);
    b[0].1.recorded_image_properties = props(&[("os_distro", "fedora")]);
    db.create_builds(&b, None, None).await.unwrap();
    let pending = b[0].0.uuid.clone();
    let admin = region.admin.clone();
    let r = at(
        &region,
        "2.98",
        &admin,
        "GET",
        &format!("/v2.1/servers/{pending}"),
        None,
    )
    .await;
    assert_eq!(body(&r)["server"]["status"], "BUILD", "{}", r.body);
    assert_eq!(
        body(&r)["server"]["image"],
        image(&region, IMAGE, Some(json!({"os_distro": "fedora"})))
    );
    let r = at(
        &region,
        "2.98",
        &admin,
        "GET",
        "/v2.1/servers/detail?all_tenants=1",
        None,
    )
    .await;
    let list = images_of(&r);
    assert_eq!(
        list[&pending],
        image(&region, IMAGE, Some(json!({"os_distro": "fedora"})))
    );
    assert_eq!(list[&bare], image(&region, BARE_IMAGE, Some(json!({}))));
    let r = at(
        &region,
        "2.97",
        &admin,
        "GET",
        &format!("/v2.1/servers/{pending}"),
        None,
    )
    .await;
    assert_eq!(body(&r)["server"]["image"], image(&region, IMAGE, None));
    region.stop().await;
}
