//! The fake driver: guests are entries in a map.
//!
//! One [`FakeHypervisor`] controls every fake host of a process (a test, the
//! embedded region); [`FakeHypervisor::driver`] hands out the per-host
//! [`Driver`]. Two modes:
//!
//! - **automatic**: a spawn succeeds after the configured latency;
//! - **explicit**: a spawn waits until the test decides, per instance,
//!   with [`FakeHypervisor::finish_spawn`] (see [`FakeHypervisor::spawn_requested`]).
//!
//! In both modes, per-host knobs make a host's spawns fail
//! ([`FakeHypervisor::fail_spawns`]), fail with a probability
//! ([`FakeHypervisor::fail_spawn_share`]) or take longer ([`FakeHypervisor::delay_spawns`]).
//! The same knobs apply to the power and rebuild operations of
//! [`Driver::perform`] (stop, start, reboot, pause, suspend, rebuild, …),
//! which never wait for a decision, in either mode: they change the
//! guest's power state (running, shutdown, paused, suspended).
//! A per-host driver is two small fields (an `Arc` and the host name); the
//! shared state holds the guests.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fabric::ids::InstanceUuid;
use fabric::rpc::power_state;
use futures_util::future::BoxFuture;
use tokio::sync::{oneshot, watch};

use super::{Driver, DriverError, GuestOp, SpawnSpec};

/// How spawns end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Spawns succeed after the latency.
    Automatic,
    /// Spawns wait for [`FakeHypervisor::finish_spawn`].
    Explicit,
}

#[derive(Debug, Default, Clone)]
struct Knobs {
    fail: Option<String>,
    /// Share of spawns that fail, with this message.
    fail_share: Option<(f64, String)>,
    delay: Option<Duration>,
    list_error: Option<String>,
}

/// The architecture a fake host reports unless told otherwise.
pub const DEFAULT_ARCHITECTURE: &str = "x86_64";

#[derive(Debug)]
struct State {
    mode: Mode,
    latency: Duration,
    knobs: HashMap<String, Knobs>,
    /// Per-host architecture (absent: [`DEFAULT_ARCHITECTURE`]).
    architectures: HashMap<String, String>,
    guests: HashMap<String, HashMap<InstanceUuid, i32>>,
    /// How often the agents sync power states (none: never).
    power_sync: Option<Duration>,
    pending: HashMap<InstanceUuid, (String, oneshot::Sender<Result<(), String>>)>,
    /// The config drives of the guests that have one (path, contents).
    config_drives: HashMap<InstanceUuid, crate::config_drive::Files>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// The fake guests' serial console: one echo server for all of them,
    /// started on first use.
    serial: tokio::sync::OnceCell<std::net::SocketAddr>,
    vnc: tokio::sync::OnceCell<std::net::SocketAddr>,
    /// Bumped whenever a spawn starts waiting (explicit mode).
    changed: watch::Sender<u64>,
    /// Spawns failed by a knob ([`FakeHypervisor::injected_failures`]).
    injected: AtomicU64,
}

/// The controller of every fake host in the process.
#[derive(Debug, Clone)]
pub struct FakeHypervisor {
    shared: Arc<Shared>,
}

