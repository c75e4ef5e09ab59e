#!/usr/bin/env bash
# One clean run of loadtest's faults-2000-pg scenario with BINARY (a release
# loadtest), report in DIR: drops the ltf_* databases first and makes sure
# the scenario's vhosts exist.
#   scripts/bench-faults-pg.sh target/release/loadtest /tmp/faults1
set -euo pipefail
bin="$1"; out="$2"
here="$(cd "$(dirname "$0")/.." && pwd)"
for db in $(psql -h 127.0.0.1 -U postgres -Atc "select datname from pg_database where datname like 'ltf\_%'"); do
  psql -h 127.0.0.1 -U postgres -qc "drop database \"$db\" with (force)"
done
for c in cell1 cell2; do
  rabbitmqctl -q add_vhost "ltf_$c" >/dev/null 2>&1 || true
  rabbitmqctl -q set_permissions -p "ltf_$c" guest '.*' '.*' '.*' >/dev/null
done
rm -rf "$out"
"$bin" run "$here/loadtest/scenarios/faults-2000-pg.toml" --report-dir "$out" > "$out.log" 2>&1 || true
sed -n '/^phase /,$p' "$out.log"
