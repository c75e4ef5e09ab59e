//! The build cast, tried again on a broker blip: the super-conductor's and
//! the cell conductor's (a reschedule, a healing re-drive) alike.

use std::time::Duration;

use super::{cast, compute_queue, method, BuildAndRunInstance, RequestIds, BUILD_CAST_TTL};
use crate::bus::Transport;

/// A build cast to `host` ([`BUILD_AND_RUN_INSTANCE`](method::BUILD_AND_RUN_INSTANCE),
/// [`BUILD_CAST_TTL`]) tried three times, 200 and 400 ms apart (a broker
/// blip, a publish not confirmed), failpoint `point` passed before each
/// try; the last error, as text. Each try is bounded by the bus's publish
/// timeout.
pub async fn cast_build(
    bus: &dyn Transport,
    host: &str,
    build: &BuildAndRunInstance,
    ids: &RequestIds,
    point: &'static str,
) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..3u64 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
        }
        let sent = match crate::failpoint::hit(point) {
            Ok(()) => cast(
                bus,
                &compute_queue(host),
                method::BUILD_AND_RUN_INSTANCE,
                build,
                ids,
                BUILD_CAST_TTL,
            )
            .await
            .map_err(|e| {
                // The error and its causes, on one line.
                let mut s = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    s.push_str(": ");
                    s.push_str(&c.to_string());
                    cause = c.source();
                }
                s
            }),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}
