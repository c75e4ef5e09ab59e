//! Integration tests of the placement crate (one binary, see CONVENTIONS.md).

mod candidates_api;
mod claims;
mod concurrency;
mod conformance;
mod empty_in_lists;
mod engine_candidates;
mod engine_granular;
mod engine_index;
mod engine_limit;
mod engine_nested;
mod fixtures;
mod inventory_rules;
mod keystone_auth;
mod noauth_remote;
mod orphans;
mod policy_file;
mod private_files;
mod randomize;
mod request_heads;
mod reshaper;
