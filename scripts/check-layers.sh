#!/usr/bin/env bash
# Keeps the layers one-way: the core (store, election, lock) knows nothing of the daemon
# built on it. A file under src/store/, src/election/ or src/lock* that names one of the
# daemon-side modules fails the check, with the offending lines. Then
# scripts/check-layout.py checks the rest of the layout: no import cycle among the files
# of src/, no source file over 500 lines (tests apart), README.md under 12 KB.
# Every check runs and prints its offenders; the script fails if any of them failed.
set -euo pipefail
cd "$(dirname "$0")/.."

core=(src/store src/election src/lock src/lock.rs)
daemon_side='config|daemon|cli|hooks|http|kubernetes|metrics|systemd|status_file|logging|signals|members|operator'
# `crate::config`, `crate::{config, …}`, and `leaderd::config` in doc examples.
pattern="(crate|leaderd)::(\{[^}]*\b)?($daemon_side)\b"

failed=0
existing=()
for path in "${core[@]}"; do
  [ -e "$path" ] && existing+=("$path")
done

if violations=$(grep -rnE --include='*.rs' "$pattern" "${existing[@]}"); then
  echo "layer check failed: the core (store, election, lock) must not use daemon-side modules:" >&2
  echo "$violations" >&2
  failed=1
fi

# The hooks run commands and know nothing of who reads the results: they may not import
# the configuration (they get their parsed settings), the status file or the metrics
# (they report through `hooks::HookRuns`).
hooks_pattern="(crate|leaderd)::(\{[^}]*\b)?(config|status_file|metrics)\b"
if violations=$(grep -rnE --include='*.rs' "$hooks_pattern" src/hooks); then
  echo "layer check failed: src/hooks must not use config, status_file or metrics:" >&2
  echo "$violations" >&2
  failed=1
fi
# Operator commands read and write the database; they never reach into the daemon that
# runs an election (the CLI names it only to start it: `daemon::run`).
operator_pattern="(crate|leaderd)::(\{[^}]*\b)?daemon\b"
if violations=$(grep -rnE --include='*.rs' "$operator_pattern" src/operator src/operator.rs src/cli); then
  echo "layer check failed: operator commands must not use the daemon:" >&2
  echo "$violations" >&2
  failed=1
fi
python3 scripts/check-layout.py || failed=1
[ "$failed" = 0 ] || exit 1
echo "layer check passed: store, election and lock import nothing from the daemon side;"
echo "  hooks import neither config, status_file nor metrics; operators not the daemon"
