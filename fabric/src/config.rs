//! Configuration: one TOML file per service, with environment overrides.
//!
//! Every service describes its options as a serde struct whose fields all
//! have defaults (`#[serde(default)]`), so an empty file — or none — is a
//! valid configuration. [`load`] reads, in order:
//!
//! 1. the defaults of the struct;
//! 2. the TOML file given on the command line, or named by `<PREFIX>_CONFIG`;
//! 3. environment overrides `<PREFIX>__<SECTION>__<KEY>=value` (double
//!    underscores separate the levels; names are matched in lower case). The
//!    value is read as a TOML value when it parses as one (`8778`, `true`,
//!    `["a", "b"]`), and as a string otherwise.
//!
//! Unknown keys are errors in the service structs (`deny_unknown_fields`), so
//! a misspelt option is reported instead of silently ignored. Every option
//! and its default is listed in `docs/CONFIG.md`.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, or does not match the options.
    #[error("invalid configuration in {origin}")]
    Invalid {
        /// The file, or "environment".
        origin: String,
        /// The cause (names the key and the line).
        #[source]
        source: toml::de::Error,
    },
    /// An environment override names a key below a non-table value.
    #[error("environment override {var} conflicts with the value of {key}")]
    Override {
        /// The variable.
        var: String,
        /// The key that is not a table.
        key: String,
    },
}

/// Loads a configuration of type `T` for the service whose environment
/// prefix is `prefix` (e.g. `PLACEMENT`), from `path` if given.
pub fn load<T: DeserializeOwned>(prefix: &str, path: Option<&Path>) -> Result<T, ConfigError> {
    load_from(prefix, path, std::env::vars())
}

/// As [`load`], with the environment given explicitly (for tests).
pub fn load_from<T: DeserializeOwned>(
    prefix: &str,
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<T, ConfigError> {
    let env: Vec<(String, String)> = env.into_iter().collect();
    let file_var = format!("{prefix}_CONFIG");
    let path: Option<PathBuf> = path.map(Path::to_path_buf).or_else(|| {
        env.iter()
            .find(|(k, _)| *k == file_var)
            .map(|(_, v)| PathBuf::from(v))
    });
    let (mut table, origin) = match &path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.clone(),
                source,
            })?;
            let table: toml::Table = text.parse().map_err(|source| ConfigError::Invalid {
                origin: p.display().to_string(),
                source,
            })?;
            (table, p.display().to_string())
        }
        None => (toml::Table::new(), "defaults".to_owned()),
    };
    let var_prefix = format!("{prefix}__");
    let mut overridden = false;
    for (var, value) in &env {
        let Some(rest) = var.strip_prefix(&var_prefix) else {
            continue;
        };
        let keys: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        set_path(&mut table, &keys, parse_value(value)).map_err(|key| ConfigError::Override {
            var: var.clone(),
            key,
        })?;
        overridden = true;
    }
    let origin = if overridden {
        format!("{origin} + environment")
    } else {
        origin
    };
    T::deserialize(toml::Value::Table(table))
        .map_err(|source| ConfigError::Invalid { origin, source })
}

fn parse_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn set_path(table: &mut toml::Table, keys: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = keys.split_last().expect("split yields at least one key");
    let mut cur = table;
    for k in parents {
        let entry = cur
            .entry(k.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry.as_table_mut().ok_or_else(|| k.clone())?;
    }
    cur.insert(last.clone(), value);
    Ok(())
}

/// Renders a configuration as TOML (for `--print-config` and the docs).
pub fn render<T: Serialize>(cfg: &T) -> String {
    toml::to_string_pretty(cfg).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// The `[telemetry]` section every service shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `human` or `json`.
    pub log_format: LogFormat,
    /// A `tracing` filter directive, e.g. `info` or `info,placement=debug`.
    /// `RUST_LOG`, when set, wins.
    pub log_filter: String,
    /// Where to serve Prometheus metrics at `/metrics` for a process that has
    /// no HTTP API of its own (compute, cell-conductor). Services with an HTTP
    /// API serve `/metrics` on their API port as well. Empty: no listener.
    pub metrics_listen: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Human,
            log_filter: "info".to_owned(),
            metrics_listen: String::new(),
        }
    }
}

/// The `[tls]` section every service shares: what its clients trust.
/// Servers take their certificate in their own `[<service>.http]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// A PEM bundle of CA certificates every client of this process trusts
    /// besides the system's roots (https to identity, placement and image;
    /// `amqps://` to the broker). Empty: the system's roots only.
    pub ca_file: std::path::PathBuf,
}

impl TlsConfig {
    /// Makes the process trust `ca_file` (read and checked now); nothing
    /// when it is empty. Call before any client is built.
    pub fn apply(&self) -> Result<(), crate::http::ClientError> {
        if self.ca_file.as_os_str().is_empty() {
            return Ok(());
        }
        crate::http::trust_ca_file(&self.ca_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Db {
        url: String,
        max_connections: u32,
    }

    #[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Svc {
        listen: String,
        database: Db,
        telemetry: TelemetryConfig,
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_when_nothing_given() {
        let cfg: Svc = load_from("SVC", None, env(&[])).unwrap();
        assert_eq!(cfg, Svc::default());
        assert_eq!(cfg.telemetry.log_filter, "info");
    }

    #[test]
    fn file_then_environment_overrides() {
        let dir = std::env::temp_dir().join(format!("fabric-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("svc.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:1\"\n[database]\nurl = \"sqlite://a\"\nmax_connections = 4\n",
        )
        .unwrap();
        let cfg: Svc = load_from(
            "SVC",
            Some(&file),
            env(&[
                ("SVC__DATABASE__MAX_CONNECTIONS", "16"),
                ("SVC__TELEMETRY__LOG_FORMAT", "json"),
                ("OTHER__LISTEN", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:1");
        assert_eq!(cfg.database.url, "sqlite://a");
        assert_eq!(cfg.database.max_connections, 16);
        assert_eq!(cfg.telemetry.log_format, LogFormat::Json);
        // The file can also be named by <PREFIX>_CONFIG.
        let cfg: Svc =
            load_from("SVC", None, env(&[("SVC_CONFIG", file.to_str().unwrap())])).unwrap();
        assert_eq!(cfg.database.max_connections, 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_keys_and_bad_types_are_reported() {
        let err = load_from::<Svc>("SVC", None, env(&[("SVC__DATABASE__URLL", "x")])).unwrap_err();
        let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(chain.contains("urll"), "{chain}");
        let err = load_from::<Svc>(
            "SVC",
            None,
            env(&[("SVC__DATABASE__MAX_CONNECTIONS", "many")]),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }));
        let err = load_from::<Svc>(
            "SVC",
            None,
            env(&[("SVC__LISTEN", "a"), ("SVC__LISTEN__X", "1")]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment override SVC__LISTEN__X conflicts with the value of listen"
        );
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let err = load_from::<Svc>("SVC", Some(Path::new("/nonexistent/svc.toml")), env(&[]))
            .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/svc.toml"));
    }

    #[test]
    fn render_round_trips() {
        let cfg = Svc::default();
        let text = render(&cfg);
        let back: Svc = toml::from_str(&text).unwrap();
        assert_eq!(back, cfg);
    }
}
