//! The image service (Glance v2 subset) against an in-process identity:
//! create, upload, download, list, filter, patch and delete as admin, member
//! and reader; project isolation; protected images; bad input; the
//! Compute API's lookup and the seeded image; metadata on PostgreSQL; the
//! real `openstack image` CLI.

use std::path::PathBuf;
use std::sync::Arc;

use api_super::image::{self, ImageConfig, LookupError, Running};
use md5::{Digest, Md5};
use serde_json::{json, Value};
use sha2::Sha512;

use crate::common::*;

const PATCH: &str = "application/openstack-images-v2.1-json-patch";

/// Identity plus an image service, with admin, member and reader tokens.
struct ImageEnv {
    id: Env,
    img: Running,
    admin: String,
    member: String,
    reader: String,
    http: reqwest::Client,
    store: PathBuf,
    /// The SQLite metadata store (kept alive; a test writes behind the
    /// service through its URL).
    db: Option<testkit::SqliteDb>,
}

async fn start_images(name: &str, pg_url: Option<&str>) -> ImageEnv {
    let port = testkit::free_port();
    let id = start(name, |c| {
        c.endpoints.image = format!("http://127.0.0.1:{port}");
    })
    .await;
    let a = id.addr();
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let (member, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    // A reader on the demo project.
    let (_, demo_project) = id.boot.member.clone().unwrap();
    let r = authed(
        a,
        &admin,
        "POST",
        "/v3/users",
        Some(json!({"user": {"name": "viewer", "password": "vpw"}})),
    )
    .await;
    let viewer = json(&r)["user"]["id"].as_str().unwrap().to_owned();
    let reader_role = id
        .boot
        .roles
        .iter()
        .find(|(n, _)| n == "reader")
        .unwrap()
        .1
        .clone();
    let grant = format!("/v3/projects/{demo_project}/users/{viewer}/roles/{reader_role}");
    assert_eq!(authed(a, &admin, "PUT", &grant, None).await.status, 204);
    let (reader, _) = token(a, "viewer", "vpw", Some("demo")).await;

    let db = testkit::sqlite(&format!("{name}_images"));
    let store = db.dir.join("store");
    let mut cfg = ImageConfig {
        listen: format!("127.0.0.1:{port}"),
        filesystem_store_datadir: store.display().to_string(),
        ..Default::default()
    };
    cfg.database.connection = pg_url.map(str::to_owned).unwrap_or_else(|| db.url.clone());
    let img = api_super::serve_image(cfg, id.running.identity.validator.clone())
        .await
        .expect("image service starts");
    ImageEnv {
        id,
        img,
        admin,
        member,
        reader,
        http: reqwest::Client::new(),
        store,
        db: Some(db),
    }
}

struct Resp {
    status: u16,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl ImageEnv {
    async fn send(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Resp {
        let url = format!("http://{}{}", self.img.addr, path);
        let mut rb = self
            .http
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url);
        if let Some(t) = token {
            rb = rb.header("x-auth-token", t);
        }
        if let Some(ct) = content_type {
            rb = rb.header("content-type", ct);
        }
        let r = rb.body(body).send().await.expect("request");
        Resp {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            bytes: r.bytes().await.expect("body").to_vec(),
        }
    }

    async fn call(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> Resp {
        match body {
            Some(b) => {
                let ct = if method == "PATCH" {
                    PATCH
                } else {
                    "application/json"
                };
                self.send(
                    Some(token),
                    method,
                    path,
                    Some(ct),
                    b.to_string().into_bytes(),
                )
                .await
            }
            None => self.send(Some(token), method, path, None, Vec::new()).await,
        }
    }

    async fn create(&self, token: &str, body: Value) -> Value {
        let r = self.call(token, "POST", "/v2/images", Some(body)).await;
        assert_eq!(
            r.status,
            201,
            "create: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        r.json()
    }

    async fn upload(&self, token: &str, id: &str, data: &[u8]) -> Resp {
        self.send(
            Some(token),
            "PUT",
            &format!("/v2/images/{id}/file"),
            Some("application/octet-stream"),
            data.to_vec(),
        )
        .await
    }

    async fn names(&self, token: &str, query: &str) -> Vec<String> {
        let r = self
            .call(token, "GET", &format!("/v2/images{query}"), None)
            .await;
        assert_eq!(
            r.status,
            200,
            "list {query}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        let mut v: Vec<String> = r.json()["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        v.sort();
        v
    }

    fn demo_project(&self) -> String {
        self.id.boot.member.clone().unwrap().1
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn hex_md5(b: &[u8]) -> String {
    format!("{:x}", Md5::digest(b))
}

fn hex_sha512(b: &[u8]) -> String {
    format!("{:x}", Sha512::digest(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_discovery_and_schemas() {
    let env = start_images("image_discovery", None).await;
    let r = env.send(None, "GET", "/", None, Vec::new()).await;
    assert_eq!(r.status, 300);
    assert!(r
        .header("x-openstack-request-id")
        .unwrap()
        .starts_with("req-"));
    let v = r.json();
    let current: Vec<&Value> = v["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["status"] == "CURRENT")
        .collect();
    assert_eq!(current.len(), 1);
    assert!(current[0]["id"].as_str().unwrap().starts_with("v2."));
    assert_eq!(
        current[0]["links"][0]["href"],
        format!("http://{}/v2/", env.img.addr)
    );
    let r = env.send(None, "GET", "/versions", None, Vec::new()).await;
    assert_eq!(r.status, 200);
    let r = env
        .call(&env.member, "GET", "/v2/schemas/image", None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["name"], "image");
    let r = env
        .call(&env.member, "GET", "/v2/schemas/images", None)
        .await;
    assert_eq!(r.json()["name"], "images");
    // No token, a bad token: 401 in Glance's error shape.
    let r = env.send(None, "GET", "/v2/images", None, Vec::new()).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["code"], 401);
    assert_eq!(r.json()["title"], "Unauthorized");
    let r = env.call("e1.x.y.z", "GET", "/v2/images", None).await;
    assert_eq!(r.status, 401);
    // The catalog's image endpoint is this service.
    let (_, body) = token(env.id.addr(), "demo", MEMBER_PW, Some("demo")).await;
    let image = body["token"]["catalog"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "image")
        .unwrap()
        .clone();
    assert_eq!(image["endpoints"][0]["url"], env.img.url());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_lifecycle_create_upload_download_patch_delete() {
    let env = start_images("image_member_lifecycle", None).await;
    let m = env.member.clone();
    let img = env
        .create(
            &m,
            json!({"name": "mine", "disk_format": "qcow2", "container_format": "bare",
                   "min_ram": 128, "min_disk": 1, "visibility": "private",
                   "tags": ["b", "a"], "os_distro": "cirros", "hw_disk_bus": "virtio"}),
        )
        .await;
    assert_eq!(img["status"], "queued");
    assert_eq!(img["owner"], env.demo_project());
    assert_eq!(img["visibility"], "private");
    assert_eq!(img["tags"], json!(["a", "b"]));
    assert_eq!(img["os_distro"], "cirros");
    assert_eq!(img["min_ram"], 128);
    assert_eq!(img["size"], Value::Null);
    let id = img["id"].as_str().unwrap().to_owned();
    assert_eq!(img["file"], format!("/v2/images/{id}/file"));

    // No data yet: 204 on download.
    let r = env
        .call(&m, "GET", &format!("/v2/images/{id}/file"), None)
        .await;
    assert_eq!(r.status, 204);

    let bytes = data(200_000);
    let r = env.upload(&m, &id, &bytes).await;
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.bytes));
    let r = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
    let v = r.json();
    assert_eq!(v["status"], "active");
    assert_eq!(v["size"], bytes.len());
    assert_eq!(v["checksum"], hex_md5(&bytes));
    assert_eq!(v["os_hash_algo"], "sha512");
    assert_eq!(v["os_hash_value"], hex_sha512(&bytes));
    assert!(env.store.join(&id).exists());

    let r = env
        .call(&m, "GET", &format!("/v2/images/{id}/file"), None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.bytes, bytes);
    assert_eq!(r.header("content-md5"), Some(hex_md5(&bytes).as_str()));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    // A second upload: 409.
    assert_eq!(env.upload(&m, &id, b"again").await.status, 409);

    // List and filters.
    env.create(&m, json!({"name": "other", "tags": ["a"]}))
        .await;
    assert_eq!(env.names(&m, "").await, ["mine", "other"]);
    assert_eq!(env.names(&m, "?name=mine").await, ["mine"]);
    assert_eq!(env.names(&m, "?status=queued").await, ["other"]);
    assert_eq!(env.names(&m, "?visibility=private").await, ["mine"]);
    assert_eq!(env.names(&m, "?tag=a").await, ["mine", "other"]);
    assert_eq!(env.names(&m, "?tag=a&tag=b").await, ["mine"]);
    assert_eq!(env.names(&m, "?os_distro=cirros").await, ["mine"]);
    let q = format!("?owner={}", env.demo_project());
    assert_eq!(env.names(&m, &q).await, ["mine", "other"]);

    // Patch: replace, add, remove; tags.
    let ops = json!([
        {"op": "replace", "path": "/name", "value": "renamed"},
        {"op": "add", "path": "/architecture", "value": "x86_64"},
        {"op": "remove", "path": "/hw_disk_bus"},
        {"op": "replace", "path": "/os_distro", "value": "ubuntu"},
        {"op": "replace", "path": "/tags", "value": ["z"]},
        {"op": "replace", "path": "/min_ram", "value": 256},
        {"op": "replace", "path": "/protected", "value": true},
    ]);
    let r = env
        .call(&m, "PATCH", &format!("/v2/images/{id}"), Some(ops))
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
    let v = r.json();
    assert_eq!(v["name"], "renamed");
    assert_eq!(v["architecture"], "x86_64");
    assert_eq!(v["os_distro"], "ubuntu");
    assert!(v.get("hw_disk_bus").is_none());
    assert_eq!(v["tags"], json!(["z"]));
    assert_eq!(v["min_ram"], 256);
    // Persisted.
    let v = env
        .call(&m, "GET", &format!("/v2/images/{id}"), None)
        .await
        .json();
    assert_eq!(v["name"], "renamed");
    assert_eq!(v["architecture"], "x86_64");
    assert!(v.get("hw_disk_bus").is_none());

    // Protected: 403 on delete until unprotected.
    let r = env
        .call(&m, "DELETE", &format!("/v2/images/{id}"), None)
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["code"], 403);
    let unprotect = json!([{"op": "replace", "path": "/protected", "value": false}]);
    let r = env
        .call(&m, "PATCH", &format!("/v2/images/{id}"), Some(unprotect))
        .await;
    assert_eq!(r.status, 200);
    let r = env
        .call(&m, "DELETE", &format!("/v2/images/{id}"), None)
        .await;
    assert_eq!(r.status, 204);
    let r = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["title"], "Not Found");
    assert!(
        !env.store.join(&id).exists(),
        "the file goes with the image"
    );
    assert_eq!(env.names(&m, "").await, ["other"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_are_isolated_and_public_images_are_shared() {
    let env = start_images("image_isolation", None).await;
    let (a, m, r) = (env.admin.clone(), env.member.clone(), env.reader.clone());
    let private = env
        .create(
            &a,
            json!({"name": "admin-private", "visibility": "private"}),
        )
        .await;
    let pid = private["id"].as_str().unwrap().to_owned();
    env.upload(&a, &pid, b"secret").await;
    let public = env
        .create(&a, json!({"name": "admin-public", "visibility": "public"}))
        .await;
    let pubid = public["id"].as_str().unwrap().to_owned();
    assert_eq!(env.upload(&a, &pubid, b"shared bytes").await.status, 204);
    let community = env
        .create(
            &a,
            json!({"name": "admin-community", "visibility": "community"}),
        )
        .await;
    let cid = community["id"].as_str().unwrap().to_owned();
    let theirs = env.create(&m, json!({"name": "demo-shared"})).await;
    assert_eq!(theirs["visibility"], "shared");
    let tid = theirs["id"].as_str().unwrap().to_owned();

    // Another project's private image: 404 for everything.
    for (method, path, body) in [
        ("GET", format!("/v2/images/{pid}"), None),
        ("GET", format!("/v2/images/{pid}/file"), None),
        ("DELETE", format!("/v2/images/{pid}"), None),
        (
            "PATCH",
            format!("/v2/images/{pid}"),
            Some(json!([{"op": "replace", "path": "/name", "value": "x"}])),
        ),
    ] {
        let resp = env.call(&m, method, &path, body).await;
        assert_eq!(resp.status, 404, "member {method} {path}");
    }
    assert_eq!(env.upload(&m, &pid, b"x").await.status, 404);

    // Public: visible, downloadable, not modifiable by others.
    assert_eq!(env.names(&m, "").await, ["admin-public", "demo-shared"]);
    assert_eq!(
        env.names(&m, "?visibility=all").await,
        ["admin-community", "admin-public", "demo-shared"]
    );
    assert_eq!(
        env.names(&m, "?visibility=community").await,
        ["admin-community"]
    );
    let resp = env
        .call(&m, "GET", &format!("/v2/images/{cid}"), None)
        .await;
    assert_eq!(resp.status, 200, "a community image is visible by id");
    let resp = env
        .call(&m, "GET", &format!("/v2/images/{pubid}/file"), None)
        .await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.bytes, b"shared bytes");
    let resp = env
        .call(&m, "DELETE", &format!("/v2/images/{pubid}"), None)
        .await;
    assert_eq!(resp.status, 403);
    let resp = env
        .call(
            &m,
            "PATCH",
            &format!("/v2/images/{pubid}"),
            Some(json!([{"op": "replace", "path": "/name", "value": "mine now"}])),
        )
        .await;
    assert_eq!(resp.status, 403);

    // A member may not publish; may not create for another project.
    let resp = env
        .call(
            &m,
            "POST",
            "/v2/images",
            Some(json!({"name": "p", "visibility": "public"})),
        )
        .await;
    assert_eq!(resp.status, 403);
    let resp = env
        .call(
            &m,
            "PATCH",
            &format!("/v2/images/{tid}"),
            Some(json!([{"op": "replace", "path": "/visibility", "value": "public"}])),
        )
        .await;
    assert_eq!(resp.status, 403);
    let resp = env
        .call(
            &m,
            "POST",
            "/v2/images",
            Some(json!({"name": "p", "owner": env.id.boot.admin_project_id})),
        )
        .await;
    assert_eq!(resp.status, 403);

    // The reader of the demo project reads, never writes.
    assert_eq!(env.names(&r, "").await, ["admin-public", "demo-shared"]);
    assert_eq!(
        env.call(&r, "GET", &format!("/v2/images/{tid}"), None)
            .await
            .status,
        200
    );
    assert_eq!(
        env.call(&r, "POST", "/v2/images", Some(json!({"name": "r"})))
            .await
            .status,
        403
    );
    assert_eq!(
        env.call(&r, "DELETE", &format!("/v2/images/{tid}"), None)
            .await
            .status,
        403
    );
    assert_eq!(env.upload(&r, &tid, b"x").await.status, 403);
    let resp = env
        .call(&r, "GET", &format!("/v2/images/{pubid}/file"), None)
        .await;
    assert_eq!(
        resp.status, 403,
        "readers do not download (Glance's default)"
    );

    // The admin sees and manages everything.
    assert_eq!(
        env.names(&a, "").await,
        [
            "admin-community",
            "admin-private",
            "admin-public",
            "demo-shared"
        ]
    );
    let q = format!("?owner={}", env.demo_project());
    assert_eq!(env.names(&a, &q).await, ["demo-shared"]);
    let resp = env
        .call(
            &a,
            "PATCH",
            &format!("/v2/images/{tid}"),
            Some(json!([{"op": "replace", "path": "/visibility", "value": "public"}])),
        )
        .await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["visibility"], "public");
    assert_eq!(
        env.call(&a, "DELETE", &format!("/v2/images/{tid}"), None)
            .await
            .status,
        204
    );
    assert_eq!(
        env.call(&a, "DELETE", &format!("/v2/images/{pid}"), None)
            .await
            .status,
        204
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused() {
    let env = start_images("image_bad_input", None).await;
    let m = env.member.clone();
    let bad_bodies = [
        json!({"disk_format": "floppy"}),
        json!({"container_format": "zip"}),
        json!({"min_ram": -1}),
        json!({"min_disk": "1"}),
        json!({"protected": "yes"}),
        json!({"visibility": "everyone"}),
        json!({"name": 7}),
        json!({"name": "x".repeat(256)}),
        json!({"tags": "a"}),
        json!({"tags": [1]}),
        json!({"id": "not-a-uuid"}),
        json!({"my_property": 5}),
        json!(["not", "an", "object"]),
    ];
    for b in bad_bodies {
        let r = env.call(&m, "POST", "/v2/images", Some(b.clone())).await;
        assert_eq!(r.status, 400, "{b}: {}", String::from_utf8_lossy(&r.bytes));
        assert_eq!(r.json()["code"], 400);
    }
    let r = env
        .send(
            Some(&m),
            "POST",
            "/v2/images",
            Some("application/json"),
            b"{".to_vec(),
        )
        .await;
    assert_eq!(r.status, 400);
    for ro in [
        json!({"status": "active"}),
        json!({"checksum": "x"}),
        json!({"size": 1}),
        json!({"location": "file:///etc/passwd"}),
    ] {
        let r = env.call(&m, "POST", "/v2/images", Some(ro.clone())).await;
        assert_eq!(r.status, 403, "{ro}");
    }
    // An explicit id: used; taken again → 409.
    let fixed = "5a6d0b58-73f2-4a0f-9f50-7a1b6b1c2d3e";
    let v = env.create(&m, json!({"id": fixed, "name": "fixed"})).await;
    assert_eq!(v["id"], fixed);
    let r = env
        .call(&m, "POST", "/v2/images", Some(json!({"id": fixed})))
        .await;
    assert_eq!(r.status, 409);

    let path = format!("/v2/images/{fixed}");
    // Patch: wrong media type, malformed ops, read-only, missing property.
    let r = env
        .send(
            Some(&m),
            "PATCH",
            &path,
            Some("application/json"),
            b"[]".to_vec(),
        )
        .await;
    assert_eq!(r.status, 415);
    for (ops, want) in [
        (json!({"op": "replace"}), 400),
        (json!([{"op": "move", "path": "/name", "value": "x"}]), 400),
        (
            json!([{"op": "replace", "path": "name", "value": "x"}]),
            400,
        ),
        (json!([{"op": "replace", "path": "/name"}]), 400),
        (
            json!([{"op": "replace", "path": "/min_ram", "value": "big"}]),
            400,
        ),
        (
            json!([{"op": "replace", "path": "/status", "value": "active"}]),
            403,
        ),
        (json!([{"op": "remove", "path": "/name"}]), 403),
        (json!([{"op": "remove", "path": "/nope"}]), 409),
        (
            json!([{"op": "replace", "path": "/nope", "value": "x"}]),
            409,
        ),
    ] {
        let r = env.call(&m, "PATCH", &path, Some(ops.clone())).await;
        assert_eq!(
            r.status,
            want,
            "{ops}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
    }
    // Upload: wrong media type.
    let r = env
        .send(
            Some(&m),
            "PUT",
            &format!("{path}/file"),
            Some("text/plain"),
            b"x".to_vec(),
        )
        .await;
    assert_eq!(r.status, 415);
    // List: bad limit, sort key, direction, marker, status.
    for q in [
        "?limit=-1",
        "?limit=x",
        "?sort_key=color",
        "?sort_dir=up",
        "?sort=name:sideways",
        "?marker=00000000-0000-0000-0000-000000000000",
        "?status=sleeping",
        "?visibility=everyone",
    ] {
        let r = env.call(&m, "GET", &format!("/v2/images{q}"), None).await;
        assert_eq!(r.status, 400, "{q}");
    }
    // Unknown and malformed ids: 404.
    for id in ["00000000-0000-0000-0000-000000000000", "nope"] {
        let r = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
        assert_eq!(r.status, 404);
    }
    let r = env.call(&m, "GET", "/v2/nothing", None).await;
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_sorts_and_pages() {
    let env = start_images("image_paging", None).await;
    let m = env.member.clone();
    for (i, n) in ["d", "b", "e", "a", "c"].iter().enumerate() {
        env.create(&m, json!({"name": n, "min_ram": i})).await;
    }
    // Follow `next` links two at a time, sorted by name.
    let mut seen = Vec::new();
    let mut path = "/v2/images?sort=name:asc&limit=2".to_owned();
    let mut pages = 0;
    loop {
        let r = env.call(&m, "GET", &path, None).await;
        assert_eq!(r.status, 200, "{path}");
        let v = r.json();
        let page: Vec<String> = v["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(page.len() <= 2);
        seen.extend(page);
        pages += 1;
        match v["next"].as_str() {
            Some(n) => path = n.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
    assert_eq!(pages, 3);
    // Legacy sort_key / sort_dir, and the default (newest first).
    let r = env
        .call(&m, "GET", "/v2/images?sort_key=name&sort_dir=desc", None)
        .await;
    let names: Vec<String> = r.json()["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["e", "d", "c", "b", "a"]);
    let r = env.call(&m, "GET", "/v2/images?limit=1", None).await;
    let v = r.json();
    assert_eq!(v["images"].as_array().unwrap().len(), 1);
    assert!(v["next"].as_str().unwrap().contains("marker="));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_lookup_and_seeded_image() {
    let env = start_images("image_lookup", None).await;
    let svc = env.img.service.clone();
    let admin_project = env.id.boot.admin_project_id.clone();
    let seeded = image::seed_cirros_like(&svc, &admin_project).await.unwrap();
    assert_eq!(seeded.row.status, "active");
    assert_eq!(seeded.row.visibility, "public");
    assert_eq!(seeded.row.size, Some(image::seed::CIRROS_SIZE as i64));
    // Idempotent.
    let again = image::seed_cirros_like(&svc, &admin_project).await.unwrap();
    assert_eq!(again.row.id, seeded.row.id);
    // The member downloads it; the bytes are the generated ones.
    let r = env
        .call(
            &env.member,
            "GET",
            &format!("/v2/images/{}/file", seeded.row.id),
            None,
        )
        .await;
    assert_eq!(r.bytes, image::seed::cirros_like_bytes());
    assert_eq!(r.header("content-md5").unwrap(), hex_md5(&r.bytes));

    let lookup = env.img.lookup();
    let member_claims = fabric::token::TokenValidator::decode_unverified(&env.member)
        .unwrap()
        .1;
    let by_name = lookup
        .find_bootable(&member_claims, image::CIRROS_NAME, 512, 1)
        .await
        .unwrap();
    assert_eq!(by_name.id.to_string(), seeded.row.id);
    assert_eq!(by_name.properties["os_distro"], "cirros");
    let by_id = lookup.find(&member_claims, &seeded.row.id).await.unwrap();
    assert_eq!(by_id, by_name);
    let url = format!("http://glance/v2/images/{}", seeded.row.id);
    assert_eq!(
        lookup.find(&member_claims, &url).await.unwrap().id,
        by_id.id
    );
    // Zero-disk flavors skip the disk check, as in Nova.
    by_id.check_flavor(64, 0).unwrap();
    // An image bigger than the root disk: Nova's FlavorDiskSmallerThanImage,
    // checked before min_disk.
    let mut huge = by_id.clone();
    huge.size_bytes = Some(3 << 30);
    huge.min_disk_gb = 4;
    assert_eq!(
        huge.check_flavor(64, 2).unwrap_err().to_string(),
        "Flavor's disk is too small for requested image. Flavor disk is 2147483648 bytes, image \
         is 3221225472 bytes."
    );

    // min_ram / min_disk against the flavor; not active; not visible.
    let big = env
        .create(
            &env.member,
            json!({"name": "big", "min_ram": 2048, "min_disk": 20}),
        )
        .await;
    let big_id = big["id"].as_str().unwrap();
    assert!(matches!(
        lookup.find_bootable(&member_claims, big_id, 4096, 40).await,
        Err(LookupError::NotActive { .. })
    ));
    env.upload(&env.member, big_id, b"data").await;
    assert!(matches!(
        lookup.find_bootable(&member_claims, "big", 1024, 40).await,
        Err(LookupError::FlavorMemoryTooSmall)
    ));
    let small = lookup.find_bootable(&member_claims, "big", 4096, 10).await;
    assert!(matches!(
        small,
        Err(LookupError::FlavorDiskSmallerThanMinDisk {
            flavor_bytes: 10737418240,
            min_disk_bytes: 21474836480,
        })
    ));
    assert_eq!(
        small.unwrap_err().to_string(),
        "Flavor's disk is smaller than the minimum size specified in image metadata. Flavor \
         disk is 10737418240 bytes, minimum size is 21474836480 bytes."
    );
    lookup
        .find_bootable(&member_claims, "big", 4096, 20)
        .await
        .unwrap();
    let private = env
        .create(
            &env.admin,
            json!({"name": "hidden", "visibility": "private"}),
        )
        .await;
    let hidden_id = private["id"].as_str().unwrap();
    for r in [hidden_id, "hidden", "no-such-image"] {
        assert!(matches!(
            lookup.find(&member_claims, r).await,
            Err(LookupError::NotFound)
        ));
    }
    // Two visible images with one name, neither the caller's: ambiguous.
    for _ in 0..2 {
        env.create(&env.admin, json!({"name": "twin", "visibility": "public"}))
            .await;
    }
    assert!(matches!(
        lookup.find(&member_claims, "twin").await,
        Err(LookupError::Ambiguous(_))
    ));
    // The caller's own image wins over public ones of the same name.
    env.create(&env.member, json!({"name": "twin"})).await;
    assert_eq!(
        lookup.find(&member_claims, "twin").await.unwrap().owner,
        env.demo_project()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_on_postgresql() {
    let Some(pg) = testkit::postgres("image_metadata_pg").await else {
        return;
    };
    let env = start_images("image_metadata_pg", Some(&pg.url)).await;
    let m = env.member.clone();
    let v = env
        .create(
            &m,
            json!({"name": "pg", "tags": ["t"], "k": "v", "min_disk": 2}),
        )
        .await;
    let id = v["id"].as_str().unwrap().to_owned();
    let bytes = data(70_000);
    assert_eq!(env.upload(&m, &id, &bytes).await.status, 204);
    let r = env
        .call(
            &m,
            "PATCH",
            &format!("/v2/images/{id}"),
            Some(json!([{"op": "add", "path": "/k2", "value": "v2"}])),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(env.names(&m, "?tag=t&k=v").await, ["pg"]);
    let r = env
        .call(&m, "GET", &format!("/v2/images/{id}/file"), None)
        .await;
    assert_eq!(r.bytes, bytes);
    // Tags one at a time, deactivation, and the in-process filters.
    let tag = |t: &str| format!("/v2/images/{id}/tags/{t}");
    for _ in 0..2 {
        assert_eq!(env.call(&m, "PUT", &tag("u"), None).await.status, 204);
    }
    assert_eq!(env.names(&m, "?tag=t&tag=u").await, ["pg"]);
    assert_eq!(env.call(&m, "DELETE", &tag("t"), None).await.status, 204);
    assert_eq!(env.call(&m, "DELETE", &tag("t"), None).await.status, 404);
    assert_eq!(env.names(&m, "?tag=t").await, Vec::<String>::new());
    let deactivate = format!("/v2/images/{id}/actions/deactivate");
    assert_eq!(env.call(&m, "POST", &deactivate, None).await.status, 204);
    assert_eq!(
        env.names(&m, "?status=in:deactivated,queued&size_min=70000")
            .await,
        ["pg"]
    );
    let reactivate = format!("/v2/images/{id}/actions/reactivate");
    assert_eq!(env.call(&m, "POST", &reactivate, None).await.status, 204);
    // The schema is created again on a second start, harmlessly.
    let mut cfg = ImageConfig {
        listen: "127.0.0.1:0".into(),
        filesystem_store_datadir: env.store.display().to_string(),
        ..Default::default()
    };
    cfg.database.connection = pg.url.clone();
    let second = api_super::serve_image(cfg, env.id.running.identity.validator.clone())
        .await
        .unwrap();
    let again = second
        .service
        .get(
            &api_super::image::service::Caller {
                claims: fabric::token::TokenValidator::decode_unverified(&m)
                    .unwrap()
                    .1,
                request_id: "req-test".into(),
            },
            &id,
        )
        .await
        .unwrap();
    assert_eq!(again.properties["k2"], "v2");
    assert_eq!(
        env.call(&m, "DELETE", &format!("/v2/images/{id}"), None)
            .await
            .status,
        204
    );
}

/// The real CLI: `openstack image create --file`, `image list`, `image
/// show`, `image save`, `image set`, `image delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack_image_cli() {
    let exe = match tokio::task::spawn_blocking(crate::cli::openstack)
        .await
        .unwrap()
    {
        Ok(e) => e,
        Err(why) => return crate::cli::skip_or_panic(&why),
    };
    let env = Arc::new(start_images("image_cli", None).await);
    let url = env.id.running.url();
    let work = testkit::temp_dir("image_cli_files");
    let file = work.join("disk.img");
    let bytes = data(50_000);
    std::fs::write(&file, &bytes).unwrap();
    let env2 = env.clone();
    let work2 = work.clone();
    tokio::task::spawn_blocking(move || {
        let work = work2;
        let run = |user: &str, pw: &str, project: &str, args: &[&str]| {
            let mut cmd = std::process::Command::new(&exe);
            for (k, _) in std::env::vars() {
                if k.starts_with("OS_") {
                    cmd.env_remove(k);
                }
            }
            let out = cmd
                .args(args)
                .env("OS_AUTH_URL", format!("{url}/v3"))
                .env("OS_IDENTITY_API_VERSION", "3")
                .env("OS_USERNAME", user)
                .env("OS_PASSWORD", pw)
                .env("OS_PROJECT_NAME", project)
                .env("OS_USER_DOMAIN_NAME", "Default")
                .env("OS_PROJECT_DOMAIN_NAME", "Default")
                .env("OS_REGION_NAME", "RegionOne")
                .output()
                .expect("run openstack");
            let (o, e) = (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            assert!(out.status.success(), "openstack {args:?}:\n{e}\n{o}");
            o
        };
        let js = |s: String| -> Value { serde_json::from_str(&s).unwrap() };
        let f = file.display().to_string();
        let v = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &[
                "image",
                "create",
                "--file",
                &f,
                "--disk-format",
                "qcow2",
                "--container-format",
                "bare",
                "--min-ram",
                "64",
                "--property",
                "os_distro=cirros",
                "--tag",
                "cli",
                "cli-image",
                "-f",
                "json",
            ],
        ));
        assert_eq!(v["name"], "cli-image");
        let list = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "list", "-f", "json"],
        ));
        assert_eq!(list[0]["Name"], "cli-image");
        assert_eq!(list[0]["Status"], "active");
        let show = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "show", "cli-image", "-f", "json"],
        ));
        assert_eq!(show["checksum"], hex_md5(&bytes));
        assert_eq!(show["size"], bytes.len());
        let out = work.join("saved.img");
        run(
            "demo",
            MEMBER_PW,
            "demo",
            &[
                "image",
                "save",
                "--file",
                &out.display().to_string(),
                "cli-image",
            ],
        );
        assert_eq!(std::fs::read(&out).unwrap(), bytes);
        run(
            "demo",
            MEMBER_PW,
            "demo",
            &[
                "image",
                "set",
                "--property",
                "hw_disk_bus=virtio",
                "--name",
                "cli-renamed",
                "cli-image",
            ],
        );
        let show = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "show", "cli-renamed", "-f", "json"],
        ));
        assert_eq!(show["properties"]["hw_disk_bus"], "virtio");
        // Tags: `image set --tag` adds one, `image unset --tag` removes one
        // (`DELETE /v2/images/{id}/tags/{tag}`).
        run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "set", "--tag", "extra", "cli-renamed"],
        );
        let tags = |show: &Value| -> Vec<String> {
            match &show["tags"] {
                Value::Array(a) => a.iter().map(|t| t.as_str().unwrap().to_owned()).collect(),
                Value::String(s) => s
                    .split(',')
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
                    .collect(),
                other => panic!("tags: {other}"),
            }
        };
        let show = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "show", "cli-renamed", "-f", "json"],
        ));
        let mut t = tags(&show);
        t.sort();
        assert_eq!(t, ["cli", "extra"]);
        run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "unset", "--tag", "cli", "cli-renamed"],
        );
        let show = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "show", "cli-renamed", "-f", "json"],
        ));
        assert_eq!(tags(&show), ["extra"]);
        // The admin sees it; the demo user deletes it.
        let list = js(run(
            "admin",
            ADMIN_PW,
            "admin",
            &["image", "list", "-f", "json"],
        ));
        assert_eq!(list.as_array().unwrap().len(), 1);
        run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "delete", "cli-renamed"],
        );
        let list = js(run(
            "demo",
            MEMBER_PW,
            "demo",
            &["image", "list", "-f", "json"],
        ));
        assert_eq!(list.as_array().unwrap().len(), 0);
        drop(env2);
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(work);
}

