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
# The daemon's own modules (http, metrics, members, …) are under `daemon`.
daemon_side='config|daemon|cli|hooks|status_file|logging|signals|standing|operator'
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
# the configuration (they get their parsed settings), the status file or the daemon and
# its metrics (they report through `hooks::HookRuns`).
hooks_pattern="(crate|leaderd)::(\{[^}]*\b)?(config|status_file|daemon)\b"
if violations=$(grep -rnE --include='*.rs' "$hooks_pattern" src/hooks); then
  echo "layer check failed: src/hooks must not use config, status_file or the daemon:" >&2
  echo "$violations" >&2
  failed=1
fi
# Operator commands read and write the database; they never reach into the daemon that
# runs an election. The CLI names it only to start it: `daemon::run`, its `ConfigSource`,
# and `HttpError` for the exit status of a listen address that cannot be had.
operator_pattern="(crate|leaderd)::(\{[^}]*\b)?daemon\b"
if violations=$(grep -rnE --include='*.rs' "$operator_pattern" src/operator src/operator.rs); then
  echo "layer check failed: operator commands must not use the daemon:" >&2
  echo "$violations" >&2
  failed=1
fi
# Each name the CLI takes from the daemon (`daemon::X`, or inside `daemon::{…}`), less
# the allowed ones, is an offence.
cli_daemon_names='^(self|run|ConfigSource|HttpError)$'
cli_offences=""
while IFS= read -r line; do
  [ -n "$line" ] || continue
  code=${line#*:*:}
  names=$(grep -oE 'daemon::(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)' <<<"$code" |
    sed -E 's/^daemon:://; s/[{}]//g' | tr ',' '\n' | sed -E 's/^ *//; s/ *$//; s/::.*//')
  if grep -vqE "$cli_daemon_names" <<<"$names"; then
    cli_offences+="$line"$'\n'
  fi
done < <(grep -rnE --include='*.rs' "daemon::" src/cli src/cli.rs || true)
if [ -n "$cli_offences" ]; then
  echo "layer check failed: the CLI names the daemon only to start it (run, ConfigSource, HttpError):" >&2
  printf '%s' "$cli_offences" >&2
  failed=1
fi
python3 scripts/check-layout.py || failed=1
[ "$failed" = 0 ] || exit 1
echo "layer check passed: store, election and lock import nothing from the daemon side;"
echo "  hooks import neither config, status_file nor the daemon; operators not the daemon;"
echo "  the CLI only what starts it"
