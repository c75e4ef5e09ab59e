//! The multi-cell server list: sort keys and directions, keyset paging
//! that neither skips nor repeats, the search options (exact and regex
//! filters, `status`, tags, `locked`, the 2.83 options, the admin-only
//! ones), `changes-since`/`changes-before` (deleted servers included) and
//! the errors of each, on a region of two cells; the cells' filter SQL on
//! SQLite and PostgreSQL.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, json as body};
use crate::compute::Region;

/// `(id, name, host)` of every server of a list answer.
fn rows(v: &Value) -> Vec<(String, String, String)> {
    v["servers"]
        .as_array()
        .unwrap_or_else(|| panic!("servers in {v}"))
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["name"].as_str().unwrap().to_owned(),
                s["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Every page of `query` (`limit` per page) following the next links.
async fn all_pages(region: &Region, token: &str, query: &str, limit: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut marker: Option<String> = None;
    for _ in 0..50 {
        let m = marker
            .as_ref()
            .map(|m| format!("&marker={m}"))
            .unwrap_or_default();
        let path = format!("/v2.1/servers/detail?limit={limit}&{query}{m}");
        let r = region.call(token, "GET", &path, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let v = body(&r);
        let page: Vec<String> = rows(&v).into_iter().map(|r| r.0).collect();
        assert!(page.len() <= limit, "{path}: {page:?}");
        out.extend(page.iter().cloned());
        match v["servers_links"][0]["href"].as_str() {
            Some(next) => {
                assert_eq!(page.len(), limit, "a next link only on a full page");
                marker = next
                    .split('&')
                    .find_map(|p| p.strip_prefix("marker="))
                    .map(str::to_owned);
                assert_eq!(marker.as_deref(), page.last().map(String::as_str));
            }
            None => return out,
        }
    }
    panic!("no end of pages for {query}");
}

async fn get(region: &Region, token: &str, path: &str, version: &str) -> testkit::http::Response {
    common::req(
        region.compute.addr,
        "GET",
        path,
        &[
            ("x-auth-token", token),
            ("openstack-api-version", &format!("compute {version}")),
        ],
        None,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_keys_paging_host_and_changes_since_across_cells() {
    let region = Region::start("server_list", 2, 2).await;
    let names = ["kilo", "alpha", "juno", "echo", "bravo", "delta", "golf"];
    // One build at a time: builds scheduled at the same moment see the
    // same usage and may all take the first of the equally weighed hosts
    // (placement here does not shuffle), all in one cell.
    let mut ids = Vec::new();
    for n in names {
        let id = region.boot(&region.member, n, "1").await;
        region.wait(&id, |s| s["status"] == "ACTIVE").await;
        ids.push(id);
    }
    let admin_all = "all_tenants=1";
    let r = region
        .call(
            &region.admin,
            "GET",
            "/v2.1/servers/detail?all_tenants=1",
            None,
        )
        .await;
    let all = rows(&body(&r));
    assert_eq!(all.len(), names.len(), "{}", r.body);
    let hosts: std::collections::BTreeSet<&str> = all.iter().map(|r| r.2.as_str()).collect();
    assert!(hosts.iter().any(|h| h.starts_with("c1")), "{hosts:?}");
    assert!(hosts.iter().any(|h| h.starts_with("c2")), "{hosts:?}");

    // Default: newest first, the same when paged one, two or three at a time.
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    for limit in [1, 2, 3] {
        assert_eq!(
            all_pages(&region, &region.member, "", limit).await,
            newest_first
        );
    }

    // By name, both directions, paged across the two cells.
    let mut by_name: Vec<(&str, &String)> = names.iter().copied().zip(&ids).collect();
    by_name.sort();
    let asc: Vec<String> = by_name.iter().map(|(_, id)| (*id).clone()).collect();
    let desc: Vec<String> = asc.iter().rev().cloned().collect();
    for limit in [2, 3, 10] {
        assert_eq!(
            all_pages(
                &region,
                &region.member,
                "sort_key=display_name&sort_dir=asc",
                limit
            )
            .await,
            asc
        );
        assert_eq!(
            all_pages(&region, &region.member, "sort_key=display_name", limit).await,
            desc,
            "desc by default"
        );
    }
    // Two keys: vm_state is the same for all, the name decides.
    assert_eq!(
        all_pages(
            &region,
            &region.member,
            "sort_key=vm_state&sort_key=display_name&sort_dir=asc&sort_dir=desc",
            2
        )
        .await,
        desc
    );

    // Admins sort by host (then newest first); members may not.
    let mut by_host: Vec<(String, usize, String)> = all
        .iter()
        .map(|(id, _, h)| {
            let age = ids.iter().position(|i| i == id).unwrap();
            (h.clone(), usize::MAX - age, id.clone())
        })
        .collect();
    by_host.sort();
    let expected: Vec<String> = by_host.into_iter().map(|t| t.2).collect();
    assert_eq!(
        all_pages(
            &region,
            &region.admin,
            &format!("{admin_all}&sort_key=host&sort_dir=asc&sort_key=created_at&sort_dir=desc"),
            3
        )
        .await,
        expected
    );
    let r = region
        .call(&region.member, "GET", "/v2.1/servers?sort_key=host", None)
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body
            .contains("Only administrators can sort servers by host"),
        "{}",
        r.body
    );

    // The host filter: admins only; ignored for members, as upstream.
    let host = all[0].2.clone();
    let on_host: Vec<String> = all
        .iter()
        .filter(|r| r.2 == host)
        .map(|r| r.0.clone())
        .collect();
    let r = region
        .call(
            &region.admin,
            "GET",
            &format!("/v2.1/servers/detail?{admin_all}&host={host}"),
            None,
        )
        .await;
    let got: Vec<String> = rows(&body(&r)).into_iter().map(|r| r.0).collect();
    assert_eq!(got, on_host);
    let r = region
        .call(
            &region.member,
            "GET",
            &format!("/v2.1/servers?host={host}"),
            None,
        )
        .await;
    assert_eq!(rows(&body(&r)).len(), names.len(), "{}", r.body);

    // changes-since: a deleted server shows (DELETED) among the changes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = chrono::Utc::now();
    let since = t0.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let gone = ids[1].clone();
    let r = region
        .call(
            &region.member,
            "DELETE",
            &format!("/v2.1/servers/{gone}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    while region.show(&region.member, &gone).await.status != 404 {
        assert!(Instant::now() < deadline, "not deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = region
        .call(
            &region.member,
            "GET",
            &format!("/v2.1/servers/detail?changes-since={since}"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = body(&r);
    let changed = v["servers"].as_array().unwrap();
    assert_eq!(changed.len(), 1, "only the deleted one changed since: {v}");
    assert_eq!(changed[0]["id"], gone.as_str());
    assert_eq!(changed[0]["status"], "DELETED");
    let r = region
        .call(&region.member, "GET", "/v2.1/servers", None)
        .await;
    assert!(
        !r.body.contains(&gone),
        "a plain list hides deleted servers"
    );
    let r = region
        .call(
            &region.member,
            "GET",
            "/v2.1/servers?changes-since=2000-01-01T00:00:00Z",
            None,
        )
        .await;
    assert_eq!(
        rows(&body(&r)).len(),
        names.len(),
        "all, the deleted one too"
    );
    let r = region
        .call(
            &region.member,
            "GET",
            "/v2.1/servers?changes-since=2000-01-01T00:00:00Z&changes-before=2000-01-02T00:00:00Z",
            None,
        )
        .await;
    assert_eq!(rows(&body(&r)).len(), 0, "{}", r.body);

    // Bad input: upstream's status codes and messages.
    for (path, version, status, text) in [
        (
            "/v2.1/servers?sort_dir=up&sort_key=uuid",
            "latest",
            400,
            "Unknown sort direction",
        ),
        (
            "/v2.1/servers?sort_dir=asc&sort_dir=desc",
            "latest",
            400,
            "Sort direction size exceeds sort key size",
        ),
        ("/v2.1/servers?sort_key=bogus", "latest", 400, "sort_key"),
        (
            "/v2.1/servers?sort_key=key_name",
            "latest",
            400,
            "not supported",
        ),
        ("/v2.1/servers?sort_key=vcpus", "2.75", 400, "sort_key"),
        (
            "/v2.1/servers?changes-since=yesterday",
            "latest",
            400,
            "changes-since",
        ),
        (
            "/v2.1/servers?changes-since=2020-01-02T00:00:00Z&changes-before=2020-01-01T00:00:00Z",
            "latest",
            400,
            "changes-since must be less than or equal to changes-before",
        ),
        (
            "/v2.1/servers?marker=00000000-0000-0000-0000-000000000000",
            "latest",
            400,
            "not found",
        ),
    ] {
        let r = get(&region, &region.member, path, version).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(r.body.contains(text), "{path}: {}", r.body);
        assert!(r.body.contains("badRequest"), "{path}: {}", r.body);
    }
    // Before 2.75 an ignored key is dropped with its direction.
    let r = get(
        &region,
        &region.member,
        "/v2.1/servers?sort_key=vcpus&sort_dir=asc",
        "2.74",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got: Vec<String> = rows(&body(&r)).into_iter().map(|r| r.0).collect();
    let live: Vec<String> = newest_first
        .iter()
        .filter(|i| **i != gone)
        .cloned()
        .collect();
    assert_eq!(got, live, "newest first once vcpus is dropped");
    region.stop().await;
}

/// What a detailed list shows from the request specs (extra specs, and
/// the key names of rows written before the cells kept them) comes from
/// the specs marked for it: a spec holding only a key name is not read
/// (the row has it), one marked by older code is, a spec whose text holds
/// `"key_name"` elsewhere (an extra spec of that name) gives no key,
/// unknown uuids give nothing, and a page of 450 uuids (one array on
/// PostgreSQL, chunks of 200 on SQLite) finds the keyed one at its end. A spec whose only shown content is the image's
/// properties is read only for 2.98's views; a rebuild's image replaces
/// them.
async fn key_names_of_a_page(url: &str) {
    migrations::migrate(migrations::Kind::Api, url)
        .await
        .expect("api migrations");
    let api = cell_mapping::ApiDb::open(url).await.unwrap();
    let db = api_super::compute_api::db::ComputeDb::new(api.clone());
    db.seed_flavors().await.unwrap();
    let mut b = crate::heal::builds(&db, "keys", 3, chrono::Utc::now()).await;
    b[0].1.key_name = Some("k1".into());
    b[0].0.key_name = Some("k1".into());
    b[1].1.flavor_extra_specs = Some([("key_name".to_owned(), "x".to_owned())].into());
    let cirros: std::collections::BTreeMap<String, String> =
        [("os_distro".to_owned(), "cirros".to_owned())].into();
    b[2].1.recorded_image_properties = cirros.clone();
    db.create_builds(&b, None, None).await.unwrap();
    let mut page: Vec<String> = (0..447).map(|i| format!("no-such-{i}")).collect();
    page.extend(b.iter().rev().map(|(i, _)| i.uuid.clone()));
    let views = db.spec_views(&page, false).await.unwrap();
    // The key name is on the instance row: a spec holding nothing else
    // is not read.
    assert!(!views.contains_key(&b[0].0.uuid), "a key name alone");
    assert_eq!(
        views[&b[1].0.uuid].flavor_extra_specs,
        [("key_name".to_owned(), "x".to_owned())].into()
    );
    assert_eq!(views.len(), 1, "a spec that shows nothing is not read");
    // A spec written before the rows kept key names was marked for its
    // key name: read, and the key name is there.
    let mark = "UPDATE request_specs SET view_fields = TRUE WHERE instance_uuid = $1";
    crate::operator::exec(api.pool(), mark, &b[0].0.uuid).await;
    let views = db.spec_views(&page, false).await.unwrap();
    let keys: Vec<(String, String)> = views
        .iter()
        .filter_map(|(u, v)| v.key_name.clone().map(|k| (u.clone(), k)))
        .collect();
    assert_eq!(keys, [(b[0].0.uuid.clone(), "k1".to_owned())]);
    assert_eq!(views.len(), 2);
    assert!(db.spec_views(&[], false).await.unwrap().is_empty());
    // From 2.98 the image's properties too.
    let views = db.spec_views(&page, true).await.unwrap();
    assert_eq!(views.len(), 3);
    assert_eq!(views[&b[2].0.uuid].image_properties, cirros);
    assert!(views[&b[0].0.uuid].image_properties.is_empty());
    // A rebuild's image replaces them (and the spec's image), or clears
    // them for an image without any.
    let virtio: std::collections::BTreeMap<String, String> =
        [("hw_rng_model".to_owned(), "virtio".to_owned())].into();
    let rebuilt = |image: &str, recorded| api_super::compute_api::db::SpecImage {
        image_ref: image.into(),
        recorded,
        ..Default::default()
    };
    db.set_spec_image(&b[1].0.uuid, &rebuilt("img-2", virtio.clone()))
        .await
        .unwrap();
    db.set_spec_image(&b[2].0.uuid, &rebuilt("img-3", Default::default()))
        .await
        .unwrap();
    let views = db.spec_views(&page, true).await.unwrap();
    assert_eq!(views[&b[1].0.uuid].image_properties, virtio);
    assert_eq!(views[&b[1].0.uuid].flavor_extra_specs.len(), 1, "kept");
    assert!(!views.contains_key(&b[2].0.uuid), "nothing left to show");
    let spec = db.request_spec(&b[2].0.uuid).await.unwrap().unwrap();
    assert_eq!(spec.image_ref, "img-3");
    assert!(spec.recorded_image_properties.is_empty());
    db.set_spec_image("no-such", &rebuilt("img-4", virtio))
        .await
        .unwrap();
    api.close().await;
}

#[tokio::test]
async fn key_names_of_a_page_on_sqlite() {
    let d = testkit::sqlite("list_key_names");
    key_names_of_a_page(&d.url).await;
}

#[tokio::test]
async fn key_names_of_a_page_on_postgres() {
    let Some(pg) = testkit::postgres("list_key_names_pg").await else {
        return;
    };
    key_names_of_a_page(&pg.url).await;
}

/// The ids of a list answer (200 expected), as a set.
async fn id_set(
    region: &Region,
    token: &str,
    path: &str,
    version: &str,
) -> std::collections::BTreeSet<String> {
    let r = get(region, token, path, version).await;
    assert_eq!(r.status, 200, "{path} at {version}: {}", r.body);
    rows(&body(&r)).into_iter().map(|r| r.0).collect()
}

fn set(ids: &[&String]) -> std::collections::BTreeSet<String> {
    ids.iter().map(|s| (*s).clone()).collect()
}

/// Runs `sql` (binding `uuid`) on every cell database of the region;
/// returns the rows changed.
async fn on_cells(region: &Region, sql: &str, uuid: &str) -> u64 {
    let mut n = 0;
    for cell in region.api.cells().await.unwrap() {
        let db = cell_mapping::db::CellDb::open(&cell.database_connection)
            .await
            .unwrap();
        if let cell_mapping::db::Pool::Sqlite(p) = db.pool() {
            n += sqlx::query(sql)
                .bind(uuid)
                .execute(p)
                .await
                .unwrap()
                .rows_affected();
        }
        db.close().await;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_options_narrow_the_list_across_cells() {
    let region = Region::start("list_filters", 2, 2).await;
    // web-1 (tiny), web-2 (small), db-1 (tiny), db-2 (small), gone (tiny,
    // deleted below); one at a time so they spread over both cells.
    let plan = [
        ("web-1", "1"),
        ("web-2", "2"),
        ("db-1", "1"),
        ("db-2", "2"),
        ("gone", "1"),
    ];
    let mut ids = Vec::new();
    for (n, f) in plan {
        let id = region.boot(&region.member, n, f).await;
        region.wait(&id, |s| s["status"] == "ACTIVE").await;
        ids.push(id);
    }
    let (web1, web2, db1, db2, gone) = (&ids[0], &ids[1], &ids[2], &ids[3], &ids[4]);
    let hosts: std::collections::BTreeSet<String> = rows(&body(
        &region
            .call(
                &region.admin,
                "GET",
                "/v2.1/servers/detail?all_tenants=1",
                None,
            )
            .await,
    ))
    .into_iter()
    .map(|r| r.2)
    .collect();
    assert!(hosts.iter().any(|h| h.starts_with("c1")), "{hosts:?}");
    assert!(hosts.iter().any(|h| h.starts_with("c2")), "{hosts:?}");
    let r = region
        .call(
            &region.member,
            "DELETE",
            &format!("/v2.1/servers/{gone}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    while region.show(&region.member, gone).await.status != 404 {
        assert!(Instant::now() < deadline, "not deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let live = set(&[web1, web2, db1, db2]);
    let (m, a) = (&region.member, &region.admin);
    let l = "/v2.1/servers/detail";

    // Tags, lock, stop.
    for (id, tags) in [(web1, vec!["a", "b"]), (web2, vec!["a"]), (db1, vec!["b"])] {
        let r = region
            .call(
                m,
                "PUT",
                &format!("/v2.1/servers/{id}/tags"),
                Some(serde_json::json!({ "tags": tags })),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let act = |id: &String, b: Value| {
        let path = format!("/v2.1/servers/{id}/action");
        let region = &region;
        async move {
            let r = region.call(&region.member, "POST", &path, Some(b)).await;
            assert_eq!(r.status, 202, "{}", r.body);
        }
    };
    act(db2, serde_json::json!({"lock": null})).await;
    act(web2, serde_json::json!({"os-stop": null})).await;
    region.wait(web2, |s| s["status"] == "SHUTOFF").await;

    // Everyone's filters.
    for (q, want) in [
        ("flavor=1", set(&[web1, db1])),
        ("flavor=2", set(&[web2, db2])),
        ("flavor=nope", set(&[])),
        (
            format!("image={}", crate::compute::IMAGE).as_str(),
            live.clone(),
        ),
        ("image=00000000-0000-0000-0000-000000000000", set(&[])),
        ("name=^web", set(&[web1, web2])),
        ("ip=10.0.0.1", set(&[])),
        ("ip6=::1", set(&[])),
        ("tags=a,b", set(&[web1])),
        ("tags=a", set(&[web1, web2])),
        ("tags-any=a,b", set(&[web1, web2, db1])),
        ("not-tags=a,b", set(&[web2, db1, db2])),
        ("not-tags-any=a,b", set(&[db2])),
        ("tags=a&not-tags-any=b", set(&[web2])),
        ("locked=true", set(&[db2])),
        ("locked=0", set(&[web1, web2, db1])),
        ("status=SHUTOFF", set(&[web2])),
        ("status=SHUTOFF&status=active", live.clone()),
        ("status=ERROR&status=SHUTOFF", set(&[web2])),
        // 2.83's options for everyone.
        ("vm_state=stopped", set(&[web2])),
        ("power_state=4", set(&[web2])),
        ("task_state=deleting", set(&[])),
        ("availability_zone=^nova$", live.clone()),
        ("availability_zone=elsewhere", set(&[])),
        ("created_at=^20[0-9][0-9]-", live.clone()),
        ("launched_at=^1999", set(&[])),
        ("user_id=nobody", set(&[])),
        ("key_name=.", set(&[])),
        ("terminated_at=.", set(&[])),
    ] {
        assert_eq!(
            id_set(&region, m, &format!("{l}?{q}"), "2.83").await,
            want,
            "{q}"
        );
    }
    // The reservation id of one server (admins see it).
    let shown = body(&region.show(a, web1).await);
    let rid = shown["server"]["OS-EXT-SRV-ATTR:reservation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        id_set(&region, m, &format!("{l}?reservation_id=^{rid}$"), "2.83").await,
        set(&[web1])
    );
    // Below their microversions the options are dropped (tags 2.26,
    // locked 2.73, the 2.83 ones for members), not applied.
    for (q, version) in [
        ("tags=a", "2.25"),
        ("locked=true", "2.72"),
        ("locked=bogus", "2.72"),
        ("vm_state=stopped", "2.82"),
        ("config_drive=x", "2.82"),
        ("uuid=nope", "latest"),
        ("deleted=true", "latest"),
        ("node=nope", "latest"),
    ] {
        assert_eq!(
            id_set(&region, m, &format!("{l}?{q}"), version).await,
            live,
            "{q}"
        );
    }
    // A description (2.19) to filter on.
    let r = region
        .call(
            m,
            "PUT",
            &format!("/v2.1/servers/{db2}"),
            Some(serde_json::json!({"server": {"description": "database two"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Administrators have every filter at every microversion.
    let all = "all_tenants=1";
    for (q, version, want) in [
        ("vm_state=stopped", "2.82", set(&[web2])),
        (format!("uuid={db1}").as_str(), "2.1", set(&[db1])),
        ("node=^c", "latest", live.clone()),
        ("node=nope", "latest", set(&[])),
        ("deleted=true", "latest", set(&[gone])),
        (
            "deleted=false&changes-since=2000-01-01T00:00:00Z",
            "latest",
            live.clone(),
        ),
        ("changes-since=2000-01-01T00:00:00Z", "latest", {
            let mut s = live.clone();
            s.insert(gone.clone());
            s
        }),
        ("status=DELETED", "latest", set(&[gone])),
        ("terminated_at=^20", "latest", set(&[])),
        ("deleted=1&terminated_at=^20", "latest", set(&[gone])),
        ("hostname=^db", "2.1", set(&[db1, db2])),
        ("launch_index=0", "latest", live.clone()),
        ("locked_by=owner", "latest", set(&[db2])),
        ("description=two$", "latest", set(&[db2])),
        ("display_description=^data", "2.1", set(&[db2])),
    ] {
        assert_eq!(
            id_set(&region, a, &format!("{l}?{all}&{q}"), version).await,
            want,
            "{q} at {version}"
        );
    }

    // Statuses that are a vm_state and a task_state.
    let n = on_cells(
        &region,
        "UPDATE instances SET task_state = 'rebooting' WHERE uuid = $1",
        web1,
    )
    .await;
    assert_eq!(n, 1);
    on_cells(
        &region,
        "UPDATE instances SET task_state = 'rebuilding' WHERE uuid = $1",
        web2,
    )
    .await;
    for (q, want) in [
        ("status=REBOOT", set(&[web1])),
        ("status=reboot", set(&[web1])),
        ("status=HARD_REBOOT", set(&[])),
        ("status=REBUILD", set(&[web2])),
        ("status=REBUILD&status=REBOOT", set(&[web1, web2])),
        // ACTIVE is the vm_state, whatever the task: web1 too.
        ("status=ACTIVE", set(&[web1, db1, db2])),
        ("status=SHUTOFF", set(&[web2])),
        ("status=BUILD", set(&[])),
    ] {
        assert_eq!(
            id_set(&region, m, &format!("{l}?{q}"), "latest").await,
            want,
            "{q}"
        );
    }
    on_cells(
        &region,
        "UPDATE instances SET task_state = NULL WHERE uuid = $1",
        web1,
    )
    .await;
    on_cells(
        &region,
        "UPDATE instances SET task_state = NULL WHERE uuid = $1",
        web2,
    )
    .await;

    // Errors.
    for (token, q, version, status, text) in [
        (m, "status=bogus", "2.38", 400, "Invalid status value"),
        (
            m,
            "status=DELETED",
            "latest",
            403,
            "Only administrators may list deleted instances",
        ),
        (m, "locked=maybe", "2.73", 400, "Unrecognized value 'maybe'"),
        (
            m,
            "config_drive=x",
            "2.83",
            400,
            "not supported by this cloud",
        ),
        (
            a,
            "kernel_id=x",
            "latest",
            400,
            "not supported by this cloud",
        ),
        (m, "name=(", "latest", 400, "Invalid regular expression"),
        (
            a,
            "metadata=x",
            "latest",
            400,
            "Invalid filter field: metadata.",
        ),
    ] {
        let r = get(&region, token, &format!("{l}?{q}"), version).await;
        assert_eq!(r.status, status, "{q}: {}", r.body);
        assert!(r.body.contains(text), "{q}: {}", r.body);
    }
    // An unknown status before 2.38: an empty list.
    assert_eq!(
        id_set(&region, m, &format!("{l}?status=bogus"), "2.37").await,
        set(&[])
    );

    // sort_dir without sort_key: by created_at in that direction.
    let oldest_first: Vec<String> = ids[..4].to_vec();
    let newest_first: Vec<String> = oldest_first.iter().rev().cloned().collect();
    for limit in [1, 3] {
        assert_eq!(
            all_pages(&region, m, "sort_dir=asc", limit).await,
            oldest_first
        );
        assert_eq!(
            all_pages(&region, m, "sort_dir=desc", limit).await,
            newest_first
        );
    }
    // A new key, paged by marker across both cells: hostname (the display
    // name, as the cell keeps it) in both directions, and a key no server
    // differs in (config_drive) falls through to created_at and uuid.
    let mut by_name: Vec<(&str, &String)> = plan[..4].iter().map(|p| p.0).zip(&ids).collect();
    by_name.sort();
    let asc: Vec<String> = by_name.iter().map(|(_, id)| (*id).clone()).collect();
    let desc: Vec<String> = asc.iter().rev().cloned().collect();
    for limit in [1, 2, 3] {
        assert_eq!(
            all_pages(&region, m, "sort_key=hostname&sort_dir=asc", limit).await,
            asc
        );
        assert_eq!(
            all_pages(&region, m, "sort_key=hostname", limit).await,
            desc
        );
        assert_eq!(
            all_pages(&region, m, "sort_key=config_drive&sort_dir=asc", limit).await,
            oldest_first
        );
        assert_eq!(
            all_pages(
                &region,
                m,
                "sort_key=launch_index&sort_key=display_name&sort_dir=asc&sort_dir=asc",
                limit
            )
            .await,
            asc
        );
        // Filtered and paged: the regex filter drops rows between pages.
        assert_eq!(
            all_pages(&region, m, "name=-1$&sort_key=hostname&sort_dir=asc", limit).await,
            asc.iter()
                .filter(|i| *i == web1 || *i == db1)
                .cloned()
                .collect::<Vec<_>>()
        );
    }
    // terminated_at (admins, deleted servers): paged with the live ones.
    let r = all_pages(
        &region,
        a,
        "all_tenants=1&changes-since=2000-01-01T00:00:00Z&sort_key=terminated_at&sort_dir=desc",
        2,
    )
    .await;
    assert_eq!(r.first(), Some(gone), "{r:?}");
    assert_eq!(r.len(), 5, "{r:?}");
    region.stop().await;
}

/// The cells' filter SQL ([`cell_mapping::db::ListFilter`]) on one
/// backend: flavor (by the flavorid copied onto the instance), image,
/// user, uuid, task states, locked, the four tag filters, deleted ones
/// only, and keyset paging by the new sort keys.
async fn list_filter_sql(url: &str) {
    use cell_mapping::db::{
        CellDb, InstanceFlavor, ListFilter, ListOrder, NewCellInstance, Pool, SortKey,
    };
    migrations::migrate(migrations::Kind::Cell, url)
        .await
        .expect("cell migrations");
    let db = CellDb::open(url).await.unwrap();
    let t0 = chrono::Utc::now() - chrono::Duration::hours(1);
    let mut ids = Vec::new();
    for n in 0..5i64 {
        let uuid = uuid::Uuid::new_v4().to_string();
        db.create_api_instance(&NewCellInstance {
            uuid: uuid.clone(),
            project_id: "p".into(),
            user_id: if n == 4 { "u2".into() } else { "u1".into() },
            display_name: Some(format!("s{n}")),
            flavor: InstanceFlavor {
                flavorid: if n % 2 == 0 {
                    "even".into()
                } else {
                    "odd".into()
                },
                name: "f".into(),
                vcpus: 1,
                memory_mb: 512,
                root_gb: 1,
                ephemeral_gb: 0,
                swap: 0,
            },
            image_ref: if n == 3 {
                "img-b".into()
            } else {
                "img-a".into()
            },
            host: Some("h".into()),
            node: Some("h".into()),
            created_at: t0 + chrono::Duration::seconds(n),
            request_id: format!("req-{n}"),
            global_request_id: format!("req-{n}"),
            reservation_id: "r-1".into(),
            launch_index: 4 - n,
            key_name: (n % 2 == 1).then(|| format!("k{n}")),
            ..Default::default()
        })
        .await
        .unwrap();
        ids.push(uuid);
    }
    // The key name is written on the row.
    for (n, id) in ids.iter().enumerate() {
        let row = db.api_instance(id).await.unwrap().unwrap();
        assert_eq!(row.key_name, (n % 2 == 1).then(|| format!("k{n}")));
    }
    let exec = |sql: &'static str, uuid: String| {
        let db = db.clone();
        async move {
            match db.pool() {
                Pool::Sqlite(p) => {
                    sqlx::query(sql).bind(uuid).execute(p).await.unwrap();
                }
                Pool::Postgres(p) => {
                    sqlx::query(sql).bind(uuid).execute(p).await.unwrap();
                }
            }
        }
    };
    for (i, tag) in [(0, "a"), (0, "b"), (1, "a"), (2, "b")] {
        let sql = match tag {
            "a" => "INSERT INTO tags (resource_id, tag) VALUES ($1, 'a')",
            _ => "INSERT INTO tags (resource_id, tag) VALUES ($1, 'b')",
        };
        exec(sql, ids[i].clone()).await;
    }
    exec(
        "UPDATE instances SET locked = TRUE, locked_by = 'owner' WHERE uuid = $1",
        ids[3].clone(),
    )
    .await;
    exec(
        "UPDATE instances SET vm_state = 'active', task_state = 'rebooting' WHERE uuid = $1",
        ids[1].clone(),
    )
    .await;
    assert!(db.api_delete_local(&ids[4]).await.unwrap());

    let list = |f: ListFilter| {
        let db = db.clone();
        async move {
            let mut got: Vec<String> = db
                .api_instances(&ListFilter { limit: 100, ..f })
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.uuid)
                .collect();
            got.sort();
            got
        }
    };
    let want = |is: &[usize]| {
        let mut w: Vec<String> = is.iter().map(|i| ids[*i].clone()).collect();
        w.sort();
        w
    };
    let v = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    for (f, expected) in [
        (ListFilter::default(), want(&[0, 1, 2, 3])),
        (
            ListFilter {
                flavorid: Some("even".into()),
                ..Default::default()
            },
            want(&[0, 2]),
        ),
        (
            ListFilter {
                flavorid: Some("none".into()),
                ..Default::default()
            },
            want(&[]),
        ),
        (
            ListFilter {
                image_ref: Some("img-b".into()),
                ..Default::default()
            },
            want(&[3]),
        ),
        (
            ListFilter {
                uuid: Some(ids[2].clone()),
                ..Default::default()
            },
            want(&[2]),
        ),
        (
            ListFilter {
                user_id: Some("u1".into()),
                ..Default::default()
            },
            want(&[0, 1, 2, 3]),
        ),
        (
            ListFilter {
                user_id: Some("u2".into()),
                include_deleted: true,
                ..Default::default()
            },
            want(&[4]),
        ),
        (
            ListFilter {
                only_deleted: true,
                ..Default::default()
            },
            want(&[4]),
        ),
        (
            ListFilter {
                locked: Some(true),
                ..Default::default()
            },
            want(&[3]),
        ),
        (
            ListFilter {
                locked: Some(false),
                ..Default::default()
            },
            want(&[0, 1, 2]),
        ),
        (
            ListFilter {
                vm_states: v(&["active"]),
                task_states: v(&["rebooting", "reboot_started"]),
                ..Default::default()
            },
            want(&[1]),
        ),
        (
            ListFilter {
                tags: v(&["a", "b"]),
                ..Default::default()
            },
            want(&[0]),
        ),
        (
            ListFilter {
                tags_any: v(&["a", "b"]),
                ..Default::default()
            },
            want(&[0, 1, 2]),
        ),
        (
            ListFilter {
                not_tags: v(&["a", "b"]),
                ..Default::default()
            },
            want(&[1, 2, 3]),
        ),
        (
            ListFilter {
                not_tags_any: v(&["a", "b"]),
                ..Default::default()
            },
            want(&[3]),
        ),
        (
            ListFilter {
                tags: v(&["a"]),
                not_tags_any: v(&["b"]),
                ..Default::default()
            },
            want(&[1]),
        ),
    ] {
        assert_eq!(list(f.clone()).await, expected, "{f:?}");
    }

    // Keyset paging, one row a page, by each new key: the same order as
    // one read, nothing skipped or repeated.
    for (key, desc) in [
        (SortKey::LaunchIndex, false),
        (SortKey::Hostname, true),
        (SortKey::TerminatedAt, true),
        (SortKey::ConfigDrive, false),
        (SortKey::AutoDiskConfig, true),
    ] {
        let order = ListOrder {
            keys: vec![
                (key, desc),
                (SortKey::CreatedAt, true),
                (SortKey::Uuid, true),
            ],
        };
        let all: Vec<String> = db
            .api_instances(&ListFilter {
                order: order.clone(),
                include_deleted: true,
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.uuid)
            .collect();
        assert_eq!(all.len(), 5, "{key:?}");
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = db
                .api_instances(&ListFilter {
                    order: order.clone(),
                    include_deleted: true,
                    after: after.clone(),
                    limit: 1,
                    ..Default::default()
                })
                .await
                .unwrap();
            let Some(last) = page.last() else { break };
            after = Some(order.values(last));
            paged.extend(page.into_iter().map(|i| i.uuid));
        }
        assert_eq!(paged, all, "{key:?}");
        // launch_index ascending is 0 (the last) first, hostname
        // descending is s4 first, only the deleted one has terminated_at,
        // and no row differs in the others (newest first decides).
        assert_eq!(
            all,
            ids.iter().rev().cloned().collect::<Vec<_>>(),
            "{key:?}"
        );
    }
    db.close().await;
}

#[tokio::test]
async fn list_filter_sql_on_sqlite() {
    let d = testkit::sqlite("list_filter_sql");
    list_filter_sql(&d.url).await;
}

#[tokio::test]
async fn list_filter_sql_on_postgres() {
    let Some(pg) = testkit::postgres("list_filter_sql_pg").await else {
        return;
    };
    list_filter_sql(&pg.url).await;
}

/// Unscheduled build requests under the filters, as upstream's
/// `BuildRequestList.get_by_filters` treats them: exact filters on the
/// values they have (BUILD, their flavor, image, user, uuid), none of
/// them with a host, tag, lock or deleted filter, and a regex filter on a
/// value they do not have yet (node, zone, key name) letting them through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_requests_pass_the_filters_as_upstream() {
    // No healer: the build requests written below stay unscheduled.
    let region = Region::start_with("list_builds", 2, 1, |c| {
        c.build_heal.interval_secs = 0;
    })
    .await;
    let tiny = region.boot(&region.member, "web-1", "1").await;
    region.wait(&tiny, |s| s["status"] == "ACTIVE").await;
    let small = region.boot(&region.member, "db-1", "2").await;
    region.wait(&small, |s| s["status"] == "ACTIVE").await;
    let db = api_super::compute_api::db::ComputeDb::new(region.api.clone());
    let mut b = crate::heal::builds(&db, "pend", 2, chrono::Utc::now()).await;
    b[0].0.key_name = Some("k1".into());
    b[0].1.key_name = Some("k1".into());
    db.create_builds(&b, None, None).await.unwrap();
    let (p1, p2) = (&b[0].0.uuid, &b[1].0.uuid);
    let a = &region.admin;
    let l = "/v2.1/servers/detail?all_tenants=1";
    assert_eq!(
        id_set(&region, a, l, "latest").await,
        set(&[&tiny, &small, p1, p2])
    );
    for (q, want) in [
        ("flavor=1", set(&[&tiny, p1, p2])),
        ("flavor=2", set(&[&small])),
        ("status=BUILD", set(&[p1, p2])),
        ("status=ACTIVE", set(&[&tiny, &small])),
        ("status=BUILD&status=ACTIVE", set(&[&tiny, &small, p1, p2])),
        ("task_state=scheduling", set(&[p1, p2])),
        ("name=^pend", set(&[p1, p2])),
        ("reservation_id=^r-pend$", set(&[p1, p2])),
        (format!("uuid={p2}").as_str(), set(&[p2])),
        ("user_id=u-heal", set(&[p1, p2])),
        ("image=00000000-0000-0000-0000-000000000000", set(&[])),
        ("tags=a", set(&[])),
        ("tags-any=a", set(&[])),
        ("not-tags-any=a", set(&[&tiny, &small, p1, p2])),
        ("locked=true", set(&[])),
        ("locked=false", set(&[&tiny, &small, p1, p2])),
        ("deleted=true", set(&[])),
        ("host=nope", set(&[])),
        // What a build does not have yet passes a regex.
        ("node=nope", set(&[p1, p2])),
        ("availability_zone=^nova$", set(&[&tiny, &small, p1, p2])),
        ("key_name=^k1$", set(&[p1, p2])),
        ("key_name=^k2$", set(&[p2])),
        // p1's index is 0 (not set yet, as upstream sees it), p2's 1.
        ("launch_index=1", set(&[p1, p2])),
        ("launch_index=0", set(&[&tiny, &small, p1])),
        ("ip=10.0.0.1", set(&[])),
    ] {
        assert_eq!(
            id_set(&region, a, &format!("{l}&{q}"), "latest").await,
            want,
            "{q}"
        );
    }
    // Paged by marker through builds and cells, filtered: newest (the
    // builds) first.
    let paged = all_pages(&region, a, "all_tenants=1&flavor=1", 1).await;
    assert_eq!(paged.len(), 3, "{paged:?}");
    assert_eq!(paged[2], tiny, "{paged:?}");
    assert_eq!(set(&paged[..2].iter().collect::<Vec<_>>()), set(&[p1, p2]));
    region.stop().await;
}
