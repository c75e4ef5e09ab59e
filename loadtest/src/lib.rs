//! `loadtest`: the fleet-scale load generator and scenario runner, and the
//! project's macro-benchmark.
//!
//! Today it drives the placement API (`placement` scenarios: seeding a fleet
//! of providers, concurrent claims with consumer generations, allocation
//! candidates at scale), against an embedded placement on any database URL or
//! against a running placement by URL. The boot scenarios of the fleet
//! (cells × hosts of fake computes) come with the boot path.
//!
//! May depend on: `fabric`, the public APIs' wire shapes, and the service
//! crates it embeds in-process (today `placement`).

pub mod placement_load;
pub mod stats;
