//! A guest's console output: a call to the compute that runs it
//! (`get_console_output` on `compute.<host>` over the cell's bus), with
//! the answer's control characters replaced as Nova does.

use std::time::Duration;

use cell_mapping::CellMapping;
use fabric::bus::BusError;
use fabric::rpc::{self, code, method, RequestIds};

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::App;

/// How long the compute may take to answer.
pub const CONSOLE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The last `tail_lines` lines (0: all the compute keeps, at most 100 KiB)
/// of the console of instance `id` on `host` in `cell`.
pub async fn output(
    app: &App,
    cell: &CellMapping,
    host: &str,
    id: &str,
    tail_lines: u32,
    ids: &RequestIds,
) -> ApiResult<String> {
    let bus = app.cells.bus(cell).await?;
    let req = rpc::ConsoleOutputRequest {
        instance_uuid: id.to_owned(),
        tail_lines,
    };
    let res: Result<rpc::ConsoleOutput, _> = rpc::call(
        bus.as_ref(),
        &rpc::compute_queue(host),
        method::GET_CONSOLE_OUTPUT,
        &req,
        ids,
        CONSOLE_CALL_TIMEOUT,
    )
    .await;
    match res {
        Ok(o) => Ok(printable(&o.output)),
        Err(e) => Err(match e.remote_code() {
            Some(code::NOT_FOUND) => {
                ApiError::NotFound("Guest does not have a console available.".into())
            }
            Some(code::NOT_IMPLEMENTED) => ApiError::NotImplemented("Unable to get console".into()),
            _ => {
                if let rpc::RpcError::Bus(BusError::Timeout(_)) = &e {
                    tracing::warn!(instance = %id, host, "compute did not answer get_console_output in time");
                }
                ApiError::internal(format!("get_console_output on {host}: {e}"))
            }
        }),
    }
}

/// The output as Nova's API answers it: control characters other than
/// tab and newline (`[\x00-\x08\x0B-\x1F]`, carriage return included)
/// become `?`.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{00}'..='\u{08}' | '\u{0B}'..='\u{1F}' => '?',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_become_question_marks_as_novas() {
        assert_eq!(
            super::printable("a\tb\nc\r\u{1b}[0m\u{7f}"),
            "a\tb\nc??[0m\u{7f}"
        );
    }
}

/// Where a console token leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleTarget {
    /// The instance.
    pub instance_uuid: String,
    /// `serial`.
    pub console_type: &'static str,
    /// The compute host (service host name).
    pub host: String,
    /// Where the console listens on that host.
    pub addr: std::net::SocketAddr,
}

/// Console auth tokens (Nova's `console_auth_tokens`), kept by the process
/// that issued them and whose proxy takes them: held as SHA-256 hashes,
/// valid for `ttl`, at most `max` at once (expired ones are swept when a
/// token is minted; a full store refuses new ones rather than growing).
#[derive(Debug)]
pub struct ConsoleTokens {
    tokens:
        std::sync::Mutex<std::collections::HashMap<[u8; 32], (ConsoleTarget, std::time::Instant)>>,
    ttl: Duration,
    max: usize,
}

fn token_hash(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

impl ConsoleTokens {
    /// A store whose tokens live `ttl`, at most `max` of them.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            tokens: Default::default(),
            ttl,
            max,
        }
    }

    /// A new token for `target` (256 random bits, hex), or `None` when the
    /// store is full of live tokens.
    pub fn mint(&self, target: ConsoleTarget) -> Option<String> {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let now = std::time::Instant::now();
        let mut m = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, (_, exp)| *exp > now);
        if m.len() >= self.max {
            return None;
        }
        m.insert(token_hash(&token), (target, now + self.ttl));
        Some(token)
    }

    /// What `token` leads to, while it is valid.
    pub fn check(&self, token: &str) -> Option<ConsoleTarget> {
        let m = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&token_hash(token))
            .filter(|(_, exp)| *exp > std::time::Instant::now())
            .map(|(t, _)| t.clone())
    }
}

/// Where the serial console of instance `id` on `host` listens, asked of
/// the compute.
pub async fn serial_address(
    app: &App,
    cell: &CellMapping,
    host: &str,
    id: &str,
    ids: &RequestIds,
) -> ApiResult<std::net::SocketAddr> {
    let bus = app.cells.bus(cell).await?;
    let req = rpc::SerialConsoleRequest {
        instance_uuid: id.to_owned(),
    };
    let res: Result<rpc::SerialConsole, _> = rpc::call(
        bus.as_ref(),
        &rpc::compute_queue(host),
        method::GET_SERIAL_CONSOLE,
        &req,
        ids,
        CONSOLE_CALL_TIMEOUT,
    )
    .await;
    match res {
        Ok(c) => {
            let ip: std::net::IpAddr = c.host.parse().map_err(|_| {
                ApiError::internal(format!("{host} answered a console address {:?}", c.host))
            })?;
            let port = u16::try_from(c.port).map_err(|_| {
                ApiError::internal(format!("{host} answered a console port {}", c.port))
            })?;
            Ok(std::net::SocketAddr::new(ip, port))
        }
        Err(e) => Err(match e.remote_code() {
            Some(code::NOT_FOUND) => {
                ApiError::NotFound("Guest does not have a console available.".into())
            }
            Some(code::NOT_IMPLEMENTED) => {
                ApiError::BadRequest("Unavailable console type serial.".into())
            }
            Some(code::INVALID_TRANSITION) => {
                ApiError::Conflict(format!("Instance {id} is not ready"))
            }
            _ => ApiError::internal(format!("get_serial_console on {host}: {e}")),
        }),
    }
}
