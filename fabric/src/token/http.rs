//! The HTTP client `fabric` talks to the identity service with (logins,
//! keys, revocations, token checks): reqwest through [`crate::http`]'s
//! shared options, `http://` or `https://` (trusting the region's CA),
//! bounded waits.

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

/// A request to the identity service (`http://` or `https://`, a path
/// prefix kept); `body` is sent as JSON. The whole exchange is bounded by
/// 5 s.
pub(crate) async fn http_request(
    method: &str,
    url: &str,
    body: Option<&[u8]>,
) -> Result<HttpAnswer, RefreshError> {
    http_request_with(method, url, &[], body).await
}

/// The client fabric talks to the identity service with, built again only
/// when the process's CA ([`crate::http::trust_ca_file`]) changed.
fn identity_client() -> Result<reqwest::Client, RefreshError> {
    type Cached = Option<(Option<std::path::PathBuf>, reqwest::Client)>;
    static CLIENT: std::sync::Mutex<Cached> = std::sync::Mutex::new(None);
    let ca = crate::http::process_ca_file();
    let mut g = CLIENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((built_for, c)) = g.as_ref() {
        if *built_for == ca {
            return Ok(c.clone());
        }
    }
    let c = crate::http::client(&crate::http::ClientOptions {
        timeout: Duration::from_secs(5),
        ca_file: ca.clone(),
        ..Default::default()
    })
    .map_err(RefreshError::Client)?;
    *g = Some((ca, c.clone()));
    Ok(c)
}

/// [`http_request`] with extra request headers.
pub(crate) async fn http_request_with(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<HttpAnswer, RefreshError> {
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| RefreshError::Protocol(format!("not an HTTP method: {method}")))?;
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| RefreshError::Protocol(format!("not a URL: {url}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(RefreshError::Protocol(format!(
            "only http:// and https:// URLs with a host are supported: {url}"
        )));
    }
    let mut req = identity_client()?
        .request(method, parsed)
        .header(reqwest::header::ACCEPT, "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b.to_vec());
    }
    let resp = req.send().await.map_err(RefreshError::Http)?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let body = resp.bytes().await.map_err(RefreshError::Http)?.to_vec();
    Ok(HttpAnswer {
        status,
        headers,
        body,
    })
}

/// What a conditional GET found.
pub(crate) enum Fetched<T> {
    /// `304 Not Modified`: the tag sent is still current.
    Unchanged,
    /// A new document, with its tag when the server sent one.
    Changed(T, Option<String>),
}

/// GET of a JSON document, sending `etag` as `If-None-Match` when held.
pub(crate) async fn http_get_json_if_changed<T: serde::de::DeserializeOwned>(
    url: &str,
    headers: &[(&str, &str)],
    etag: Option<&str>,
) -> Result<Fetched<T>, RefreshError> {
    let mut all = headers.to_vec();
    if let Some(tag) = etag {
        all.push(("if-none-match", tag));
    }
    let a = http_request_with("GET", url, &all, None).await?;
    match a.status {
        304 if etag.is_some() => Ok(Fetched::Unchanged),
        200 => {
            let doc = serde_json::from_slice(&a.body)
                .map_err(|e| RefreshError::Protocol(e.to_string()))?;
            Ok(Fetched::Changed(doc, a.header("etag").map(str::to_owned)))
        }
        s => Err(RefreshError::Protocol(format!("status {s}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anything but an http:// or https:// URL with a host is refused
    /// before a request is made.
    #[tokio::test]
    async fn only_http_and_https_urls_are_sent() {
        for url in [
            "ftp://keystone.example/v3",
            "keystone.example/v3",
            "http://",
        ] {
            let e = http_request("GET", url, None).await.err().expect(url);
            assert!(matches!(e, RefreshError::Protocol(_)), "{url}: {e}");
        }
    }
}