/// A boot's lookup by id answers from memory for `boot_lookup_cache_ms`
/// (a write behind the service's back, as another process would make, is
/// not seen until then), while every write through the service is seen
/// by the next lookup at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_lookups_by_id_are_cached_and_see_writes_through_the_service_at_once() {
    let env = start_images("image_boot_cache", None).await;
    let lookup = env.img.lookup();
    let member = fabric::token::TokenValidator::decode_unverified(&env.member)
        .unwrap()
        .1;
    let created = env
        .create(
            &env.admin,
            json!({"name": "shared", "visibility": "public"}),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    // Read (and kept) while queued; the upload is a write: active at once.
    assert!(matches!(
        lookup.find_bootable(&member, &id, 512, 1).await,
        Err(LookupError::NotActive { .. })
    ));
    assert_eq!(env.upload(&env.admin, &id, b"bytes").await.status, 204);
    lookup.find_bootable(&member, &id, 512, 1).await.unwrap();

    // Behind the service's back: not seen while the entry lives, seen after.
    let url = env.db.as_ref().unwrap().url.clone();
    let other = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE images SET min_ram = 4096 WHERE id = $1")
        .bind(&id)
        .execute(&other)
        .await
        .unwrap();
    lookup.find_bootable(&member, &id, 512, 1).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert!(matches!(
        lookup.find_bootable(&member, &id, 512, 1).await,
        Err(LookupError::FlavorMemoryTooSmall)
    ));

    // Through the service: each write is seen by the very next lookup.
    let patch = |ops: Value| {
        let path = format!("/v2/images/{id}");
        let env = &env;
        async move {
            let r = env.call(&env.admin, "PATCH", &path, Some(ops)).await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
        }
    };
    patch(json!([{"op": "replace", "path": "/min_ram", "value": 256}])).await;
    lookup.find_bootable(&member, &id, 512, 1).await.unwrap();
    patch(json!([{"op": "replace", "path": "/visibility", "value": "private"}])).await;
    assert!(matches!(
        lookup.find(&member, &id).await,
        Err(LookupError::NotFound)
    ));
    patch(json!([{"op": "replace", "path": "/visibility", "value": "public"}])).await;
    lookup.find_bootable(&member, &id, 512, 1).await.unwrap();
    let r = env
        .call(&env.admin, "DELETE", &format!("/v2/images/{id}"), None)
        .await;
    assert_eq!(r.status, 204);
    assert!(matches!(
        lookup.find(&member, &id).await,
        Err(LookupError::NotFound)
    ));
}

