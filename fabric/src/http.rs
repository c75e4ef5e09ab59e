//! The HTTP client side every service shares: how a client of another
//! service's API is built (bounded timeouts, a small idle pool, TLS through
//! the system's OpenSSL trusting an extra CA when one is configured) and
//! how a request is sent again while that API says it is full (503 with
//! `Retry-After`, as every API of the region answers at its HTTP limits).
//!
//! reqwest does the HTTP/1.1 and TLS work; what is ours is only the
//! retry policy, which no client crate knows (it must read our APIs'
//! `Retry-After`, stay bounded and spread the retries of a burst).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// How a client of another service's API is built.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The whole request, body included.
    pub timeout: Duration,
    /// Opening the connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Idle connections kept per peer. One client may serve hundreds of
    /// simulated hosts: few idle connections keep a process of 10,000
    /// hosts from holding 10,000 sockets open on each side.
    pub pool_max_idle_per_host: usize,
    /// A PEM file of CA certificates trusted besides the system's (a
    /// region's private CA); `None`: the system's only (OpenSSL also reads
    /// `SSL_CERT_FILE`).
    pub ca_file: Option<PathBuf>,
}

impl Default for ClientOptions {
    /// 30 s per request, 5 s to connect, 4 idle connections per peer, and
    /// the process's CA ([`trust_ca_file`]) when one was set.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            pool_max_idle_per_host: 4,
            ca_file: process_ca_file(),
        }
    }
}

static PROCESS_CA: std::sync::RwLock<Option<PathBuf>> = std::sync::RwLock::new(None);

/// Makes every client this process builds from then on (placement,
/// identity, image, ...) trust the CA certificates in the PEM file `path`
/// besides the system's: a region's private CA, set once at start-up
/// from the service's `[tls] ca_file`. The file is read and checked now.
pub fn trust_ca_file(path: &std::path::Path) -> Result<(), ClientError> {
    client(&ClientOptions {
        ca_file: Some(path.to_owned()),
        ..ClientOptions::default()
    })?;
    *PROCESS_CA.write().unwrap_or_else(|p| p.into_inner()) = Some(path.to_owned());
    Ok(())
}

/// The CA file set with [`trust_ca_file`], if any.
pub fn process_ca_file() -> Option<PathBuf> {
    PROCESS_CA.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Building a client failed (an unreadable or malformed CA file, or the
/// TLS backend could not start).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the CA file {path}: {source}")]
    CaFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA file {path} holds no usable PEM certificate: {source}")]
    CaCert {
        path: PathBuf,
        source: reqwest::Error,
    },
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
}

/// A client built as `options` say.
pub fn client(options: &ClientOptions) -> Result<reqwest::Client, ClientError> {
    let mut b = reqwest::Client::builder()
        .timeout(options.timeout)
        .connect_timeout(options.connect_timeout)
        .pool_max_idle_per_host(options.pool_max_idle_per_host)
        .pool_idle_timeout(Duration::from_secs(30));
    if let Some(path) = &options.ca_file {
        let pem = std::fs::read(path).map_err(|source| ClientError::CaFile {
            path: path.clone(),
            source,
        })?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| ClientError::CaCert {
                path: path.clone(),
                source,
            })?;
        if certs.is_empty() {
            return Err(ClientError::CaFile {
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, "no certificate"),
            });
        }
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    b.build().map_err(ClientError::Build)
}

/// Refuses `url` (named `option` in the error) when it is not an http(s)
/// URL, or is plain `http://` to a host that is not this machine's loopback (127.0.0.0/8,
/// `::1`, `localhost`; `0.0.0.0` and `::`, which connect to this machine too), unless `allowed`: the identity service's keys and
/// token checks must come over TLS or from this machine, or whoever is on
/// the path could install its own key or vouch for any token.
pub fn refuse_plain_http_off_loopback(
    option: &str,
    url: &str,
    allowed: bool,
) -> Result<(), PlainHttpRefused> {
    let parsed = reqwest::Url::parse(url).map_err(|e| PlainHttpRefused {
        option: option.to_owned(),
        url: url.to_owned(),
        why: format!("not a URL: {e}"),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(PlainHttpRefused {
            option: option.to_owned(),
            url: url.to_owned(),
            why: "not an http:// or https:// URL with a host".to_owned(),
        });
    }
    let host = parsed.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified());
    if parsed.scheme() == "http" && !loopback && !allowed {
        return Err(PlainHttpRefused {
            option: option.to_owned(),
            url: url.to_owned(),
            why: "plain http to another machine: anyone on the path could answer for the \
                  identity service. Use https (with [tls] ca_file for a private CA), a \
                  loopback address, or set allow_plain_http = true"
                .to_owned(),
        });
    }
    Ok(())
}

/// [`refuse_plain_http_off_loopback`]'s refusal.
#[derive(Debug, thiserror::Error)]
#[error("{option} = {url}: {why}")]
pub struct PlainHttpRefused {
    option: String,
    url: String,
    why: String,
}

/// How long a request answered 503 (full) is sent again for, from its
/// first 503: long enough for a burst to drain (the 1,757 deletes of a
/// 10,000-host fleet at once: placement takes them 512 at a time on one
/// SQLite writer, about 8 s), within the 30 s an RPC waits for its
/// handler.
pub const FULL_RETRY_BUDGET: Duration = Duration::from_secs(15);

/// The longest wait before a retry, whatever `Retry-After` says.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(2);

/// The wait before sending again after a 503 whose `Retry-After` says
/// `retry_after` (seconds; 1 s when absent or not a number), bounded to
/// [`MAX_RETRY_WAIT`], times a factor in 0.75–1.0 from `jitter_byte` so a
/// burst spreads out.
pub fn retry_wait(retry_after: Option<&str>, jitter_byte: u8) -> Duration {
    let secs = retry_after
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .unwrap_or(1.0)
        .clamp(0.05, MAX_RETRY_WAIT.as_secs_f64());
    let jitter = f64::from(jitter_byte) / 255.0 * 0.25;
    Duration::from_secs_f64(secs * (0.75 + jitter))
}

