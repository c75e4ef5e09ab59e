//! A minimal blocking HTTP/1.1 client for tests and benchmarks: one
//! keep-alive connection per [`Client`], JSON bodies, `Content-Length`
//! framing only (what our servers send). Not for production use.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl Response {
    /// The first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One keep-alive connection to `addr`, reconnecting when the server closes it.
pub struct Client {
    addr: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
    /// Headers sent with every request.
    pub default_headers: Vec<(String, String)>,
}

impl Client {
    /// A client for `addr` (connects lazily).
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            conn: None,
            default_headers: Vec::new(),
        }
    }

    /// Adds a header sent with every request.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.default_headers
            .push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sends one request; a JSON body when `body` is given.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<Response> {
        // One retry on a stale keep-alive connection.
        match self.try_request(method, path, body) {
            Ok(r) => Ok(r),
            Err(_) => {
                self.conn = None;
                self.try_request(method, path, body)
            }
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<Response> {
        if self.conn.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(60)))?;
            self.conn = Some(BufReader::new(s));
        }
        let conn = self.conn.as_mut().expect("connected");
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\n", self.addr);
        for (k, v) in &self.default_headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        match body {
            Some(b) => req.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
                b.len()
            )),
            None => req.push_str("content-length: 0\r\n\r\n"),
        }
        conn.get_mut().write_all(req.as_bytes())?;
        let mut status_line = String::new();
        if conn.read_line(&mut status_line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, status_line.clone())
            })?;
        let mut headers = Vec::new();
        let mut len = 0usize;
        let mut close = false;
        loop {
            let mut line = String::new();
            conn.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim().to_owned();
                if k == "content-length" {
                    len = v.parse().unwrap_or(0);
                }
                if k == "connection" && v.eq_ignore_ascii_case("close") {
                    close = true;
                }
                headers.push((k, v));
            }
        }
        let mut buf = vec![0u8; len];
        conn.read_exact(&mut buf)?;
        if close {
            self.conn = None;
        }
        Ok(Response {
            status,
            headers,
            body: String::from_utf8_lossy(&buf).into_owned(),
        })
    }
}