/// `PUT` / `DELETE /v2/images/{id}/tags/{tag}`: idempotent add, the
/// create's tag rules and quota, 404 for an image the caller cannot see,
/// 403 for one it may not change, 404 for an absent tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_are_added_and_removed_one_at_a_time() {
    let env = start_images("image_tags", None).await;
    let m = env.member.clone();
    let id = env.create(&m, json!({"name": "t", "tags": ["a"]})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let tag = |t: &str| format!("/v2/images/{id}/tags/{t}");
    let tags = |v: Value| -> Vec<String> {
        v["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    };
    for _ in 0..2 {
        let r = env.call(&m, "PUT", &tag("b%20c"), None).await;
        assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.bytes));
    }
    let shown = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
    assert_eq!(tags(shown.json()), ["a", "b c"]);
    assert_eq!(env.names(&m, "?tag=b%20c").await, ["t"]);
    // The create's rules: at most 255 characters.
    let long = "x".repeat(256);
    assert_eq!(env.call(&m, "PUT", &tag(&long), None).await.status, 400);
    // A reader may not; another project cannot see it; an admin may.
    let r = env.call(&env.reader, "PUT", &tag("r"), None).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        format!("Not allowed to update tags for image {id}.")
    );
    assert_eq!(
        env.call(&env.reader, "DELETE", &tag("a"), None)
            .await
            .status,
        403
    );
    let private = env
        .create(&env.admin, json!({"name": "adm", "visibility": "private"}))
        .await;
    let adm = private["id"].as_str().unwrap();
    for method in ["PUT", "DELETE"] {
        let r = env
            .call(&m, method, &format!("/v2/images/{adm}/tags/a"), None)
            .await;
        assert_eq!(r.status, 404, "{method}");
    }
    let r = env
        .call(
            &m,
            "PUT",
            "/v2/images/00000000-0000-0000-0000-000000000000/tags/a",
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        env.call(&env.admin, "PUT", &tag("z"), None).await.status,
        204
    );
    // Delete: 204, then 404 "Tag … not found".
    assert_eq!(
        env.call(&m, "DELETE", &tag("b%20c"), None).await.status,
        204
    );
    let r = env.call(&m, "DELETE", &tag("b%20c"), None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "Tag b c not found.");
    let shown = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
    assert_eq!(tags(shown.json()), ["a", "z"]);
    // The tag quota, as the create's: a 129th tag is a 413; a present one
    // is still fine.
    let full: Vec<String> = (0..128).map(|i| format!("t{i}")).collect();
    let full = env.create(&m, json!({"name": "full", "tags": full})).await;
    let fid = full["id"].as_str().unwrap();
    let r = env
        .call(&m, "PUT", &format!("/v2/images/{fid}/tags/one-more"), None)
        .await;
    assert_eq!(r.status, 413);
    let r = env
        .call(&m, "PUT", &format!("/v2/images/{fid}/tags/t5"), None)
        .await;
    assert_eq!(r.status, 204);
}

