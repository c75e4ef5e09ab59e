//! The HTTP client `fabric` talks to the identity service with (logins,
//! keys, revocations, token checks): `http://` only, one request per
//! connection, bounded waits.

use std::time::Duration;

use super::RefreshError;

/// An HTTP answer: status, headers (names lowercased), body.
pub(crate) struct HttpAnswer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl HttpAnswer {
    /// The first value of header `name` (lowercase).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 request over plain TCP (`http://host:port/path`),
/// enough for talking to our own identity service; TLS is not supported.
/// `body` is sent as JSON. Every step has a 5 s timeout.
pub(crate) async fn http_request(
    method: &str,
    url: &str,
    body: Option<&[u8]>,
) -> Result<HttpAnswer, RefreshError> {
    http_request_with(method, url, &[], body).await
}

/// Where an `http://` URL sends its request.
#[derive(Debug, PartialEq, Eq)]
struct HttpTarget<'a> {
    /// `host:port` to connect to (port 80 when the URL names none).
    connect_to: String,
    /// The `Host` header: the URL's authority as written.
    host: &'a str,
    /// The path and query, the URL's path prefix kept (`/` when empty).
    path: &'a str,
}

/// Splits an `http://host[:port][/path]` URL; anything else (https
/// included: there is no TLS client here) is refused.
fn http_target(url: &str) -> Result<HttpTarget<'_>, RefreshError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| RefreshError::Protocol(format!("only http:// URLs are supported: {url}")))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(RefreshError::Protocol(format!("no host in {url}")));
    }
    // A port follows the last ':', unless that ':' is inside an IPv6
    // literal's brackets.
    let has_port = host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
    let connect_to = if has_port {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    Ok(HttpTarget {
        connect_to,
        host,
        path,
    })
}

/// [`http_request`] with extra request headers.
pub(crate) async fn http_request_with(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<HttpAnswer, RefreshError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let HttpTarget {
        connect_to,
        host,
        path,
    } = http_target(url)?;
    let timeout = |what| RefreshError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, what));
    let connect = tokio::net::TcpStream::connect(connect_to);
    let mut stream = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| timeout("connect"))?
        .map_err(RefreshError::Io)?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\naccept: application/json\r\nconnection: close\r\n"
    );
    for (k, v) in headers {
        if v.contains(['\r', '\n']) || k.contains(['\r', '\n']) {
            return Err(RefreshError::Protocol("a header holds a line break".into()));
        }
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(b) = body {
        bytes.extend_from_slice(b);
    }
    tokio::time::timeout(Duration::from_secs(5), stream.write_all(&bytes))
        .await
        .map_err(|_| timeout("send"))?
        .map_err(RefreshError::Io)?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf))
        .await
        .map_err(|_| timeout("read"))?
        .map_err(RefreshError::Io)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| RefreshError::Protocol("no header end".into()))?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RefreshError::Protocol("no status line".into()))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body).ok_or_else(|| RefreshError::Protocol("bad chunking".into()))?;
    }
    Ok(HttpAnswer {
        status,
        headers,
        body,
    })
}

/// GET `url` and parse the JSON answer (200 only).
pub(crate) async fn http_get_json<T: serde::de::DeserializeOwned>(
    url: &str,
    headers: &[(&str, &str)],
) -> Result<T, RefreshError> {
    let a = http_request_with("GET", url, headers, None).await?;
    if a.status != 200 {
        return Err(RefreshError::Protocol(format!("status {}", a.status)));
    }
    serde_json::from_slice(&a.body).map_err(|e| RefreshError::Protocol(e.to_string()))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_str = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An identity URL without a port (`http://10.0.0.5/identity`, as
    /// devstack serves it) connects to port 80 and keeps its path prefix;
    /// a port given is kept, IPv6 literals too; https is refused.
    #[test]
    fn http_urls_without_a_port_use_port_80_and_keep_the_path() {
        let t = http_target("http://10.0.0.5/identity/v3/auth/tokens").unwrap();
        assert_eq!(
            t,
            HttpTarget {
                connect_to: "10.0.0.5:80".into(),
                host: "10.0.0.5",
                path: "/identity/v3/auth/tokens",
            }
        );
        let t = http_target("http://keystone.example:5000/v3/auth/keys").unwrap();
        assert_eq!(
            (t.connect_to.as_str(), t.host, t.path),
            (
                "keystone.example:5000",
                "keystone.example:5000",
                "/v3/auth/keys"
            )
        );
        let t = http_target("http://keystone.example").unwrap();
        assert_eq!(
            (t.connect_to.as_str(), t.path),
            ("keystone.example:80", "/")
        );
        assert_eq!(
            http_target("http://[::1]/v3").unwrap().connect_to,
            "[::1]:80"
        );
        assert_eq!(
            http_target("http://[::1]:5000/v3").unwrap().connect_to,
            "[::1]:5000"
        );
        let e = http_target("https://keystone.example/v3").unwrap_err();
        assert!(e.to_string().contains("only http://"), "{e}");
        assert!(http_target("http:///v3").is_err());
    }

    #[test]
    fn dechunks() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
    }
}