impl FakeHypervisor {
    /// A fake hypervisor in `mode`; automatic spawns take `latency`.
    pub fn new(mode: Mode, latency: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    mode,
                    latency,
                    knobs: HashMap::new(),
                    architectures: HashMap::new(),
                    guests: HashMap::new(),
                    power_sync: None,
                    pending: HashMap::new(),
                    config_drives: HashMap::new(),
                }),
                changed: watch::channel(0).0,
                serial: tokio::sync::OnceCell::new(),
                vnc: tokio::sync::OnceCell::new(),
                injected: AtomicU64::new(0),
            }),
        }
    }

    /// Automatic mode with `latency`.
    pub fn automatic(latency: Duration) -> Self {
        Self::new(Mode::Automatic, latency)
    }

    /// Explicit mode.
    pub fn explicit() -> Self {
        Self::new(Mode::Explicit, Duration::ZERO)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The driver of fake host `host`.
    pub fn driver(&self, host: &str) -> Arc<dyn Driver> {
        Arc::new(FakeDriver {
            hv: self.clone(),
            host: host.to_owned(),
        })
    }

    /// Switches the mode (spawns already waiting keep waiting).
    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// Makes every later spawn on `host` fail with `message`.
    pub fn fail_spawns(&self, host: &str, message: &str) {
        self.lock().knobs.entry(host.to_owned()).or_default().fail = Some(message.to_owned());
    }

    /// Makes each later spawn on `host` fail with probability `share`
    /// (0..=1) and `message`. The draw is a hash of the instance and the
    /// host: independent per spawn (a reschedule onto another host draws
    /// again), the same for the same instance on the same host, and free
    /// of shared random state.
    pub fn fail_spawn_share(&self, host: &str, share: f64, message: &str) {
        self.lock()
            .knobs
            .entry(host.to_owned())
            .or_default()
            .fail_share = Some((share, message.to_owned()));
    }

    /// Spawns that failed because a knob said so
    /// ([`FakeHypervisor::fail_spawns`], [`FakeHypervisor::fail_spawn_share`]);
    /// explicit-mode decisions are not counted.
    pub fn injected_failures(&self) -> u64 {
        self.shared.injected.load(Ordering::Relaxed)
    }

    /// Makes listing `host`'s guests fail with `message` (a hypervisor that
    /// cannot be reached).
    pub fn fail_listing(&self, host: &str, message: &str) {
        self.lock()
            .knobs
            .entry(host.to_owned())
            .or_default()
            .list_error = Some(message.to_owned());
    }

    /// Makes every later spawn on `host` take `delay` longer.
    pub fn delay_spawns(&self, host: &str, delay: Duration) {
        self.lock().knobs.entry(host.to_owned()).or_default().delay = Some(delay);
    }

    /// The architecture `host` reports (`aarch64`, `ppc64le`, …) in its
    /// supported instances; read when the host registers its node, so set
    /// it before the host starts.
    pub fn set_architecture(&self, host: &str, arch: &str) {
        self.lock()
            .architectures
            .insert(host.to_owned(), arch.to_owned());
    }

    /// The address of the fake guests' serial console: a TCP server on
    /// 127.0.0.1 that echoes what it is sent, prefixed by `fake-console: `
    /// on connect (started on first use, for the life of the process).
    pub async fn serial_console_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.shared
            .serial
            .get_or_try_init(|| console_server(b"fake-console: ", true))
            .await
            .copied()
    }

    /// The address of the fake guests' VNC server: a TCP server on
    /// 127.0.0.1 that sends an RFB 3.8 server's greeting
    /// (`RFB 003.008\n`) on connect and reads what it is sent (started on
    /// first use, for the life of the process).
    pub async fn vnc_console_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.shared
            .vnc
            .get_or_try_init(|| console_server(b"RFB 003.008\n", false))
            .await
            .copied()
    }

    /// Makes the agents of hosts started after this sync their guests'
    /// power states every `every` (as the libvirt driver's do), so that
    /// [`FakeHypervisor::set_guest_power`] is noticed.
    pub fn sync_power_states(&self, every: Duration) {
        self.lock().power_sync = Some(every);
    }

    /// Changes a guest's power state behind the agent's back (a guest
    /// that shuts itself down, crashes, or is started by hand); false
    /// when `host` has no such guest.
    pub fn set_guest_power(&self, host: &str, instance: InstanceUuid, state: i32) -> bool {
        match self
            .lock()
            .guests
            .get_mut(host)
            .and_then(|g| g.get_mut(&instance))
        {
            Some(p) => {
                *p = state;
                true
            }
            None => false,
        }
    }

    /// Clears the knobs of `host`.
    pub fn reset_host(&self, host: &str) {
        self.lock().knobs.remove(host);
    }

    /// Waits until a spawn of `instance` waits for a decision (explicit
    /// mode); returns the host it runs on.
    pub async fn spawn_requested(&self, instance: InstanceUuid) -> String {
        let mut rx = self.shared.changed.subscribe();
        loop {
            if let Some((host, _)) = self.lock().pending.get(&instance) {
                return host.clone();
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Decides a waiting spawn: `Ok(())` succeeds, `Err(msg)` fails with
    /// `msg`. Returns whether a spawn was waiting.
    pub fn finish_spawn(&self, instance: InstanceUuid, result: Result<(), String>) -> bool {
        match self.lock().pending.remove(&instance) {
            Some((_, tx)) => tx.send(result).is_ok(),
            None => false,
        }
    }

    /// The power state of `instance` on `host` (`None`: no such guest).
    pub fn guest_power_state(&self, host: &str, instance: InstanceUuid) -> Option<i32> {
        self.lock()
            .guests
            .get(host)
            .and_then(|g| g.get(&instance).copied())
    }

    async fn perform(
        &self,
        host: &str,
        instance: InstanceUuid,
        op: &GuestOp,
    ) -> Result<(), DriverError> {
        let knobs = self.lock().knobs.get(host).cloned().unwrap_or_default();
        if let Some(d) = knobs.delay {
            tokio::time::sleep(d).await;
        }
        if let Some(message) = knobs.fail {
            return Err(DriverError::OperationFailed {
                op: op.name(),
                message,
            });
        }
        let mut s = self.lock();
        let guest = s
            .guests
            .get_mut(host)
            .and_then(|g| g.get_mut(&instance))
            .ok_or(DriverError::NotFound(instance))?;
        *guest = match op {
            GuestOp::PowerOff => power_state::SHUTDOWN,
            GuestOp::Pause => power_state::PAUSED,
            GuestOp::Suspend => power_state::SUSPENDED,
            GuestOp::PowerOn
            | GuestOp::Reboot { .. }
            | GuestOp::Unpause
            | GuestOp::Resume
            | GuestOp::Rebuild { .. } => power_state::RUNNING,
        };
        Ok(())
    }

    /// The guests of `host`.
    pub fn guests(&self, host: &str) -> Vec<InstanceUuid> {
        let mut v: Vec<_> = self
            .lock()
            .guests
            .get(host)
            .map(|g| g.keys().copied().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The files of `instance`'s config drive (path, contents), while its
    /// guest is on a host; `None` when it has none.
    pub fn config_drive(&self, instance: InstanceUuid) -> Option<crate::config_drive::Files> {
        self.lock().config_drives.get(&instance).cloned()
    }

    async fn spawn(&self, host: &str, spec: &SpawnSpec) -> Result<(), DriverError> {
        let config_drive = spec.config_drive()?;
        let (mode, latency, knobs) = {
            let s = self.lock();
            (
                s.mode,
                s.latency,
                s.knobs.get(host).cloned().unwrap_or_default(),
            )
        };
        if let Some(d) = knobs.delay {
            tokio::time::sleep(d).await;
        }
        let drawn = knobs
            .fail_share
            .filter(|(share, _)| spawn_draw(host, spec.instance) < *share)
            .map(|(_, msg)| msg);
        if let Some(msg) = knobs.fail.or(drawn) {
            self.shared.injected.fetch_add(1, Ordering::Relaxed);
            return Err(DriverError::SpawnFailed(msg));
        }
        match mode {
            Mode::Automatic => {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
            }
            Mode::Explicit => {
                let (tx, rx) = oneshot::channel();
                self.lock()
                    .pending
                    .insert(spec.instance, (host.to_owned(), tx));
                self.shared.changed.send_modify(|n| *n += 1);
                match rx.await {
                    Ok(Ok(())) => {}
                    Ok(Err(msg)) => return Err(DriverError::SpawnFailed(msg)),
                    Err(_) => return Err(DriverError::SpawnFailed("spawn abandoned".into())),
                }
            }
        }
        let mut s = self.lock();
        s.guests
            .entry(host.to_owned())
            .or_default()
            .insert(spec.instance, power_state::RUNNING);
        match config_drive {
            Some(files) => s.config_drives.insert(spec.instance, files),
            None => s.config_drives.remove(&spec.instance),
        };
        Ok(())
    }
}

/// A number in [0, 1) fixed by `host` and `instance`.
fn spawn_draw(host: &str, instance: InstanceUuid) -> f64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    host.hash(&mut h);
    instance.hash(&mut h);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// One fake host's driver.
#[derive(Debug)]
struct FakeDriver {
    hv: FakeHypervisor,
    host: String,
}

impl FakeDriver {
    /// `Ok` when `instance`'s guest runs here.
    fn running(&self, instance: InstanceUuid) -> Result<(), DriverError> {
        let state = self
            .hv
            .lock()
            .guests
            .get(&self.host)
            .and_then(|g| g.get(&instance).copied());
        match state {
            None => Err(DriverError::NotFound(instance)),
            Some(p) if p != power_state::RUNNING => Err(DriverError::NotRunning(instance)),
            Some(_) => Ok(()),
        }
    }
}

impl Driver for FakeDriver {
    fn hypervisor_type(&self) -> &'static str {
        "fake"
    }

    /// One triple, as Nova's fake driver: the host's architecture
    /// ([`FakeHypervisor::set_architecture`], default `x86_64`), `fake`,
    /// `hvm`.
    fn supported_instances(&self) -> Vec<[String; 3]> {
        let arch = self
            .hv
            .lock()
            .architectures
            .get(&self.host)
            .cloned()
            .unwrap_or_else(|| DEFAULT_ARCHITECTURE.to_owned());
        vec![[arch, "fake".to_owned(), "hvm".to_owned()]]
    }

    /// As Nova's fake driver: three fixed lines, for a guest that exists.
    fn console_output(
        &self,
        instance: InstanceUuid,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, DriverError>> {
        let here = self
            .hv
            .lock()
            .guests
            .get(&self.host)
            .is_some_and(|g| g.contains_key(&instance));
        Box::pin(async move {
            if !here {
                return Err(DriverError::NotFound(instance));
            }
            let text = b"FAKE CONSOLE OUTPUT\nANOTHER\nLAST LINE\n";
            Ok(text[text.len().saturating_sub(max_bytes)..].to_vec())
        })
    }

    fn power_sync_interval(&self) -> Option<Duration> {
        self.hv.lock().power_sync
    }

    /// Nova's fake driver's values, for a running guest.
    fn diagnostics(
        &self,
        instance: InstanceUuid,
        standard: bool,
    ) -> BoxFuture<'_, Result<serde_json::Value, DriverError>> {
        Box::pin(async move {
            self.running(instance)?;
            Ok(if standard {
                crate::diagnostics::fake_instance_diagnostics()
            } else {
                crate::diagnostics::fake_diagnostics()
            })
        })
    }

    /// An echo server standing in for the guest's serial console.
    fn serial_console(
        &self,
        instance: InstanceUuid,
    ) -> BoxFuture<'_, Result<std::net::SocketAddr, DriverError>> {
        Box::pin(async move {
            self.running(instance)?;
            let addr = self.hv.serial_console_addr().await;
            addr.map_err(|e| DriverError::Unavailable(format!("fake console: {e}")))
        })
    }

    /// A server that greets as an RFB 3.8 server, standing in for the
    /// guest's VNC server.
    fn vnc_console(
        &self,
        instance: InstanceUuid,
    ) -> BoxFuture<'_, Result<std::net::SocketAddr, DriverError>> {
        Box::pin(async move {
            self.running(instance)?;
            let addr = self.hv.vnc_console_addr().await;
            addr.map_err(|e| DriverError::Unavailable(format!("fake VNC server: {e}")))
        })
    }

    fn spawn<'a>(&'a self, spec: &'a SpawnSpec) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(self.hv.spawn(&self.host, spec))
    }

    fn destroy(&self, instance: InstanceUuid) -> BoxFuture<'_, Result<(), DriverError>> {
        let mut s = self.hv.lock();
        if let Some(g) = s.guests.get_mut(&self.host) {
            if g.remove(&instance).is_some() {
                s.config_drives.remove(&instance);
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn power_state(&self, instance: InstanceUuid) -> i32 {
        self.hv
            .lock()
            .guests
            .get(&self.host)
            .and_then(|g| g.get(&instance).copied())
            .unwrap_or(power_state::NOSTATE)
    }

    fn list(&self) -> Result<Vec<InstanceUuid>, DriverError> {
        let failure = self
            .hv
            .lock()
            .knobs
            .get(&self.host)
            .and_then(|k| k.list_error.clone());
        match failure {
            Some(message) => Err(DriverError::Unavailable(message)),
            None => Ok(self.hv.guests(&self.host)),
        }
    }

    fn perform<'a>(
        &'a self,
        instance: InstanceUuid,
        op: &'a GuestOp,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(self.hv.perform(&self.host, instance, op))
    }
}

/// A TCP server on 127.0.0.1 that sends `greeting` on connect, then
/// echoes what it is sent (`echo`) or reads and drops it; it runs for the
/// life of the process.
async fn console_server(
    greeting: &'static [u8],
    echo: bool,
) -> std::io::Result<std::net::SocketAddr> {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(greeting).await;
                let (mut r, mut w) = s.split();
                if echo {
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                } else {
                    let _ = tokio::io::copy(&mut r, &mut tokio::io::sink()).await;
                }
            });
        }
    });
    Ok(addr)
}
