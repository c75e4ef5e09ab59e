//! `compute`: the per-host agent.
//!
//! A hypervisor driver trait with a `fake` driver (hundreds per process) and a
//! `libvirt` driver behind a cargo feature; resource reporting to placement;
//! heartbeats. Every database write it needs goes to its cell conductor over
//! the broker.
//!
//! May depend on: `fabric` only (plus an HTTP client for placement). Must never
//! depend on sqlx or on axum's server side: compute holds no database
//! credentials.
//!
//! Status: not built yet.