/// Sending a request again while the API is full: a 503 is sent again
/// after [`retry_wait`] while [`FULL_RETRY_BUDGET`] allows, so a burst
/// (10,000 hosts reporting at once, a fleet's deletes) waits its turn
/// instead of failing; the last 503 is returned once the budget is spent.
/// Only the 503 the HTTP limits answer is repeated: nothing was
/// done for it. A request whose body cannot be cloned (a stream) is sent
/// once.
pub trait SendRetrying {
    fn send_retrying(
        self,
    ) -> impl Future<Output = Result<reqwest::Response, reqwest::Error>> + Send;
}

impl SendRetrying for reqwest::RequestBuilder {
    async fn send_retrying(self) -> Result<reqwest::Response, reqwest::Error> {
        send_retrying_within(self, FULL_RETRY_BUDGET).await
    }
}

/// [`SendRetrying::send_retrying`] with a budget of `budget`.
async fn send_retrying_within(
    req: reqwest::RequestBuilder,
    budget: Duration,
) -> Result<reqwest::Response, reqwest::Error> {
    let mut next = req;
    let mut attempt = 0u32;
    let mut first_503 = None;
    loop {
        let again = next.try_clone();
        let resp = next.send().await?;
        let Some(again) = again.filter(|_| resp.status().as_u16() == 503) else {
            return Ok(resp);
        };
        let since = *first_503.get_or_insert_with(tokio::time::Instant::now);
        let wait = retry_wait(
            resp.headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()),
            uuid::Uuid::new_v4().as_bytes()[0],
        );
        if since.elapsed() + wait > budget {
            return Ok(resp);
        }
        metrics::counter!("http_client_full_retries_total").increment(1);
        tracing::debug!(url = %resp.url(), attempt, ?wait, "the API is full (503); sending again");
        drop(resp);
        tokio::time::sleep(wait).await;
        attempt += 1;
        next = again;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on 127.0.0.1 answering 503 (`Retry-After: 0.1`) to its
    /// first `full` requests and 200 with the request's body after; it
    /// counts the requests and keeps their bodies.
    async fn full_then_ok(
        full: usize,
    ) -> (
        std::net::SocketAddr,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                // One request per connection (`Connection: close`); the
                // body is short and follows the head.
                while !String::from_utf8_lossy(&got).contains("\r\n\r\nbody") {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got).into_owned();
                let n = {
                    let mut g = s.lock().unwrap();
                    g.push(text.rsplit("\r\n\r\n").next().unwrap_or("").to_owned());
                    g.len()
                };
                let answer = if n <= full {
                    "HTTP/1.1 503 Service Unavailable\r\nretry-after: 0.1\r\ncontent-length: 4\r\nconnection: close\r\n\r\nfull"
                } else {
                    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                };
                let _ = c.write_all(answer.as_bytes()).await;
            }
        });
        (addr, seen)
    }

    #[tokio::test]
    async fn a_503_is_sent_again_with_its_body_until_answered() {
        let (addr, seen) = full_then_ok(3).await;
        let req = reqwest::Client::new()
            .post(format!("http://{addr}/allocations"))
            .body("body-1");
        let resp = send_retrying_within(req, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec!["body-1"; 4]);
    }

    #[tokio::test]
    async fn the_last_503_is_returned_when_the_budget_is_spent() {
        let (addr, seen) = full_then_ok(usize::MAX).await;
        let req = reqwest::Client::new()
            .post(format!("http://{addr}/allocations"))
            .body("body-2");
        let started = std::time::Instant::now();
        let resp = send_retrying_within(req, Duration::from_millis(400))
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
        assert!(started.elapsed() < Duration::from_secs(5));
        // 0.1 s waits (0.075–0.1 with jitter) within 0.4 s: 4 to 6 sends.
        let n = seen.lock().unwrap().len();
        assert!((4..=6).contains(&n), "{n} requests");
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        let ok = |u: &str, allowed| refuse_plain_http_off_loopback("identity_url", u, allowed);
        for u in [
            "https://keystone.example:5000",
            "http://127.0.0.1:5000",
            "http://127.9.9.9:5000/v3",
            "http://[::1]:5000",
            "http://localhost:5000",
            "http://0.0.0.0:5000",
            "https://10.0.0.5/identity",
        ] {
            assert!(ok(u, false).is_ok(), "{u}");
        }
        for u in [
            "http://10.0.0.5/identity",
            "http://keystone.example:5000/v3",
        ] {
            let e = ok(u, false).unwrap_err().to_string();
            assert!(
                e.contains("identity_url") && e.contains("plain http"),
                "{e}"
            );
            assert!(ok(u, true).is_ok(), "{u} allowed");
        }
        assert!(ok("keystone:5000", false).is_err());
    }

    #[test]
    fn waits_follow_retry_after_bounded_and_spread() {
        assert_eq!(retry_wait(Some("1"), 255), Duration::from_secs(1));
        assert_eq!(retry_wait(Some("1"), 0), Duration::from_millis(750));
        assert_eq!(retry_wait(None, 255), Duration::from_secs(1));
        assert_eq!(retry_wait(Some("soon"), 255), Duration::from_secs(1));
        assert_eq!(retry_wait(Some("3600"), 255), MAX_RETRY_WAIT);
        assert_eq!(retry_wait(Some("NaN"), 255), Duration::from_secs(1));
        assert_eq!(retry_wait(Some("0"), 255), Duration::from_millis(50));
    }
}
