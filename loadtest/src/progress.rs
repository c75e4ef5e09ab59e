//! Live progress on stderr: on a terminal, one line with a bar, done/total,
//! the rate and the ETA, redrawn 5 times a second; otherwise a plain line
//! every 5 seconds.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters a phase bumps; the progress task reads them.
#[derive(Debug, Default)]
pub struct Progress {
    /// Work done (servers out of BUILD, or seconds for timed phases).
    pub done: AtomicU64,
    /// Work planned.
    pub total: AtomicU64,
    /// Servers ERROR (shown next to the rate).
    pub errors: AtomicU64,
    /// Set to stop the task.
    pub finished: AtomicBool,
}

/// One progress line.
pub fn line(label: &str, done: u64, total: u64, errors: u64, elapsed: Duration) -> String {
    let width = 24usize;
    let frac = if total == 0 {
        0.0
    } else {
        (done as f64 / total as f64).min(1.0)
    };
    let filled = (frac * width as f64) as usize;
    let rate = done as f64 / elapsed.as_secs_f64().max(1e-3);
    let eta = if rate > 0.0 && total >= done {
        format!("{:.0}s", (total - done) as f64 / rate)
    } else {
        "?".to_owned()
    };
    format!(
        "{label} [{}{}] {done}/{total} {:>3.0}% | {rate:.1}/s | {errors} errors | {:.0}s elapsed, ETA {eta}",
        "#".repeat(filled),
        "-".repeat(width - filled),
        frac * 100.0,
        elapsed.as_secs_f64()
    )
}

/// Starts the progress task (nothing when `quiet`).
pub fn spawn(label: String, p: Arc<Progress>, quiet: bool) -> Option<tokio::task::JoinHandle<()>> {
    if quiet {
        return None;
    }
    Some(tokio::spawn(async move {
        let tty = std::io::stderr().is_terminal();
        let every = if tty {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(5)
        };
        let started = Instant::now();
        let mut next = started + every;
        loop {
            // Wake often so the last line comes as soon as the work ends.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let stop = p.finished.load(Ordering::Acquire);
            if !stop && Instant::now() < next {
                continue;
            }
            next += every;
            let l = line(
                &label,
                p.done.load(Ordering::Relaxed),
                p.total.load(Ordering::Relaxed),
                p.errors.load(Ordering::Relaxed),
                started.elapsed(),
            );
            let mut err = std::io::stderr().lock();
            if tty {
                let _ = write!(err, "\r\x1b[2K{l}");
                if stop {
                    let _ = writeln!(err);
                }
            } else {
                let _ = writeln!(err, "{l}");
            }
            let _ = err.flush();
            if stop {
                return;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_rate_and_eta() {
        let l = line("boot", 50, 100, 2, Duration::from_secs(10));
        assert!(l.contains("50/100"), "{l}");
        assert!(l.contains("5.0/s"), "{l}");
        assert!(l.contains("ETA 10s"), "{l}");
        assert!(l.contains("2 errors"), "{l}");
    }
}
