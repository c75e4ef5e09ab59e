//! `loadtest guests`: real guests on a region with libvirt hosts
//! (`scripts/region-libvirt.sh`), measured from the API: the time from
//! `POST /servers` to ACTIVE and to the guest's marker line in its console
//! output, for one guest with a cold image cache (the host's `_base`
//! emptied first), one with a warm cache, then `count` guests at once on
//! the host; and the memory the host's qemu processes hold per guest.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::api::{self, Compute, Created};
use crate::tls::Tls;

/// What `loadtest guests` is told.
#[derive(Debug, Clone, clap::Args)]
pub struct GuestsArgs {
    /// Identity's URL.
    #[arg(long, default_value = "http://127.0.0.1:5000/v3")]
    pub auth_url: String,
    /// User (the region's admin, whose password `OS_PASSWORD` holds).
    #[arg(long, default_value = "admin")]
    pub username: String,
    /// Project.
    #[arg(long, default_value = "admin")]
    pub project: String,
    /// Image to boot.
    #[arg(long, default_value = "cells-guest")]
    pub image: String,
    /// Flavor.
    #[arg(long, default_value = "m1.tiny")]
    pub flavor: String,
    /// The line the guest prints once it is up.
    #[arg(long, default_value = "CELLS-GUEST-UP")]
    pub marker: String,
    /// Guests booted at once in the last phase.
    #[arg(long, default_value_t = 10)]
    pub count: usize,
    /// The host's instances path: its `_base` is emptied before the cold
    /// boot (without it, the first boot is reported as it comes).
    #[arg(long)]
    pub instances_path: Option<PathBuf>,
    /// Write the figures as JSON here too.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One guest's figures.
#[derive(Debug, Clone, Copy)]
pub struct GuestTimes {
    /// `POST /servers` to ACTIVE.
    pub to_active: Duration,
    /// `POST /servers` to the marker in the console output.
    pub to_marker: Duration,
}

async fn boot_one(
    c: &Compute,
    name: &str,
    flavor: &str,
    image: &str,
    marker: &str,
) -> Result<(String, GuestTimes)> {
    let t = Instant::now();
    let id = match c.create(name, flavor, image, (None, None, None)).await? {
        Created::Accepted(id) => id,
        Created::Refused(s, b) => bail!("POST /servers {name}: HTTP {s}: {b}"),
    };
    let deadline = Duration::from_secs(300);
    let to_active = loop {
        let s = c.show(&id).await?.context("the server vanished")?;
        match s.status.as_str() {
            "ACTIVE" => break t.elapsed(),
            "ERROR" => bail!("{name} went to ERROR: {:?}", s.fault),
            _ if t.elapsed() > deadline => bail!("{name} not ACTIVE after {deadline:?}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let to_marker = loop {
        if c.console_output(&id).await?.contains(marker) {
            break t.elapsed();
        }
        if t.elapsed() > deadline {
            bail!("{name}: no {marker} after {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Ok((
        id,
        GuestTimes {
            to_active,
            to_marker,
        },
    ))
}

async fn delete_all(c: &Compute, ids: &[String]) -> Result<()> {
    for id in ids {
        c.delete(id).await?;
    }
    let t = Instant::now();
    for id in ids {
        while c.show(id).await?.is_some() {
            if t.elapsed() > Duration::from_secs(120) {
                bail!("{id} still there 120 s after its delete");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Resident memory (KiB) of the qemu process running instance `id`.
fn qemu_rss_kib(id: &str) -> Option<u64> {
    let needle = format!("instance-{id}");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.contains("qemu-system") && cmd.contains(&needle) {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
        }
    }
    None
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Runs the three phases and prints the figures.
pub async fn run(a: GuestsArgs) -> Result<()> {
    let tls = Tls::default();
    let password = std::env::var("OS_PASSWORD").context("OS_PASSWORD holds the user's password")?;
    let login = fabric::login::ServiceCredentials {
        auth_url: a.auth_url.clone(),
        username: a.username.clone(),
        password,
        project_name: a.project.clone(),
        ..Default::default()
    };
    let token = api::password_login(&tls, &login).await?;
    let identity = a
        .auth_url
        .trim_end_matches('/')
        .trim_end_matches("/v3")
        .to_owned();
    let compute_url = api::catalog_url(&tls, &identity, &token, "compute").await?;
    let image_url = api::catalog_url(&tls, &identity, &token, "image").await?;
    let c = Compute::new(&compute_url, &token, &tls)?;
    let image = api::image_id_by_name(&tls, &image_url, &token, &a.image).await?;
    let flavor = c.flavor_id(&a.flavor).await?;

    // Cold: the host's image cache emptied.
    if let Some(p) = &a.instances_path {
        let base = p.join("_base");
        if let Ok(rd) = std::fs::read_dir(&base) {
            for e in rd.flatten() {
                std::fs::remove_file(e.path())
                    .with_context(|| format!("empty {}", base.display()))?;
            }
        }
    }
    let (id, cold) = boot_one(&c, "bench-cold", &flavor, &image, &a.marker).await?;
    delete_all(&c, &[id]).await?;
    eprintln!(
        "cold: ACTIVE {:.1} ms, marker {:.1} ms",
        ms(cold.to_active),
        ms(cold.to_marker)
    );
    let (id, warm) = boot_one(&c, "bench-warm", &flavor, &image, &a.marker).await?;
    delete_all(&c, &[id]).await?;
    eprintln!(
        "warm: ACTIVE {:.1} ms, marker {:.1} ms",
        ms(warm.to_active),
        ms(warm.to_marker)
    );

    // `count` at once.
    let t = Instant::now();
    let boots = (0..a.count).map(|i| {
        let (c, flavor, image, marker) = (&c, &flavor, &image, &a.marker);
        async move { boot_one(c, &format!("bench-{i:02}"), flavor, image, marker).await }
    });
    let results = futures_util::future::join_all(boots).await;
    let all = t.elapsed();
    let mut ids = Vec::new();
    let mut times = Vec::new();
    for r in results {
        match r {
            Ok((id, g)) => {
                ids.push(id);
                times.push(g);
            }
            Err(e) => eprintln!("a guest failed: {e:#}"),
        }
    }
    let rss: Vec<u64> = ids.iter().filter_map(|id| qemu_rss_kib(id)).collect();
    delete_all(&c, &ids).await?;
    if times.len() != a.count {
        bail!("{} of {} guests came up", times.len(), a.count);
    }
    let mut active: Vec<f64> = times.iter().map(|g| ms(g.to_active)).collect();
    let mut marker: Vec<f64> = times.iter().map(|g| ms(g.to_marker)).collect();
    active.sort_by(f64::total_cmp);
    marker.sort_by(f64::total_cmp);
    let median = |v: &[f64]| v[v.len() / 2];
    let rss_mib: Vec<f64> = rss
        .iter()
        .map(|k| (*k as f64 / 102.4).round() / 10.0)
        .collect();
    let out = json!({
        "cold": {"to_active_ms": ms(cold.to_active), "to_marker_ms": ms(cold.to_marker)},
        "warm": {"to_active_ms": ms(warm.to_active), "to_marker_ms": ms(warm.to_marker)},
        "at_once": {
            "count": a.count,
            "all_markers_ms": ms(all),
            "to_active_ms": {"min": active[0], "median": median(&active), "max": active[active.len() - 1]},
            "to_marker_ms": {"min": marker[0], "median": median(&marker), "max": marker[marker.len() - 1]},
            "qemu_rss_mib_per_guest": rss_mib,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_vec_pretty(&out)?)?;
    }
    Ok(())
}
