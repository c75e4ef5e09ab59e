//! PostgreSQL over TLS: a database URL's `sslmode` is honoured (sqlx with
//! the system's OpenSSL). `require` encrypts (the server's `pg_stat_ssl`
//! says so), `disable` does not, and `verify-full` against a CA that did
//! not sign the server's certificate refuses to connect; the services'
//! pools use no TLS to a loopback database unless the URL names an
//! `sslmode` (`migrations::pg_options`). Needs the
//! machine's PostgreSQL with `ssl = on` (Debian's default, with its
//! snakeoil certificate).

use sqlx::Connection;

async fn encrypted(url: &str) -> bool {
    let mut c = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut c)
        .await
        .expect("pg_stat_ssl")
}

#[tokio::test]
async fn postgresql_urls_choose_tls_with_sslmode() {
    let Some(pg) = testkit::postgres("pg_tls").await else {
        return;
    };
    let sep = if pg.url.contains('?') { '&' } else { '?' };
    let with = |mode: &str| format!("{}{sep}sslmode={mode}", pg.url);
    let mut c = sqlx::PgConnection::connect(&pg.url).await.unwrap();
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(
        ssl, "on",
        "this test needs the machine's PostgreSQL with ssl = on (Debian's default)"
    );
    assert!(encrypted(&with("require")).await, "sslmode=require");
    assert!(!encrypted(&with("disable")).await, "sslmode=disable");
    // The services' pools (migrations::pg_options): no TLS on loopback
    // unless the URL asks for it.
    let pooled = |url: String| async move {
        let pool = migrations::open_pg(&url, 1).await.expect("pool");
        let ssl: bool =
            sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(&pool)
                .await
                .expect("pg_stat_ssl");
        pool.close().await;
        ssl
    };
    if std::env::var_os("PGSSLMODE").is_none() {
        assert!(pg.url.contains("127.0.0.1"), "{}", pg.url);
        assert!(!pooled(pg.url.clone()).await, "loopback, no sslmode");
    }
    assert!(pooled(with("prefer")).await, "sslmode=prefer");

    let dir = testkit::temp_dir("pg_tls_ca");
    let other_ca = testkit::pki::TestPki::new().write_to(&dir).ca_file;
    let url = format!("{}&sslrootcert={}", with("verify-full"), other_ca.display());
    let Err(e) = sqlx::PgConnection::connect(&url).await else {
        panic!("a certificate our CA did not sign must be refused");
    };
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}
