//! The multi-cell server list: sort keys and directions, keyset paging
//! that neither skips nor repeats, the admin `host` filter,
//! `changes-since`/`changes-before` (deleted servers included) and the
//! errors of each, on a region of two cells.

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
            "/v2.1/servers?sort_dir=asc",
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

/// The key names (and extra specs) a detailed list shows come from the
/// request specs that hold one: a spec whose text holds `"key_name"`
/// elsewhere (an extra spec of that name) gives no key, unknown uuids give
/// nothing, a spec with nothing to show is not read, and a page of
/// 450 uuids (one array on PostgreSQL, chunks of 200 on SQLite) finds the
/// keyed one at its end.
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
    db.create_builds(&b, None, None).await.unwrap();
    let mut page: Vec<String> = (0..447).map(|i| format!("no-such-{i}")).collect();
    page.extend(b.iter().rev().map(|(i, _)| i.uuid.clone()));
    let views = db.spec_views(&page).await.unwrap();
    let keys: Vec<(String, String)> = views
        .iter()
        .filter_map(|(u, v)| v.key_name.clone().map(|k| (u.clone(), k)))
        .collect();
    assert_eq!(keys, [(b[0].0.uuid.clone(), "k1".to_owned())]);
    assert_eq!(
        views[&b[1].0.uuid].flavor_extra_specs,
        [("key_name".to_owned(), "x".to_owned())].into()
    );
    assert_eq!(views.len(), 2, "a spec that shows nothing is not read");
    assert!(db.spec_views(&[]).await.unwrap().is_empty());
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
