//! `testkit`: what tests need to talk to real backends.
//!
//! Every test gets its own database (a fresh SQLite file, or a fresh
//! PostgreSQL database named after the test) and its own RabbitMQ vhost.
//!
//! Tests that need PostgreSQL or RabbitMQ call [`postgres`] or
//! [`rabbitmq`]. On a machine without the server they print why they skip
//! and get `None`; when the environment variable [`REQUIRE_ENV`] is `1`
//! (CI sets it) a missing server is a panic instead, so nothing is silently
//! skipped there.
//!
//! [`proxy::TcpProxy`] stands in front of a real server so that a test can
//! take it away (refused or hanging connections) and bring it back.
//!
//! [`pki::TestPki`] makes a CA and a server certificate for TLS tests, and
//! [`pki::TlsProxy`] puts TLS in front of a plain service.
//!
//! May depend on: sqlx, tokio, openssl and tokio-native-tls. Only ever a dev-dependency.

pub mod http;
pub mod pki;
pub mod proxy;
pub mod python;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection;

/// Set to `1` to turn a skipped real-backend test into a failure.
pub const REQUIRE_ENV: &str = "REQUIRE_REAL_BACKENDS";

/// Admin URL of the PostgreSQL server used by tests (override with `TEST_PG_URL`).
pub fn pg_admin_url() -> String {
    std::env::var("TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Host part of the RabbitMQ server used by tests (override with `TEST_AMQP_HOST`).
pub fn amqp_base() -> String {
    std::env::var("TEST_AMQP_HOST")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672".to_owned())
}

/// Whether real-backend tests must run (CI) rather than skip.
pub fn backends_required() -> bool {
    std::env::var(REQUIRE_ENV)
        .map(|v| v == "1")
        .unwrap_or(false)
}

fn skip_or_panic(what: &str, why: &str) {
    if backends_required() {
        panic!("{what} is required ({REQUIRE_ENV}=1) but unavailable: {why}");
    }
    eprintln!("SKIP: {what} unavailable ({why}); set {REQUIRE_ENV}=1 to make this a failure");
}

/// The URI of this machine's libvirtd (`qemu:///system`) when it answers;
/// otherwise `None` after printing why (a panic when real backends are
/// required: CI starts libvirtd with `scripts/install-libvirt.sh --daemon`).
pub fn libvirtd() -> Option<&'static str> {
    const URI: &str = "qemu:///system";
    let out = std::process::Command::new("virsh")
        .args(["-c", URI, "version"])
        .output();
    match out {
        Ok(o) if o.status.success() => Some(URI),
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            skip_or_panic("libvirtd (qemu:///system)", &why);
            None
        }
        Err(e) => {
            skip_or_panic("libvirtd (qemu:///system)", &format!("virsh: {e}"));
            None
        }
    }
}

/// Ports [`free_port`] hands out: below Linux's ephemeral range (32768 and
/// up), so that no outgoing connection of a test running beside this one
/// can be given the port between the probe and the service's bind.
const FREE_PORTS: std::ops::Range<u32> = 20_000..32_000;

/// A local port that was free a moment ago, for a service whose address
/// must be known before it starts (e.g. to appear in the identity catalog).
/// Each test process starts its walk at a place of its own (its process
/// id), so tests running side by side rarely probe the same ports; a port
/// taken in between is still possible, only much less likely than with an
/// ephemeral port (`bind(":0")`), which any connect may be given next.
pub fn free_port() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let span = u64::from(FREE_PORTS.end - FREE_PORTS.start);
    let start = u64::from(std::process::id()).wrapping_mul(97);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let offset = u32::try_from(start.wrapping_add(n) % span).expect("below the span");
        let port = u16::try_from(FREE_PORTS.start + offset).expect("ports fit in u16");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FREE_PORTS:?}")
}

/// Turns a test name into a safe identifier: lowercase alphanumerics and `_`.
pub fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    s.truncate(50);
    format!("t_{s}")
}

/// A fresh PostgreSQL database, dropped and recreated under the test's name.
pub struct PgDb {
    pub name: String,
    pub url: String,
}

/// Creates (or recreates) a PostgreSQL database named after `test_name`.
/// `None` (with a printed reason) when PostgreSQL is unreachable and not required.
pub async fn postgres(test_name: &str) -> Option<PgDb> {
    let admin = pg_admin_url();
    let mut conn = match sqlx::PgConnection::connect(&admin).await {
        Ok(c) => c,
        Err(e) => {
            skip_or_panic("PostgreSQL", &e.to_string());
            return None;
        }
    };
    let name = ident(test_name);
    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    sqlx::query(&drop)
        .execute(&mut conn)
        .await
        .expect("drop test database");
    let create = format!("CREATE DATABASE {name}");
    sqlx::query(&create)
        .execute(&mut conn)
        .await
        .expect("create test database");
    let base = admin
        .rsplit_once('/')
        .map(|(b, _)| b.to_owned())
        .unwrap_or(admin);
    Some(PgDb {
        url: format!("{base}/{name}"),
        name,
    })
}

