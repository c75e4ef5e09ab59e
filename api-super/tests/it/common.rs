//! Shared setup: an identity service on port 0 over a fresh database,
//! bootstrapped with an admin and a member, and small HTTP helpers.

use std::net::SocketAddr;

use api_super::identity::{self, BootstrapSpec, Bootstrapped, IdentityConfig, Running};
use serde_json::{json, Value};
use testkit::http::{Client, Response};

pub const ADMIN_PW: &str = "admin-secret";
pub const MEMBER_PW: &str = "member-secret";

/// A running identity service and what bootstrap made.
pub struct Env {
    pub running: Running,
    pub boot: Bootstrapped,
    _db: Option<testkit::SqliteDb>,
}

impl Env {
    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }
}

/// Starts identity on a fresh SQLite file; `tweak` adjusts the config.
pub async fn start(name: &str, tweak: impl FnOnce(&mut IdentityConfig)) -> Env {
    let db = testkit::sqlite(name);
    let mut env = start_on(&db.url.clone(), tweak).await;
    env._db = Some(db);
    env
}

/// Starts identity on the database at `url`.
pub async fn start_on(url: &str, tweak: impl FnOnce(&mut IdentityConfig)) -> Env {
    let mut cfg = IdentityConfig {
        listen: "127.0.0.1:0".into(),
        ..Default::default()
    };
    cfg.database.connection = url.to_owned();
    if !url.starts_with("sqlite") {
        // On SQLite the key file goes beside the database; here one per
        // database, shared by the processes on it.
        let name: String = url
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let file = format!("identity-kek-{}-{name}", std::process::id());
        cfg.token.key_file = std::env::temp_dir().join(file).display().to_string();
    }
    // Debug builds hash slowly; the cost is not what these tests test.
    cfg.password_hash = identity::password::Cost::TEST;
    tweak(&mut cfg);
    let running = identity::serve_identity(cfg)
        .await
        .expect("identity starts");
    let spec = BootstrapSpec {
        member: Some(("demo".into(), MEMBER_PW.into(), "demo".into())),
        ..BootstrapSpec::admin(ADMIN_PW)
    };
    let boot = running.identity.bootstrap(&spec).await.expect("bootstrap");
    Env {
        running,
        boot,
        _db: None,
    }
}

/// One request on a fresh connection (run off the async workers).
pub async fn req(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Response {
    let method = method.to_owned();
    let path = path.to_owned();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        if method == "HEAD" {
            return head(addr, &path, &headers);
        }
        let mut c = Client::new(addr);
        for (k, v) in &headers {
            c = c.with_header(k, v);
        }
        let body = body.map(|b| b.to_string());
        c.request(&method, &path, body.as_deref()).expect("request")
    })
    .await
    .expect("join")
}

/// HEAD on its own connection: testkit's client would wait for a body of
/// the advertised length, which a HEAD answer never has.
fn head(addr: SocketAddr, path: &str, headers: &[(String, String)]) -> Response {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let mut r = format!("HEAD {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    s.write_all(r.as_bytes()).expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).expect("read");
    let mut lines = buf.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Response {
        status,
        headers,
        body: String::new(),
    }
}

/// A request with `X-Auth-Token`.
pub async fn authed(
    addr: SocketAddr,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Response {
    req(addr, method, path, &[("x-auth-token", token)], body).await
}

/// The body of a password authentication, scoped to `project` by name.
pub fn password_body(user: &str, pw: &str, project: Option<&str>) -> Value {
    let mut b = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"name": "Default"}, "password": pw}}}}});
    match project {
        Some(p) => {
            b["auth"]["scope"] = json!({"project": {"name": p, "domain": {"id": "default"}}});
        }
        None => b["auth"]["scope"] = json!("unscoped"),
    }
    b
}

/// Issues a token; panics unless 201.
pub async fn token(
    addr: SocketAddr,
    user: &str,
    pw: &str,
    project: Option<&str>,
) -> (String, Value) {
    let r = req(
        addr,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body(user, pw, project)),
    )
    .await;
    assert_eq!(r.status, 201, "token for {user}: {}", r.body);
    let t = r
        .header("x-subject-token")
        .expect("subject token")
        .to_owned();
    (t, serde_json::from_str(&r.body).unwrap())
}

pub fn json(r: &Response) -> Value {
    serde_json::from_str(&r.body).unwrap_or(Value::Null)
}
