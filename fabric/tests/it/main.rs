//! Integration tests of `fabric` (one test binary per crate).

mod bus;
