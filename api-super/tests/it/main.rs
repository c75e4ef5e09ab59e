//! api-super's integration tests (one binary, modules by concern).

mod cli;
mod common;
mod compute;
mod console_tokens;
mod create_bound;
mod down_cell;
mod heal;
mod image;
mod image_properties;
mod image_quota;
mod isolation;
mod matrix;
mod operator;
mod owner_policy;
mod query_schema;
mod ratelimit;
mod revocations;
mod scheduler;
mod server_list;
mod tokens;
mod user_apis;
