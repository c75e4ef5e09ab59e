//! `ServerGroupAntiAffinityFilter`: an instance of an `anti-affinity`
//! group goes to a host with fewer than `max_server_per_host` (default 1)
//! of the group's members.

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// Passes hosts under the group's per-host limit (hard anti-affinity).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerGroupAntiAffinityFilter;

impl Filter for ServerGroupAntiAffinityFilter {
    fn name(&self) -> &'static str {
        "ServerGroupAntiAffinityFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        match &req.group {
            Some(g) if g.policy == "anti-affinity" => {
                (g.members_on(&host.info.host) as i64) < g.max_server_per_host.max(1)
            }
            _ => true,
        }
    }
}