/// A fresh SQLite database file in its own temporary directory.
pub struct SqliteDb {
    pub dir: PathBuf,
    pub url: String,
}

impl Drop for SqliteDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh, empty temporary directory unique to this process and call.
pub fn temp_dir(test_name: &str) -> PathBuf {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{}-{}-{n}", ident(test_name), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A fresh SQLite database URL (file created on first connect with `mode=rwc`).
pub fn sqlite(test_name: &str) -> SqliteDb {
    let dir = temp_dir(test_name);
    let url = format!("sqlite://{}/db.sqlite?mode=rwc", dir.display());
    SqliteDb { dir, url }
}

/// A fresh RabbitMQ vhost named after the test (deleted and re-added through
/// `rabbitmqctl`), returned as an `amqp://` URL. `None` (with a printed reason)
/// when RabbitMQ is unreachable and not required.
pub fn rabbitmq(test_name: &str) -> Option<String> {
    let vhost = ident(test_name);
    if std::net::TcpStream::connect("127.0.0.1:5672").is_err() {
        skip_or_panic("RabbitMQ", "nothing listens on 127.0.0.1:5672");
        return None;
    }
    // rabbitmqctl calls from parallel test processes occasionally fail;
    // retry a few times before giving up.
    let run = |args: &[&str]| {
        Command::new("rabbitmqctl")
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let mut perms = false;
    for attempt in 0..5u64 {
        run(&["-q", "delete_vhost", &vhost]);
        perms = run(&["-q", "add_vhost", &vhost])
            && run(&[
                "-q",
                "set_permissions",
                "-p",
                &vhost,
                "guest",
                ".*",
                ".*",
                ".*",
            ]);
        if perms {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(300 * (attempt + 1)));
    }
    if !perms {
        skip_or_panic("RabbitMQ", "rabbitmqctl could not create the test vhost");
        return None;
    }
    Some(format!("{}/{vhost}", amqp_base()))
}

/// The vhost of an `amqp://…/<vhost>` URL made by [`rabbitmq`].
pub fn vhost_of(amqp_url: &str) -> String {
    amqp_url.rsplit('/').next().unwrap_or_default().to_owned()
}

/// Runs `rabbitmqctl -q <args>` (retrying a few times: calls from parallel
/// test processes occasionally fail) and returns its output; panics if it
/// keeps failing.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let mut last = String::new();
    for attempt in 0..5u64 {
        match Command::new("rabbitmqctl").arg("-q").args(args).output() {
            Ok(o) if o.status.success() => return String::from_utf8_lossy(&o.stdout).into_owned(),
            Ok(o) => last = String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(std::time::Duration::from_millis(300 * (attempt + 1)));
    }
    panic!("rabbitmqctl {args:?} failed: {last}");
}

/// A broker outage for one vhost, as the loadtest's `stop-broker` makes it:
/// new connections refused (`max-connections` 0) and the open ones closed.
pub fn stop_vhost(vhost: &str) {
    rabbitmqctl(&["set_vhost_limits", "-p", vhost, r#"{"max-connections": 0}"#]);
    rabbitmqctl(&["close_all_connections", "-p", vhost, "test broker outage"]);
}

/// Ends [`stop_vhost`]'s outage: clients may connect again.
pub fn start_vhost(vhost: &str) {
    rabbitmqctl(&["clear_vhost_limits", "-p", vhost]);
}

/// Closes the connections to `vhost` whose client-provided name (the bus's
/// `connection_name`) is `name`; returns how many it closed.
pub fn close_named_connections(vhost: &str, name: &str) -> usize {
    // `list_connections` is not scoped by `-p`: filter on the vhost column.
    let out = rabbitmqctl(&["list_connections", "vhost", "pid", "client_properties"]);
    // client_properties holds {"connection_name","<name>"}.
    let needle = format!("{{\"connection_name\",\"{name}\"}}");
    let mut closed = 0;
    for line in out.lines().filter(|l| l.contains(&needle)) {
        let mut cols = line.split('\t');
        if let (Some(v), Some(pid)) = (cols.next(), cols.next()) {
            if v.trim() == vhost {
                rabbitmqctl(&["close_connection", pid.trim(), "test connection loss"]);
                closed += 1;
            }
        }
    }
    closed
}
