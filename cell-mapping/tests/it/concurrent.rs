//! Host discovery run concurrently from several processes and tasks at once
//! gives the same final mapping as one run, and no errors.

use std::process::Command;

use cell_mapping::{discover_hosts, ApiDb, DiscoverOptions};

use crate::common::*;

async fn concurrent_discovery(be: Be, name: &str) {
    let Some(r) = region(name, be, 2).await else {
        return;
    };
    let api = r.api.clone();
    ok(&api, &["api_db", "sync"]);
    let mut cells = Vec::new();
    let mut expected = Vec::new();
    for (i, (db, mq)) in r.cells.iter().enumerate() {
        let c = ok(
            &api,
            &[
                "cell_v2",
                "create-cell",
                "--transport-url",
                mq,
                "--database-connection",
                db,
            ],
        );
        let c = c.trim().to_owned();
        let p = cell_pool(db).await;
        for h in 0..40 {
            let host = format!("c{i}-host{h:02}");
            add_compute(&p, &host).await;
            expected.push((host, c.clone()));
        }
        p.close().await;
        cells.push(c);
    }
    expected.sort();

    // 4 processes and 4 in-process tasks, all at once.
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_cell-manage"))
                .args([
                    "--api-database-connection",
                    &api,
                    "cell_v2",
                    "discover-hosts",
                    "--verbose",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let db = ApiDb::open(&api).await.unwrap();
            let d = discover_hosts(&db, &DiscoverOptions::default(), &mut |_| {})
                .await
                .unwrap();
            db.close().await;
            d
        }));
    }
    for t in tasks {
        let d = t.await.unwrap();
        assert!(d.failed.is_empty(), "{:?}", d.failed);
    }
    for c in children.drain(..) {
        let o = c.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "stderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert_eq!(host_mappings(&api).await, expected);
    for (db, _) in &r.cells {
        let p = cell_pool(db).await;
        assert_eq!(
            scalar_i64(&p, "SELECT COUNT(*) FROM compute_nodes WHERE NOT mapped").await,
            0
        );
        p.close().await;
    }
    // And once more: nothing left to discover.
    expect(cm(&api, &["cell_v2", "discover-hosts", "--strict"]), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_discovery_sqlite() {
    concurrent_discovery(Be::Sqlite, "conc_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_discovery_postgres() {
    concurrent_discovery(Be::Pg, "conc_pg").await;
}

/// create-cell run from several processes at once with the same URL pair:
/// exactly one creates the cell, every other one is refused with exit 2,
/// and the API database holds one mapping (the unique index on the pair
/// decides, not the order of the checks).
async fn concurrent_create_cell(be: Be, name: &str) {
    let Some(r) = region(name, be, 1).await else {
        return;
    };
    let api = r.api.clone();
    ok(&api, &["api_db", "sync"]);
    let (db, mq) = r.cells[0].clone();
    let children: Vec<_> = (0..6)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_cell-manage"))
                .args([
                    "--api-database-connection",
                    &api,
                    "cell_v2",
                    "create-cell",
                    "--transport-url",
                    &mq,
                    "--database-connection",
                    &db,
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<(i32, String)> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            (
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .collect();
    let codes: Vec<i32> = outs.iter().map(|(c, _)| *c).collect();
    assert_eq!(codes.iter().filter(|c| **c == 0).count(), 1, "{outs:?}");
    assert!(codes.iter().all(|c| *c == 0 || *c == 2), "{outs:?}");
    let listed = ok(&api, &["cell_v2", "list-cells"]);
    assert_eq!(listed.matches(&db).count(), 1, "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_create_cell_sqlite() {
    concurrent_create_cell(Be::Sqlite, "conc_create_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_create_cell_postgres() {
    concurrent_create_cell(Be::Pg, "conc_create_pg").await;
}
