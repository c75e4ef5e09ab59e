//! Integration tests of `fabric` (one test binary per crate).

mod blocked;
mod bus;
mod tls;
