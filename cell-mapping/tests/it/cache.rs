//! The cell-mapping cache sees a new, changed, disabled and deleted cell
//! within seconds, with no restart and no signal.

use std::time::{Duration, Instant};

use cell_mapping::{ApiDb, CacheConfig, CellCache};
use fabric::ids::CellUuid;

use crate::common::*;

async fn wait_for(
    cache: &CellCache,
    what: &str,
    f: impl Fn(&cell_mapping::CellSnapshot) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if f(&cache.snapshot()) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "cache did not see {what} within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn cache_follows_changes(be: Be, name: &str) {
    let Some(r) = region(name, be, 3).await else {
        return;
    };
    let api = r.api.as_str();
    ok(api, &["api_db", "sync"]);
    ok(
        api,
        &["cell_v2", "map-cell0", "--database-connection", &r.cell0],
    );
    let c1 = ok(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--name",
            "cell1",
            "--transport-url",
            &r.cells[0].1,
            "--database-connection",
            &r.cells[0].0,
        ],
    );
    let c1: CellUuid = c1.trim().parse().unwrap();

    let db = ApiDb::open(api).await.unwrap();
    let cache = CellCache::start(
        db,
        CacheConfig {
            refresh_interval_ms: 200,
        },
    )
    .await
    .unwrap();
    assert_eq!(cache.snapshot().all().len(), 2);
    assert_eq!(cache.snapshot().schedulable().count(), 1);

    // A new cell while the system runs.
    let c2 = ok(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--name",
            "cell2",
            "--transport-url",
            &r.cells[1].1,
            "--database-connection",
            &r.cells[1].0,
        ],
    );
    let c2: CellUuid = c2.trim().parse().unwrap();
    let took = wait_for(&cache, "the new cell", |s| s.get(&c2).is_some()).await;
    assert!(took < Duration::from_secs(2), "{took:?}");

    // Disabled: no new builds, instances keep working (still found).
    ok(
        api,
        &[
            "cell_v2",
            "update-cell",
            "--cell-uuid",
            &c1.to_string(),
            "--disable",
        ],
    );
    wait_for(&cache, "the disabled cell", |s| {
        s.get(&c1).is_some_and(|c| c.disabled)
    })
    .await;
    let snap = cache.snapshot();
    assert!(snap.schedulable().all(|c| c.uuid != c1));
    assert!(snap.get(&c1).is_some());

    // Changed twice within the same second: both seen.
    ok(
        api,
        &[
            "cell_v2",
            "update-cell",
            "--cell-uuid",
            &c2.to_string(),
            "--name",
            "a",
        ],
    );
    ok(
        api,
        &[
            "cell_v2",
            "update-cell",
            "--cell-uuid",
            &c2.to_string(),
            "--name",
            "b",
        ],
    );
    wait_for(&cache, "the renamed cell", |s| {
        s.get(&c2).is_some_and(|c| c.name.as_deref() == Some("b"))
    })
    .await;

    // Deleted.
    ok(
        api,
        &["cell_v2", "delete-cell", "--cell-uuid", &c2.to_string()],
    );
    wait_for(&cache, "the deleted cell", |s| s.get(&c2).is_none()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cache_follows_changes_sqlite() {
    cache_follows_changes(Be::Sqlite, "cache_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cache_follows_changes_postgres() {
    cache_follows_changes(Be::Pg, "cache_pg").await;
}
