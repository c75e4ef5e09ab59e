//! api-super's integration tests (one binary, modules by concern).

mod cli;
mod common;
mod compute;
mod console_tokens;
mod down_cell;
mod heal;
mod image;
mod image_properties;
mod matrix;
mod operator;
mod query_schema;
mod ratelimit;
mod scheduler;
mod server_list;
mod tokens;
mod user_apis;
