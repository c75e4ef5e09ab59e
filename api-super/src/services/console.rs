//! A guest's consoles, asked of the compute that runs it over the cell's
//! bus: its console log (`get_console_output`, control characters
//! replaced as Nova does), and where its serial console or its VNC server
//! listens (`get_serial_console`, `get_vnc_console`), for which a token of
//! [`ConsoleTokens`] is minted.

use std::time::Duration;

use cell_mapping::CellMapping;
use fabric::bus::BusError;
use fabric::rpc::{self, code, method, RequestIds};

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::servers::lookup::{find, Found};
use crate::compute_api::{App, Ctx};

/// How long the compute may take to answer.
pub const CONSOLE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A server's guest on its compute: where console calls go.
pub struct Guest {
    cell: CellMapping,
    host: String,
    id: String,
    ids: RequestIds,
}

/// The server `id` the caller may use under `rule`, on its compute; a
/// build not landed yet or an instance without a host is a 409.
pub async fn locate(app: &App, ctx: &Ctx, id: &str, rule: &str) -> ApiResult<Guest> {
    let not_ready = || ApiError::Conflict(format!("Instance {id} is not ready"));
    let (cell, s) = match find(app, ctx, id, rule).await? {
        Found::Build(_) => return Err(not_ready()),
        Found::Cell(cell, s) => (cell, s),
    };
    let host = s.host.ok_or_else(not_ready)?;
    Ok(Guest {
        cell,
        host,
        id: id.to_owned(),
        ids: RequestIds {
            request_id: ctx.request_id.clone(),
            global_request_id: ctx.request_id.clone(),
        },
    })
}

impl Guest {
    /// Calls `method` on the guest's compute; a refusal becomes the API's
    /// error: no such guest 404, the driver has no such console
    /// `unsupported`, the guest not running 409, anything else 500.
    async fn call<Req: prost::Message, Resp: prost::Message + Default>(
        &self,
        app: &App,
        method: &str,
        req: &Req,
        unsupported: ApiError,
    ) -> ApiResult<Resp> {
        let bus = app.cells.bus(&self.cell).await?;
        let queue = rpc::compute_queue(&self.host);
        let res = rpc::call(
            bus.as_ref(),
            &queue,
            method,
            req,
            &self.ids,
            CONSOLE_CALL_TIMEOUT,
        )
        .await;
        res.map_err(|e| match e.remote_code() {
            Some(code::NOT_FOUND) => {
                ApiError::NotFound("Guest does not have a console available.".into())
            }
            Some(code::NOT_IMPLEMENTED) => unsupported,
            Some(code::INVALID_TRANSITION) => {
                ApiError::Conflict(format!("Instance {} is not ready", self.id))
            }
            _ => {
                if let rpc::RpcError::Bus(BusError::Timeout(_)) = &e {
                    tracing::warn!(instance = %self.id, host = %self.host, method, "the compute did not answer in time");
                }
                ApiError::internal(format!("{method} on {}: {e}", self.host))
            }
        })
    }

    /// The last `tail_lines` lines (0: all the compute keeps, at most
    /// 100 KiB) of the guest's console log, as Nova's API answers them.
    pub async fn output(&self, app: &App, tail_lines: u32) -> ApiResult<String> {
        let req = rpc::ConsoleOutputRequest {
            instance_uuid: self.id.clone(),
            tail_lines,
        };
        let unsupported = ApiError::NotImplemented("Unable to get console".into());
        let o: rpc::ConsoleOutput = self
            .call(app, method::GET_CONSOLE_OUTPUT, &req, unsupported)
            .await?;
        Ok(printable(&o.output))
    }

