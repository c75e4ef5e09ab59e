//! Console auth tokens in the API database, on both backends: a token one
//! handle (one API process) records, another finds; expired ones are
//! neither found nor kept; the store refuses past its bound; a server's
//! tokens go with it.

use api_super::compute_api::db::{ComputeDb, ConsoleTokenRow};
use cell_mapping::ApiDb;

async fn tokens_across_processes(url: &str) {
    migrations::migrate(migrations::Kind::Api, url)
        .await
        .expect("api migrations");
    let minting = ComputeDb::new(ApiDb::open(url).await.expect("api db"));
    let proxying = ComputeDb::new(ApiDb::open(url).await.expect("api db"));
    let row = |instance: &str| ConsoleTokenRow {
        console_type: "novnc".into(),
        instance_uuid: instance.into(),
        host: "cell1-host01".into(),
        address: "127.0.0.1".into(),
        port: 5900,
    };
    let now = 1_000_000;
    for (hash, instance) in [("h1", "i1"), ("h2", "i1"), ("h3", "i2")] {
        assert!(minting
            .console_token_insert(hash, &row(instance), now, now + 600, 3)
            .await
            .unwrap());
    }
    // Another process finds it, while valid.
    assert_eq!(
        proxying.console_token("h1", now + 1).await.unwrap(),
        Some(row("i1"))
    );
    assert_eq!(proxying.console_token("h1", now + 600).await.unwrap(), None);
    assert_eq!(proxying.console_token("nope", now).await.unwrap(), None);
    // Full: a fourth live token is refused, not added.
    assert!(!minting
        .console_token_insert("h4", &row("i3"), now + 1, now + 601, 3)
        .await
        .unwrap());
    assert_eq!(proxying.console_token("h4", now + 2).await.unwrap(), None);
    // A server's delete takes its tokens.
    assert_eq!(proxying.console_tokens_delete("i1").await.unwrap(), 2);
    assert_eq!(proxying.console_token("h2", now + 2).await.unwrap(), None);
    assert!(proxying
        .console_token("h3", now + 2)
        .await
        .unwrap()
        .is_some());
    // Once expired, the next mint removes them and there is room again.
    for (i, hash) in ["h5", "h6", "h7"].into_iter().enumerate() {
        assert!(
            minting
                .console_token_insert(hash, &row("i4"), now + 700, now + 1300, 3)
                .await
                .unwrap(),
            "{i}: expired tokens must not count"
        );
    }
    assert_eq!(proxying.console_token("h3", now + 2).await.unwrap(), None);
}

#[tokio::test]
async fn console_tokens_are_shared_bounded_and_expire_sqlite() {
    let file = testkit::sqlite("console_tokens");
    tokens_across_processes(&file.url).await;
}

#[tokio::test]
async fn console_tokens_are_shared_bounded_and_expire_postgres() {
    let Some(db) = testkit::postgres("console_tokens").await else {
        return;
    };
    tokens_across_processes(&db.url).await;
}