/// `POST /v2/images/{id}/actions/deactivate` and `/reactivate`: only
/// between `active` and `deactivated`; a deactivated image is downloaded
/// by admins only and is not bootable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivate_and_reactivate() {
    use api_super::compute_api::images::{BootNeeds, ImageLookup as _};
    let env = start_images("image_deactivate", None).await;
    let m = env.member.clone();
    let id = env.create(&m, json!({"name": "d"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let action = |a: &str| format!("/v2/images/{id}/actions/{a}");
    let r = env.call(&m, "POST", &action("deactivate"), None).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "Not allowed to deactivate image in status 'queued'"
    );
    let r = env.call(&m, "POST", &action("reactivate"), None).await;
    assert_eq!(r.status, 403);
    let bytes = data(3000);
    assert_eq!(env.upload(&m, &id, &bytes).await.status, 204);
    // A reader may not; the owner may, twice.
    let r = env
        .call(&env.reader, "POST", &action("deactivate"), None)
        .await;
    assert_eq!(r.status, 403);
    for _ in 0..2 {
        let r = env.call(&m, "POST", &action("deactivate"), None).await;
        assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.bytes));
    }
    let shown = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
    assert_eq!(shown.json()["status"], "deactivated");
    assert_eq!(env.names(&m, "?status=deactivated").await, ["d"]);
    let file = format!("/v2/images/{id}/file");
    let r = env.call(&m, "GET", &file, None).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "The requested image has been deactivated. Image data download is forbidden."
    );
    let r = env.call(&env.admin, "GET", &file, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.bytes, bytes);
    // Nova's boot path refuses it: 400 "Image … is not active.".
    let lookup = env.img.lookup();
    let claims = fabric::token::TokenValidator::decode_unverified(&m)
        .unwrap()
        .1;
    let needs = BootNeeds {
        claims: &claims,
        ram_mb: 512,
        disk_gb: 1,
    };
    match lookup.resolve(&id, needs).await {
        Err(e) => {
            assert_eq!(e.status(), 400);
            assert_eq!(e.to_string(), format!("Image {id} is not active."));
        }
        Ok(img) => panic!("booted a deactivated image: {img:?}"),
    }
    // Back to active: downloadable and bootable again.
    for _ in 0..2 {
        let r = env.call(&m, "POST", &action("reactivate"), None).await;
        assert_eq!(r.status, 204);
    }
    assert_eq!(env.call(&m, "GET", &file, None).await.bytes, bytes);
    assert_eq!(lookup.resolve(&id, needs).await.unwrap().id, id);
    let r = env
        .call(
            &m,
            "POST",
            "/v2/images/00000000-0000-0000-0000-000000000000/actions/deactivate",
            None,
        )
        .await;
    assert_eq!(r.status, 404);
}

