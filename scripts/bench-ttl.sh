#!/usr/bin/env bash
# The ttl table (issue 29, section 5): rewrites the last section of BENCHMARKS.md,
# "Choosing ttl and interval". Run by scripts/bench.sh (a full run, or `--only ttl`).
#
# * The simulator's table (`cargo test --lib sim::ttl_table::tests::table -- --ignored`):
#   virtual time, deterministic, independent of the machine's load; 4 to 9 minutes on 2
#   shared cores in the debug build. LEADERD_TTL_HOURS scales its quiet runs.
# * The spot check on real processes (`cargo test --test it ttl_spot -- --ignored`):
#   wall-clock, a few minutes per cell; LEADERD_TTL_SPOT picks the cells,
#   LEADERD_TTL_SPOT_MINUTES and LEADERD_TTL_SPOT_KILLS their lengths.
# LEADERD_TTL_SIM_FROM=FILE or LEADERD_TTL_SPOT_FROM=FILE takes that part from an earlier
# run's output (what LEADERD_TTL_TABLE or LEADERD_TTL_SPOT_OUT wrote) instead of measuring.
# The database servers must be up (scripts/bench.sh starts them).
set -euo pipefail
cd "$(dirname "$0")/.."

sim=$(mktemp --suffix=.ttl-sim.md)
spot=$(mktemp --suffix=.ttl-spot.md)
trap 'rm -f "$sim" "$spot"' EXIT
started=$(date +%s)

if [ -n "${LEADERD_TTL_SIM_FROM:-}" ]; then
  cp "$LEADERD_TTL_SIM_FROM" "$sim"
else
  LEADERD_TTL_TABLE="$sim" cargo test --lib sim::ttl_table::tests::table \
    -- --ignored --nocapture --test-threads 1 >&2
fi
if [ -n "${LEADERD_TTL_SPOT_FROM:-}" ]; then
  cp "$LEADERD_TTL_SPOT_FROM" "$spot"
else
  : "${LEADERD_TTL_SPOT:=postgres:1200/1000@50,postgres:300/100@50,mysql:300/100@50,postgres:150/50@50,mysql:150/50@50,postgres:300/100@200}"
  export LEADERD_TTL_SPOT
  LEADERD_TTL_SPOT_OUT="$spot" cargo test --test it ttl_spot::spot_check \
    -- --ignored --nocapture --test-threads 1 >&2
fi

minutes=${LEADERD_TTL_SPOT_MINUTES:-3}
kills=${LEADERD_TTL_SPOT_KILLS:-20}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
section=$(mktemp --suffix=.ttl-section.md)
{
  cat <<'TEXT'
## Choosing ttl and interval (spurious leader changes and crash failover under latency)

Written by `scripts/bench-ttl.sh` (`scripts/bench.sh --only ttl`); the guide to reading it
is docs/configuration.md, "Choosing ttl and interval". Every cell: three candidate nodes,
every statement of every node delayed by the same draw as the simulator's
`SlowStatements` fault (`src/sim/db.rs`): three parts (before the database, in the row
lock, on the way back), each uniform on [0, max/3], with max = p99 / 0.8695 so that the
*injected p99* is the one named (57.5, 230 and 575 ms at most for p99s of 50, 200 and
500 ms; the median is about half the max). The shape is bounded: there is no tail past
the max, so a setting either holds at a p99 or churns.

* **new terms/h**: terms started after the first, with no fault but the latency: each runs
  `on_demoted` and `on_elected`, whether or not the lead moved. **moves/h**: those that
  moved the lead to another node. A leader whose renewal answers after its local deadline
  (sent + ttl − margin) stops acting, and takes the row back in a new term if no one
  else did.
* **crash failover**: SIGKILL of the leader at a random point of its renewal cycle (after
  ttl plus 0 to 3 intervals in office), to another node acting as leader. The killed
  node starts again at once, as systemd would.
TEXT
  echo
  if [ -n "${LEADERD_TTL_SIM_FROM:-}${LEADERD_TTL_SPOT_FROM:-}" ]; then
    echo "Written on $date, partly from earlier runs' output (the simulator's says how long"
    echo "it took; the real processes' cells each take their quiet minutes and kills)."
  else
    echo "Measured on $date, in $(( $(date +%s) - started )) s."
  fi
  echo
  echo "### In the simulator (virtual time)"
  echo
  cat <<'TEXT'
The real `Election`, stop sequence and members task of three nodes on tokio's paused
clock over the in-memory table (`src/sim/ttl_table.rs`), PostgreSQL's way (release
notifications, the clock read at the write), `query_timeout` = ttl. Failover here ends
when the new leader publishes its role, before any hook starts. Deterministic: the same
figures on any machine under any load.

TEXT
  cat "$sim"
  echo
  echo "### On real processes (wall-clock: $minutes minutes quiet and $kills kills per cell)"
  echo
  cat <<'TEXT'
The debug build of `leaderd run`, three nodes, each behind its own TCP proxy
(`tests/it/support/proxy.rs`, `Mode::Jitter`) that delays each chunk on the way to the
database by two of the parts above and each chunk on the way back by one, so that a
statement of one round trip gets the simulator's draw (a statement of several round
trips gets more). New terms are counted from the `on_elected` records; failover ends at
the new leader's `on_elected` record (its hook started), as in "Crash failover" above.
The load is the machine's 1-minute average before and after the cell: these figures
depend on it, the simulator's do not.

TEXT
  echo "| backend | ttl / interval (ms) | injected p99 ms | quiet minutes | new terms | new terms/h | moves | kills | failover median ms | failover p99 ms | no failover | load (1 min) before → after |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  cat "$spot"
} > "$section"

page=$(mktemp --suffix=.benchmarks.md)
sed '/^## Choosing ttl and interval/,$d' BENCHMARKS.md > "$page"
cat "$page" "$section" > BENCHMARKS.md
rm -f "$page" "$section"
echo "BENCHMARKS.md: the section \"Choosing ttl and interval\" rewritten" >&2
