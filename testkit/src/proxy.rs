//! A TCP proxy in front of a real server, for tests that take the server
//! away without stopping it for everyone else: point a client at
//! [`TcpProxy::addr`] and switch [`Mode`] to simulate an outage.
//!
//! - [`Mode::Forward`]: bytes go through.
//! - [`Mode::Refuse`]: what a stopped server looks like — the listening
//!   socket is closed (new connections are refused) and the open ones are
//!   closed.
//! - [`Mode::Hang`]: what an unreachable host looks like — new connections
//!   are accepted and never answered, and the open ones stop forwarding.
//!   A connection frozen this way stays frozen until [`Mode::Refuse`]
//!   (or the proxy is dropped) closes it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward.
    Forward,
    /// Closed: connections refused, open ones closed.
    Refuse,
    /// Black hole: connections accepted, nothing forwarded.
    Hang,
}

/// The mode and how many times [`Mode::Refuse`] was set: a connection
/// opened before a refusal closes even if the mode moved on before it
/// noticed.
#[derive(Debug, Clone, Copy)]
struct State {
    mode: Mode,
    refusals: u64,
}

/// A running proxy; dropping it closes everything.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TcpProxy {
    /// A proxy to `target` on a free port of 127.0.0.1, forwarding.
    pub async fn start(target: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (state, rx) = watch::channel(State {
            mode: Mode::Forward,
            refusals: 0,
        });
        let task = tokio::spawn(serve(listener, addr, target, rx));
        TcpProxy { addr, state, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode (effective at once for new and open connections).
    pub fn set(&self, mode: Mode) {
        self.state.send_modify(|s| {
            s.mode = mode;
            if mode == Mode::Refuse {
                s.refusals += 1;
            }
        });
    }
}

/// Waits until the state satisfies `ok`; `false` when the proxy is gone.
async fn wait_for(rx: &mut watch::Receiver<State>, ok: impl Fn(State) -> bool) -> bool {
    rx.wait_for(|s| ok(*s)).await.is_ok()
}

async fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    target: SocketAddr,
    mut rx: watch::Receiver<State>,
) {
    let mut listener = Some(listener);
    loop {
        if rx.borrow_and_update().mode == Mode::Refuse {
            listener = None;
            if !wait_for(&mut rx, |s| s.mode != Mode::Refuse).await {
                return;
            }
            continue;
        }
        let l = match &listener {
            Some(l) => l,
            None => {
                // Listen again on the same port (SO_REUSEADDR is set).
                match TcpListener::bind(addr).await {
                    Ok(l) => listener.insert(l),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                }
            }
        };
        tokio::select! {
            accepted = l.accept() => {
                if let Ok((client, _)) = accepted {
                    tokio::spawn(relay(client, target, rx.clone()));
                }
            }
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// One connection: forwarded while the mode is `Forward`; held without a
/// byte while it is `Hang`; closed by the next `Refuse`.
async fn relay(mut client: TcpStream, target: SocketAddr, mut rx: watch::Receiver<State>) {
    let epoch = rx.borrow().refusals;
    let closed = move |s: State| s.refusals != epoch || s.mode == Mode::Refuse;
    if !wait_for(&mut rx, |s| s.mode != Mode::Hang || closed(s)).await || closed(*rx.borrow()) {
        return;
    }
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => return,
        alive = wait_for(&mut rx, |s| s.mode != Mode::Forward || closed(s)) => {
            if !alive || closed(*rx.borrow()) {
                return;
            }
        }
    }
    // Hang: keep both sockets, forward nothing, until the next Refuse.
    let _ = wait_for(&mut rx, closed).await;
}
