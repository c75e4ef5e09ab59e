//! Integration tests of `cell-mapping`: the real `cell-manage` binary (exit
//! codes, output) and the library (cache, concurrent discovery), on SQLite
//! with the in-process bus and on PostgreSQL (a real database per cell) with
//! RabbitMQ (a real vhost per cell).

mod cache;
mod common;
mod concurrent;
mod docs;
mod flows;
mod local_delete;
mod operator_db;
mod pg_tls;
mod server_actions;
mod unlanded;
