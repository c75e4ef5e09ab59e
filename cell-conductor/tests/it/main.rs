//! Integration tests of the cell side of the boot flow: a conductor and fake
//! computes on one cell bus and cell database. Each scenario runs on the
//! embedded backends (in-process bus, SQLite) and, in `real`, on PostgreSQL
//! and RabbitMQ (skipped without them unless REQUIRE_REAL_BACKENDS=1).

mod common;
mod embedded;
mod heal;
mod init_host;
mod lost_reply;
mod outage;
mod power_sync;
mod real;
mod repeat;
mod scenarios;
mod single_update;
mod steps;
