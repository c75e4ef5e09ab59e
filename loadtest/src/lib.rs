//! `loadtest`: the fleet-scale load generator and scenario runner.
//!
//! May depend on: `fabric` and the public APIs' wire types; when it embeds a
//! region in-process it uses the same harness as `region`.
//!
//! Status: not built yet.