/// The Compute API's lookup: an image service failure is a 500 (the
/// server create's `computeFault`), not the caller's 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_service_failure_during_a_boot_is_a_500() {
    use api_super::compute_api::images::{BootNeeds, ImageLookup as _};
    let env = start_images("image_lookup_fails", None).await;
    let lookup = env.img.lookup();
    let claims = fabric::token::TokenValidator::decode_unverified(&env.member)
        .unwrap()
        .1;
    let needs = BootNeeds {
        claims: &claims,
        ram_mb: 512,
        disk_gb: 1,
    };
    let unknown = "00000000-0000-0000-0000-000000000001";
    assert_eq!(
        lookup.resolve(unknown, needs).await.unwrap_err().status(),
        400
    );
    // The metadata store breaks behind the service's back.
    let other = sqlx::SqlitePool::connect(&env.db.as_ref().unwrap().url)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE images RENAME TO images_gone")
        .execute(&other)
        .await
        .unwrap();
    let e = lookup.resolve(unknown, needs).await.unwrap_err();
    assert_eq!(e.status(), 500, "{e}");
    let body = axum::response::IntoResponse::into_response(e);
    assert_eq!(body.status(), 500);
    let bytes = axum::body::to_bytes(body.into_body(), 1 << 20)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["computeFault"]["code"], 500, "{v}");
}

