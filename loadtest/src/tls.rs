//! How the loadtest's HTTP clients trust an endpoint's certificate: the
//! system's roots (OpenSSL's, through native-tls), plus the certificates
//! of a CA bundle (`[target] ca_file`, else `OS_CACERT`), or no check at
//! all (`[target] insecure`, like the openstack CLI's `--insecure`).
//!
//! Every client of the Compute, Placement, image and identity APIs is
//! built by [`Tls::client`], so none is left with another trust.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::scenario::TargetSpec;

/// The trust settings of a target's clients (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Tls {
    extra_roots: Vec<reqwest::Certificate>,
    insecure: bool,
}

impl Tls {
    /// The settings of a URL target: `ca_file` (else `OS_CACERT`) added
    /// to the trusted roots, and `insecure`, announced by one warning line
    /// on stderr. An error naming the CA file when it cannot be read or
    /// holds no certificate.
    pub fn for_target(t: &TargetSpec) -> Result<Self> {
        Self::new(t.ca_file.as_deref(), t.insecure)
    }

    /// `ca_file` (else `OS_CACERT`) added to the trusted roots, and
    /// `insecure` (announced by one warning line on stderr): the settings
    /// of a target, or of the command-line flags of the same names.
    pub fn new(ca_file: Option<&Path>, insecure: bool) -> Result<Self> {
        let ca_file = ca_file.map(Path::to_path_buf).or_else(|| {
            std::env::var_os("OS_CACERT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let mut tls = match ca_file {
            Some(path) => Self::default().with_ca_file(&path)?,
            None => Self::default(),
        };
        if insecure {
            eprintln!(
                "warning: insecure (target.insecure / --insecure): the certificates of the \
                 target's https endpoints are not verified"
            );
            tls.insecure = true;
        }
        Ok(tls)
    }

    /// These settings with the certificates of the PEM bundle at `path`
    /// trusted as well.
    pub fn with_ca_file(mut self, path: &Path) -> Result<Self> {
        let pem =
            std::fs::read(path).with_context(|| format!("read the CA file {}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("the CA file {} is no PEM bundle", path.display()))?;
        if certs.is_empty() {
            bail!(
                "the CA file {} holds no certificate (expected PEM \
                 \"BEGIN CERTIFICATE\" blocks)",
                path.display()
            );
        }
        self.extra_roots.extend(certs);
        Ok(self)
    }

    /// A client builder with these settings applied: the one place the
    /// loadtest's API clients come from.
    pub fn client(&self) -> reqwest::ClientBuilder {
        let mut b = reqwest::Client::builder();
        for c in &self.extra_roots {
            b = b.add_root_certificate(c.clone());
        }
        if self.insecure {
            b = b
                .danger_accept_invalid_certs(true)
                .danger_accept_invalid_hostnames(true);
        }
        b
    }

    /// A client with these settings and reqwest's defaults otherwise.
    pub fn build(&self) -> Result<reqwest::Client> {
        self.client().build().context("build the HTTP client")
    }
}