    /// A token for this process's proxy of `kind` to the guest's console.
    pub async fn token(&self, app: &App, kind: ConsoleKind) -> ApiResult<String> {
        let req = rpc::SerialConsoleRequest {
            instance_uuid: self.id.clone(),
        };
        let unsupported =
            ApiError::BadRequest(format!("Unavailable console type {}.", kind.name()));
        let method = match kind {
            ConsoleKind::Serial => method::GET_SERIAL_CONSOLE,
            ConsoleKind::Novnc => method::GET_VNC_CONSOLE,
        };
        let c: rpc::SerialConsole = self.call(app, method, &req, unsupported).await?;
        let bad = |what: String| ApiError::internal(format!("{} answered {what}", self.host));
        let ip: std::net::IpAddr = c
            .host
            .parse()
            .map_err(|_| bad(format!("a console address {:?}", c.host)))?;
        let port = u16::try_from(c.port).map_err(|_| bad(format!("a console port {}", c.port)))?;
        let target = ConsoleTarget {
            kind,
            instance_uuid: self.id.clone(),
            host: self.host.clone(),
            addr: std::net::SocketAddr::new(ip, port),
        };
        app.consoles.mint(target).await?.ok_or_else(|| {
            ApiError::Conflict("Too many console tokens are live; try again later.".into())
        })
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

/// A console a token is for; each proxy takes its own kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleKind {
    /// The serial console (Nova's `serial`).
    Serial,
    /// The VNC server, for noVNC (Nova's `novnc`).
    Novnc,
}

impl ConsoleKind {
    /// Nova's name of the console type.
    pub fn name(self) -> &'static str {
        match self {
            Self::Serial => "serial",
            Self::Novnc => "novnc",
        }
    }
}

/// Where a console token leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleTarget {
    /// The console.
    pub kind: ConsoleKind,
    /// The instance.
    pub instance_uuid: String,
    /// The compute host (service host name).
    pub host: String,
    /// Where the console listens on that host.
    pub addr: std::net::SocketAddr,
}

/// Console auth tokens (Nova's `console_auth_tokens`) in the API
/// database, so that the proxy of any API process takes a token any of
/// them minted: held as SHA-256 hashes, valid for `ttl`, about `max` live
/// at once (expired ones are removed when a token is minted; a full store
/// refuses new ones rather than growing), a deleted server's removed with
/// it.
#[derive(Debug, Clone)]
pub struct ConsoleTokens {
    db: crate::compute_api::db::ComputeDb,
    ttl: Duration,
    max: i64,
}

fn token_hash(token: &str) -> String {
    use sha2::Digest as _;
    format!("{:x}", sha2::Sha256::digest(token.as_bytes()))
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl ConsoleTokens {
    /// A store in `db` whose tokens live `ttl`, about `max` of them.
    pub fn new(db: crate::compute_api::db::ComputeDb, ttl: Duration, max: i64) -> Self {
        Self { db, ttl, max }
    }

    /// A new token for `target` (256 random bits, hex), or `None` when the
    /// store is full of live tokens.
    pub async fn mint(&self, target: ConsoleTarget) -> ApiResult<Option<String>> {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let row = crate::compute_api::db::ConsoleTokenRow {
            console_type: target.kind.name().to_owned(),
            instance_uuid: target.instance_uuid,
            host: target.host,
            address: target.addr.ip().to_string(),
            port: i32::from(target.addr.port()),
        };
        let now = unix_now();
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let stored = self
            .db
            .console_token_insert(
                &token_hash(&token),
                &row,
                now,
                now.saturating_add(ttl),
                self.max,
            )
            .await?;
        Ok(stored.then_some(token))
    }

    /// What `token` leads to, while it is valid.
    pub async fn check(&self, token: &str) -> ApiResult<Option<ConsoleTarget>> {
        let Some(r) = self
            .db
            .console_token(&token_hash(token), unix_now())
            .await?
        else {
            return Ok(None);
        };
        let kind = match r.console_type.as_str() {
            "serial" => ConsoleKind::Serial,
            "novnc" => ConsoleKind::Novnc,
            _ => return Ok(None),
        };
        let (Ok(ip), Ok(port)) = (r.address.parse(), u16::try_from(r.port)) else {
            return Ok(None);
        };
        Ok(Some(ConsoleTarget {
            kind,
            instance_uuid: r.instance_uuid,
            host: r.host,
            addr: std::net::SocketAddr::new(ip, port),
        }))
    }

    /// Forgets the tokens of `instance` (its delete).
    pub async fn forget_instance(&self, instance: &str) -> ApiResult<u64> {
        self.db.console_tokens_delete(instance).await
    }
}