/// The list filters Glance has: size range, protected, id / name / status
/// with `in:`, checksum, os_hash_value, created_at / updated_at with
/// operators, member_status; Glance's sort keys only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_as_glance() {
    let env = start_images("image_filters", None).await;
    let m = env.member.clone();
    let mut ids = Vec::new();
    for (name, size, year) in [("s", 10, 2020), ("m", 100, 2021), ("l", 1000, 2022)] {
        let v = env
            .create(&m, json!({"name": name, "protected": name == "m"}))
            .await;
        let id = v["id"].as_str().unwrap().to_owned();
        assert_eq!(env.upload(&m, &id, &data(size)).await.status, 204);
        ids.push(id);
        // Known times, behind the service's back.
        let at = chrono::NaiveDate::from_ymd_opt(year, 1, 1)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis();
        let other = sqlx::SqlitePool::connect(&env.db.as_ref().unwrap().url)
            .await
            .unwrap();
        sqlx::query("UPDATE images SET created_at = $2, updated_at = $3 WHERE id = $1")
            .bind(&ids[ids.len() - 1])
            .bind(at + 123)
            .bind(at + 3_600_000)
            .execute(&other)
            .await
            .unwrap();
        other.close().await;
    }
    env.create(&m, json!({"name": "q"})).await;
    let sha = hex_sha512(&data(100));
    let md5 = hex_md5(&data(1000));
    for (q, want) in [
        ("?size_min=100", vec!["l", "m"]),
        ("?size_max=100", vec!["m", "s"]),
        ("?size_min=11&size_max=999", vec!["m"]),
        ("?protected=true", vec!["m"]),
        ("?protected=false", vec!["l", "q", "s"]),
        (format!("?id={}", ids[0]).as_str(), vec!["s"]),
        (
            format!("?id=in:{},{}", ids[0], ids[2]).as_str(),
            vec!["l", "s"],
        ),
        ("?name=in:s,\"m\",x", vec!["m", "s"]),
        ("?name=eq:q", vec!["q"]),
        ("?status=in:queued,active&size_max=10", vec!["s"]),
        ("?status=queued", vec!["q"]),
        (format!("?checksum={md5}").as_str(), vec!["l"]),
        (format!("?os_hash_value={sha}").as_str(), vec!["m"]),
        ("?created_at=gt:2020-06-01T00:00:00Z", vec!["l", "m", "q"]),
        ("?created_at=lte:2021-01-01T00:00:00Z", vec!["m", "s"]),
        ("?created_at=lt:2021-01-01T00:00:00Z", vec!["s"]),
        ("?created_at=eq:2021-01-01T00:00:00Z", vec!["m"]),
        ("?created_at=2021-01-01T00:00:00Z", vec!["m"]),
        ("?created_at=2021-01-01T01:00:00%2B01:00", vec!["m"]),
        ("?created_at=gte:2022-01-01", vec!["l", "q"]),
        (
            "?created_at=neq:2021-01-01T00:00:00Z&created_at=lt:2023-01-01T00:00:00Z",
            vec!["l", "s"],
        ),
        ("?updated_at=lt:2021-01-01T01:00:01Z", vec!["m", "s"]),
        ("?member_status=all", vec!["l", "m", "q", "s"]),
        ("?member_status=pending", vec!["l", "m", "q", "s"]),
    ] {
        assert_eq!(env.names(&m, q).await, want, "{q}");
    }
    for (q, msg) in [
        ("?size_min=big", "Unable to filter on a range with a non-numeric value."),
        (
            "?protected=yes",
            "Invalid value 'yes' for 'protected' filter. Valid values are 'true' or 'false'.",
        ),
        (
            "?created_at=gt:yesterday",
            "Bad \"created_at\" query filter format. Use ISO 8601 DateTime notation.",
        ),
        (
            "?updated_at=2021-13-01",
            "Bad \"updated_at\" query filter format. Use ISO 8601 DateTime notation.",
        ),
        (
            "?created_at=around:2021-01-01T00:00:00Z",
            "Unable to filter on a unknown operator.",
        ),
        ("?id=like:x", "Unable to filter by unknown operator 'like'."),
        ("?member_status=maybe", "Invalid status: maybe"),
        (
            "?sort_key=min_ram",
            "Invalid sort key: min_ram. It must be one of the following: name, status, \
             container_format, disk_format, size, id, created_at, updated_at.",
        ),
        ("?sort=owner:asc", "Invalid sort key: owner. It must be one of the following: name, status, container_format, disk_format, size, id, created_at, updated_at."),
        ("?sort=name&sort_key=size", "Old and new sorting syntax cannot be combined"),
        ("?changes-since=2020-01-01", "The \"changes-since\" filter is no longer available on v2."),
        ("?name=in:\"a", "Invalid filter value \"a. The quote is not closed."),
        ("?status=in:queued,sleeping", "Invalid status value: sleeping"),
    ] {
        let r = env.call(&m, "GET", &format!("/v2/images{q}"), None).await;
        assert_eq!(r.status, 400, "{q}");
        assert_eq!(r.json()["message"], msg, "{q}");
    }
}

