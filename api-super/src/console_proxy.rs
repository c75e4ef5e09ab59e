//! The console proxies (Nova's `nova-serialproxy` and
//! `nova-novncproxy`): a WebSocket endpoint, `ws://<listen>/?token=<token>`,
//! that checks the console token
//! ([`crate::services::console::ConsoleTokens`], in the API database, so
//! any API process's proxy takes it; of the proxy's own kind)
//! and then carries bytes both ways between the WebSocket and the guest's
//! serial console or VNC server (raw TCP on the compute host; noVNC speaks
//! RFB over the WebSocket itself, as websockify carries it). The noVNC
//! proxy also serves noVNC's web client from a directory (Debian's
//! `novnc` package puts it in `/usr/share/novnc`), when there is one. A
//! bad or expired token, or one for another kind of console, is a 401
//! before any upgrade (a 503 when the API database cannot be read); a console that cannot be reached closes the socket
//! with a reason. Each connection's buffers are bounded (one frame in
//! flight each way).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::services::console::{ConsoleKind, ConsoleTarget, ConsoleTokens};

/// How long the proxy waits to reach a console.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(serde::Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// The routes of the proxy of `kind` consoles; `web` a directory whose
/// files it also serves (noVNC's client).
pub fn router(
    tokens: Arc<ConsoleTokens>,
    kind: ConsoleKind,
    web: Option<std::path::PathBuf>,
) -> Router {
    let r = Router::new()
        .route("/", get(upgrade))
        .with_state((tokens, kind));
    match web {
        Some(dir) => r.fallback_service(tower_http::services::ServeDir::new(dir)),
        None => r,
    }
}

async fn upgrade(
    State((tokens, kind)): State<(Arc<ConsoleTokens>, ConsoleKind)>,
    Query(q): Query<TokenQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    let target = match q.token.as_deref() {
        Some(t) => match tokens.check(t).await {
            Ok(target) => target,
            Err(e) => {
                tracing::warn!(error = %e, "console token lookup failed");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The console tokens cannot be read now; try again.\n",
                )
                    .into_response();
            }
        },
        None => None,
    };
    let Some(target) = target.filter(|t| t.kind == kind) else {
        return (
            StatusCode::UNAUTHORIZED,
            "The token is invalid or has expired.\n",
        )
            .into_response();
    };
    // websockify's clients (noVNC, Nova's serial clients) ask for "binary".
    ws.protocols(["binary", "base64"])
        .on_upgrade(move |socket| pump(socket, target))
}

async fn pump(ws: WebSocket, target: ConsoleTarget) {
    let tcp =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(target.addr)).await;
    let tcp = match tcp {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return refuse(ws, target.addr, &e.to_string()).await,
        Err(_) => return refuse(ws, target.addr, "no answer").await,
    };
    let kind = target.kind.name();
    tracing::info!(instance = %target.instance_uuid, host = %target.host, kind, "console connected");
    let (mut rd, mut wr) = tcp.into_split();
    let (mut tx, mut rx) = ws.split();
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send(Message::Binary(buf[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = tx.close().await;
    };
    let up = async {
        while let Some(Ok(m)) = rx.next().await {
            let data = match m {
                Message::Binary(b) => b.to_vec(),
                Message::Text(t) => t.as_str().as_bytes().to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            if wr.write_all(&data).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    };
    // Either side ending ends the session.
    tokio::select! {
        _ = down => {}
        _ = up => {}
    }
    tracing::info!(instance = %target.instance_uuid, kind, "console closed");
}

async fn refuse(mut ws: WebSocket, addr: SocketAddr, why: &str) {
    tracing::warn!(%addr, why, "console unreachable");
    let _ = ws
        .send(Message::Close(Some(axum::extract::ws::CloseFrame {
            code: 1011,
            reason: format!("the console at {addr} cannot be reached: {why}").into(),
        })))
        .await;
}
