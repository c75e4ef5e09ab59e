//! Integration tests of the `migrations` crate: every kind on every backend
//! migrates from scratch, re-migrates as a no-op, has the expected tables and
//! named constraints, and the constraints fire with the names the code maps.

mod api;
mod cell;
mod common;
mod placement;
mod stash;
mod urls;
