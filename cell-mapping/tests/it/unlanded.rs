//! Rows of builds that never landed: a create of a uuid already in the
//! cell fails as a duplicate (`Error::is_duplicate`), and
//! `CellDb::api_remove_unlanded_row` removes only the row of the id its
//! create answered, never one a compute launched, on SQLite and
//! PostgreSQL.

use crate::common::{cell_db, exec, Be};
use crate::local_delete::building;

async fn flow(be: Be, name: &str) {
    let Some((db, _keep)) = cell_db(be, name).await else {
        return;
    };
    let uuid = uuid::Uuid::new_v4().to_string();
    let first = db
        .create_api_instance(&building(&uuid, Some("h1")))
        .await
        .unwrap();
    let again = db
        .create_api_instance(&building(&uuid, Some("h2")))
        .await
        .unwrap_err();
    assert!(again.is_duplicate(), "{}", again.one_line());
    // Another id (a row of the same uuid written by someone else) stays.
    assert!(!db.api_remove_unlanded_row(&uuid, first + 1).await.unwrap());
    assert!(db.api_instance(&uuid).await.unwrap().is_some());
    // A launched row stays, whoever asks.
    exec(
        db.pool(),
        "UPDATE instances SET launched_at = updated_at WHERE uuid = $1",
        &[&uuid],
    )
    .await;
    assert!(!db.api_remove_unlanded_row(&uuid, first).await.unwrap());
    assert!(!db.api_purge_unlanded(&uuid).await.unwrap());
    exec(
        db.pool(),
        "UPDATE instances SET launched_at = NULL WHERE uuid = $1",
        &[&uuid],
    )
    .await;
    // Its own row goes, with its action.
    assert!(db.api_remove_unlanded_row(&uuid, first).await.unwrap());
    assert!(db.api_instance(&uuid).await.unwrap().is_none());
    assert!(db
        .api_instance_action(&uuid, "req-create")
        .await
        .unwrap()
        .is_none());
    // And the uuid can be created again.
    let second = db
        .create_api_instance(&building(&uuid, Some("h2")))
        .await
        .unwrap();
    assert_ne!(second, first);
}

#[tokio::test]
async fn unlanded_rows_on_sqlite() {
    flow(Be::Sqlite, "unlanded_sqlite").await;
}

#[tokio::test]
async fn unlanded_rows_on_postgresql() {
    flow(Be::Pg, "unlanded_pg").await;
}
