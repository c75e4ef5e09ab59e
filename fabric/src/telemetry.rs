//! Telemetry shared by every binary: `tracing` logs (human or JSON) and
//! Prometheus metrics through the `metrics` facade.
//!
//! One process has one log subscriber and one metrics recorder, even when the
//! all-in-one region runs every service in it: [`init`] installs them the
//! first time and hands back the same [`Telemetry`] afterwards. Services with
//! an HTTP API serve [`Telemetry::render`] at `/metrics`; the others ask for
//! the exporter's own listener with `metrics_listen`.

use std::net::SocketAddr;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, TelemetryConfig};

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `metrics_listen` is not a socket address.
    #[error("telemetry.metrics_listen {0:?} is not an address like 127.0.0.1:9100")]
    BadListen(String),
    /// The Prometheus exporter could not be built or bound.
    #[error("cannot start the Prometheus exporter")]
    Exporter(#[source] metrics_exporter_prometheus::BuildError),
}

/// The process's telemetry: a handle on the metrics registry.
#[derive(Clone)]
pub struct Telemetry {
    prometheus: PrometheusHandle,
}

impl Telemetry {
    /// The current metrics in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        self.prometheus.render()
    }
}

static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();

/// Starts logging and metrics for `service` (the first call in a process
/// wins; later calls return the same handle). Must run inside a tokio runtime
/// when `metrics_listen` is set.
pub fn init(service: &'static str, cfg: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
    if let Some(t) = TELEMETRY.get() {
        return Ok(t.clone());
    }
    init_logging(cfg);
    let listen: Option<SocketAddr> = if cfg.metrics_listen.is_empty() {
        None
    } else {
        Some(
            cfg.metrics_listen
                .parse()
                .map_err(|_| TelemetryError::BadListen(cfg.metrics_listen.clone()))?,
        )
    };
    let telemetry = match listen {
        Some(addr) => {
            let (recorder, exporter) = PrometheusBuilder::new()
                .with_http_listener(addr)
                .build()
                .map_err(TelemetryError::Exporter)?;
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_ok() {
                tokio::spawn(async move {
                    if let Err(e) = exporter.await {
                        tracing::error!(error = ?e, "metrics listener stopped");
                    }
                });
                tracing::info!(%addr, "serving Prometheus metrics at /metrics");
            }
            Telemetry { prometheus: handle }
        }
        None => {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            let _ = metrics::set_global_recorder(recorder);
            Telemetry { prometheus: handle }
        }
    };
    let t = TELEMETRY.get_or_init(|| telemetry).clone();
    metrics::gauge!(crate::telemetry::SERVICE_UP, "service" => service).set(1.0);
    Ok(t)
}

/// Gauge set to 1 for every service started in this process.
pub const SERVICE_UP: &str = "service_up";

fn init_logging(cfg: &TelemetryConfig) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.log_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A subscriber may already be set (tests, or an embedding program): keep it.
    let _ = match cfg.log_format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
