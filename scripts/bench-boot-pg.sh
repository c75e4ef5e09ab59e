#!/usr/bin/env bash
# One clean run of loadtest's boot-2000-pg scenario with BINARY (a release
# loadtest, e.g. one built from another commit), report in DIR:
# drops the lt_* databases first, as the scenario file asks. SCENARIO
# (optional) is another scenario file of the same shape.
#   scripts/bench-boot-pg.sh target/release/loadtest /tmp/run1 [SCENARIO]
set -euo pipefail
bin="$1"; out="$2"
here="$(cd "$(dirname "$0")/.." && pwd)"
scenario="${3:-$here/loadtest/scenarios/boot-2000-pg.toml}"
for db in $(psql -h 127.0.0.1 -U postgres -Atc "select datname from pg_database where datname like 'lt\_%'"); do
  psql -h 127.0.0.1 -U postgres -qc "drop database \"$db\" with (force)"
done
rm -rf "$out"
"$bin" run "$scenario" --report-dir "$out" > "$out.log" 2>&1
grep -A1 'boots/s' "$out.log" | tail -1
