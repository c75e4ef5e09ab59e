//! `loadtest`: the fleet-scale load generator and scenario runner, and the
//! project's macro-benchmark.
//!
//! It drives the placement API (`placement` scenarios: seeding a fleet of
//! providers, concurrent claims with consumer generations, allocation
//! candidates at scale), against an embedded placement on any database URL or
//! against a running placement by URL; and the whole boot path ([`boot`]:
//! boot N servers through the Compute API, time-to-ACTIVE, the server list,
//! delete and the no-leak invariants), against an embedded region (cells ×
//! hosts of fake computes, [`embed`]) or a running Compute API; and
//! scenario files ([`scenario`], run by [`runner`]): a fleet, a target,
//! phases (boot-and-delete, boot-and-list, burst, steady rate, churn, many
//! tenants) and faults, reported as JSON, SVG plots ([`report`]) and a
//! summary table, with the no-leak invariants checked in the region's
//! databases ([`inspect`]).
//!
//! May depend on: `fabric`, the public APIs' wire shapes, `region` (the
//! in-process harness) and the service crates it embeds in-process.

pub mod api;
pub mod boot;
pub mod compare;
pub mod embed;
pub mod fleet;
pub mod guests;
pub mod inspect;
pub mod machine;
pub mod mem;
pub mod outage;
pub mod placement_load;
pub mod progress;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod stats;
pub mod svg;
pub mod tls;