/// `os_glance_*` names are reserved; the v2.0 patch media type works; a
/// 415 names both in `Accept-Patch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_namespace_and_patch_media_types() {
    let env = start_images("image_reserved", None).await;
    let m = env.member.clone();
    let r = env
        .call(
            &m,
            "POST",
            "/v2/images",
            Some(json!({"name": "r", "os_glance_import_task": "x"})),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "Attribute 'os_glance_import_task' is reserved."
    );
    let id = env.create(&m, json!({"name": "r"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v2/images/{id}");
    for ops in [
        json!([{"op": "add", "path": "/os_glance_x", "value": "1"}]),
        json!([{"op": "remove", "path": "/os_glance_x"}]),
    ] {
        let r = env.call(&m, "PATCH", &path, Some(ops)).await;
        assert_eq!(r.status, 403);
        assert_eq!(r.json()["message"], "Attribute 'os_glance_x' is reserved.");
    }
    // The v2.0 media type: operations named by their key.
    let v20 = "application/openstack-images-v2.0-json-patch";
    let ops = json!([
        {"replace": "/name", "value": "renamed"},
        {"add": "/color", "value": "blue"},
    ]);
    let r = env
        .send(
            Some(&m),
            "PATCH",
            &path,
            Some(v20),
            ops.to_string().into_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
    assert_eq!(r.json()["name"], "renamed");
    assert_eq!(r.json()["color"], "blue");
    let two = json!([{"replace": "/name", "remove": "/color", "value": "x"}]);
    let r = env
        .send(
            Some(&m),
            "PATCH",
            &path,
            Some(v20),
            two.to_string().into_bytes(),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = env
        .send(
            Some(&m),
            "PATCH",
            &path,
            Some("application/json"),
            b"[]".to_vec(),
        )
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(
        r.header("accept-patch"),
        Some(
            "application/openstack-images-v2.0-json-patch, \
             application/openstack-images-v2.1-json-patch"
        )
    );
}

/// The files in the store directory (temporary ones included).
fn store_files(env: &ImageEnv) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&env.store)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The record of a finished upload fails after its file is in place: the
/// file goes and the image is `queued` again; when putting it back fails
/// too, it stays `saving` until the next start sweeps it (its file and
/// temporary files removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_record_leaves_nothing_and_the_start_sweeps_saving_images() {
    let env = start_images("image_upload_atomic", None).await;
    let m = env.member.clone();
    let url = env.db.as_ref().unwrap().url.clone();
    let other = sqlx::SqlitePool::connect(&url).await.unwrap();
    let id = env.create(&m, json!({"name": "u"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let status = |id: String| {
        let env = &env;
        async move {
            env.call(&env.admin, "GET", &format!("/v2/images/{id}"), None)
                .await
                .json()["status"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    // The final record fails: 500, no file, queued again.
    sqlx::query(
        "CREATE TRIGGER no_active BEFORE UPDATE ON images \
         WHEN OLD.status = 'saving' AND NEW.status = 'active' \
         BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    .execute(&other)
    .await
    .unwrap();
    assert_eq!(env.upload(&m, &id, &data(5000)).await.status, 500);
    assert_eq!(status(id.clone()).await, "queued");
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
    // Putting it back fails too: it stays saving, still without a file.
    sqlx::query(
        "CREATE TRIGGER stay_saving BEFORE UPDATE ON images \
         WHEN OLD.status = 'saving' BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    .execute(&other)
    .await
    .unwrap();
    assert_eq!(env.upload(&m, &id, &data(5000)).await.status, 500);
    assert_eq!(status(id.clone()).await, "saving");
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
    for t in ["no_active", "stay_saving"] {
        sqlx::query(&format!("DROP TRIGGER {t}"))
            .execute(&other)
            .await
            .unwrap();
    }
    // A crash mid-upload leaves a temporary file, or a renamed one.
    std::fs::write(env.store.join(format!(".{id}.abc.part")), b"partial").unwrap();
    std::fs::write(env.store.join(&id), b"whole").unwrap();
    std::fs::write(env.store.join("unrelated"), b"kept").unwrap();
    // The next start sweeps.
    let mut cfg = ImageConfig {
        listen: "127.0.0.1:0".into(),
        filesystem_store_datadir: env.store.display().to_string(),
        ..Default::default()
    };
    cfg.database.connection = url.clone();
    let second = api_super::serve_image(cfg, env.id.running.identity.validator.clone())
        .await
        .unwrap();
    assert_eq!(status(id.clone()).await, "queued");
    assert_eq!(store_files(&env), ["unrelated"]);
    assert!(second
        .service
        .sweep_interrupted_uploads()
        .await
        .unwrap()
        .is_empty());
    let bytes = data(5000);
    assert_eq!(env.upload(&m, &id, &bytes).await.status, 204);
    assert_eq!(status(id.clone()).await, "active");
    let r = env
        .call(&m, "GET", &format!("/v2/images/{id}/file"), None)
        .await;
    assert_eq!(r.bytes, bytes);
}

/// An image deleted while its data streams in: the delete wins (204), the
/// upload answers 410 Gone as Glance and leaves no file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_finishing_after_its_image_was_deleted_is_gone() {
    let env = start_images("image_upload_gone", None).await;
    let m = env.member.clone();
    let id = env.create(&m, json!({"name": "g"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (tx, rx) = tokio::sync::mpsc::channel::<axum::body::Bytes>(1);
    let stream = Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    }));
    let caller = api_super::image::service::Caller {
        claims: fabric::token::TokenValidator::decode_unverified(&m)
            .unwrap()
            .1,
        request_id: "req-test".into(),
    };
    let svc = env.img.service.clone();
    let upload_id = id.clone();
    let upload = tokio::spawn(async move { svc.upload(&caller, &upload_id, stream).await });
    tx.send(axum::body::Bytes::from(data(1000))).await.unwrap();
    // Wait for `saving`.
    for _ in 0..100 {
        let r = env.call(&m, "GET", &format!("/v2/images/{id}"), None).await;
        if r.json()["status"] == "saving" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = env
        .call(&m, "DELETE", &format!("/v2/images/{id}"), None)
        .await;
    assert_eq!(r.status, 204);
    tx.send(axum::body::Bytes::from(data(1000))).await.unwrap();
    drop(tx);
    let e = upload.await.unwrap().unwrap_err();
    assert_eq!(e.status().as_u16(), 410, "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "Image {id} could not be found after upload. The image may have been deleted \
             during the upload, cleaning up the chunks uploaded."
        )
    );
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
}
