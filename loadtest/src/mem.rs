//! This process's memory, from `/proc/self/status` (Linux).

use serde::Serialize;

/// Resident set size now and at its peak, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Rss {
    /// `VmRSS`.
    pub rss_bytes: u64,
    /// `VmHWM` (the peak).
    pub peak_bytes: u64,
}

/// Reads `VmRSS` / `VmHWM` (zeros when not on Linux).
pub fn read() -> Rss {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| parse(&s))
        .unwrap_or_default()
}

/// Parses the `kB` lines of a `/proc/<pid>/status`.
pub fn parse(status: &str) -> Rss {
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    Rss {
        rss_bytes: field("VmRSS:"),
        peak_bytes: field("VmHWM:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let r = parse("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n");
        assert_eq!(r.rss_bytes, 1024 * 1024);
        assert_eq!(r.peak_bytes, 2048 * 1024);
        if cfg!(target_os = "linux") {
            assert!(read().rss_bytes > 0);
        }
    }
}
