//! `ServerGroupAffinityFilter`: an instance of an `affinity` group goes
//! where the group's members are (any host while it has none).

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// Passes the hosts of the group's members (hard affinity).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerGroupAffinityFilter;

impl Filter for ServerGroupAffinityFilter {
    fn name(&self) -> &'static str {
        "ServerGroupAffinityFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        match &req.group {
            Some(g) if g.policy == "affinity" && !g.hosts.is_empty() => {
                g.hosts.contains(&host.info.host)
            }
            _ => true,
        }
    }
}
