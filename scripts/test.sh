#!/usr/bin/env bash
# The project's test command (README): formatting, lints, then every test of
# the workspace. Tests that need PostgreSQL or RabbitMQ skip with a printed
# reason when those are absent, unless REQUIRE_REAL_BACKENDS=1 (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."

# The workspace links libvirt (the libvirt driver is built by default).
scripts/install-libvirt.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every binary: the distributed-deployment test runs them as separate processes.
# Bins and tests in one build: the same features as the test run below
# (the tests turn on fabric's failpoints), so nothing is built twice.
cargo build --workspace --bins --tests --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
