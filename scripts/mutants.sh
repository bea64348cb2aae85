#!/usr/bin/env bash
# Applies each deliberate protocol bug in mutants/ in turn and runs the simulator's CI
# budget of seeds (and its regression scenarios) against it: every mutant must be caught.
# Prints a table row per mutant: the property and seed that caught it, and how many
# seeds that took, for the tokio-driven runs and for the runs that drive the state
# machine's step directly (a mutant outside the election and the table, in the daemon
# or the operator commands, is not reachable by those: "-"). One the simulator misses is run against the election's and the
# store's unit tests, and the row says so; it fails only if those miss it too.
# A patch may name the tests that must catch it instead, in a header line
# `Caught-by: FILTER...`: filters of the integration tests (`cargo test --test it --
# FILTER...`, which needs the databases `scripts/test.sh` starts). The differential test
# then runs its fixed seeds only, and the row gives the sequence that caught it and how
# many sequences that took; otherwise it names the tests that failed. `--by 'FILTER...'`
# runs every mutant given against those filters (the table's mutants against the
# differential test, say).
# `--check` only checks that every patch still applies (CI runs that).
#   scripts/mutants.sh [--check] [--by FILTER] [mutants/NN-name.patch ...]
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=false
by=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check_only=true; shift ;;
    --by) by=$2; shift 2 ;;
    *) break ;;
  esac
done
patches=("$@")
[ ${#patches[@]} -gt 0 ] || patches=(mutants/*.patch)

if $check_only; then
  for patch in "${patches[@]}"; do
    git apply --check "$patch" || { echo "mutant no longer applies: $patch" >&2; exit 1; }
  done
  echo "${#patches[@]} mutants apply"
  exit 0
fi

if ! git diff --quiet; then
  echo "the work tree has changes; commit or stash them first" >&2
  exit 1
fi
applied=""
trap '[ -z "$applied" ] || git apply -R "$applied"' EXIT

# The test a patch names (`Caught-by:`), or the one `--by` gives; none: the simulator.
caught_by() {
  if [ -n "$by" ]; then echo "$by"; else sed -n 's/^Caught-by: *//p' "$1" | head -1; fi
}

# Build once unmutated, so each mutant only rebuilds the crate.
cargo test --lib --no-run -q 2>/dev/null
for patch in "${patches[@]}"; do
  if [ -n "$(caught_by "$patch")" ]; then
    cargo test --test it --no-run -q 2>/dev/null
    break
  fi
done
echo "| mutant | caught by | seeds to catch | caught directly by | seeds to catch |"
echo "|---|---|---|---|---|"
escaped=0
for patch in "${patches[@]}"; do
  name=$(basename "$patch" .patch)
  filter=$(caught_by "$patch")
  git apply "$patch"
  applied=$patch
  if [ -n "$filter" ]; then
    # shellcheck disable=SC2086 # one filter or several
    out=$(LEADERD_DIFF_FRESH=0 cargo test -q --test it -- $filter 2>&1 || true)
    git apply -R "$patch"
    applied=""
    if grep -q "error\[E" <<<"$out"; then
      echo "| $name | DOES NOT COMPILE | - | - | - |"
      escaped=$((escaped + 1))
    elif seen=$(grep -m1 -oE 'differential [A-Za-z]+: sequence [0-9]+ of [0-9]+ \(seed [0-9]+\)' <<<"$out"); then
      read -r _ backend _ count _ _ _ seed <<<"$seen"
      echo "| $name | differential test ${backend%:}, seed ${seed%)} | $count | - | - |"
    elif failed=$(grep -oE '^---- [a-z_:]+' <<<"$out") && [ -n "$failed" ]; then
      echo "| $name | $(sed 's/^---- //' <<<"$failed" | sort | paste -sd ' ') | - | - | - |"
    elif ! grep -q "test result: ok" <<<"$out"; then
      echo "| $name | NOT RUN ($filter) | - | - | - |"
      escaped=$((escaped + 1))
    else
      echo "| $name | ESCAPED $filter | - | - | - |"
      escaped=$((escaped + 1))
    fi
    continue
  fi
  # The fixed seeds only, so that the table's counts are seeds from 0.
  out=$(LEADERD_SIM_FRESH_SEEDS=0 LEADERD_SIM_SEEDS=${LEADERD_SIM_SEEDS:-10000} LEADERD_SIM_DIRECT_SEEDS=${LEADERD_SIM_DIRECT_SEEDS:-20000} cargo test -q --lib sim:: 2>&1 || true)
  unit=""
  if ! grep -q "test result: FAILED" <<<"$out"; then
    unit=$(cargo test -q --lib -- election:: store:: 2>&1 || true)
  fi
  git apply -R "$patch"
  applied=""
  first=${LEADERD_SIM_FIRST:-0}
  direct="- | -"
  if seen=$(grep -m1 -oE 'seed [0-9]+ \(replay: LEADERD_SIM_DIRECT_SEED=[0-9]+\) broke property [0-9]+' <<<"$out"); then
    seed=$(awk '{print $2}' <<<"$seen")
    direct="property ${seen##* }, seed $seed | $((seed - first + 1))"
  fi
  if seen=$(grep -m1 -o 'seed [0-9]* violated property [0-9]*' <<<"$out"); then
    seed=$(awk '{print $2}' <<<"$seen")
    property=$(awk '{print $5}' <<<"$seen")
    echo "| $name | property $property, seed $seed | $((seed - first + 1)) | $direct |"
  elif failed=$(grep -m1 -o 'sim::tests::regressions::[a-z_]*' <<<"$out" | head -1); then
    echo "| $name | regression scenario ${failed##*::} | (scenario) | $direct |"
  elif grep -q "error\[E" <<<"$out"; then
    echo "| $name | DOES NOT COMPILE | - | - | - |"
    escaped=$((escaped + 1))
  elif failed=$(grep -oE '^---- [a-z_:]+' <<<"$out" | grep -v 'sim::direct::' | head -1) && [ -n "$failed" ]; then
    echo "| $name | ${failed#---- } | - | $direct |"
  elif [ "$direct" != "- | -" ]; then
    echo "| $name | missed by the tokio-driven runs | - | $direct |"
  elif failed=$(grep -m1 -oE '^---- [a-z_:]+ stdout' <<<"$unit"); then
    failed=${failed#---- }
    echo "| $name | missed by the simulator; unit test ${failed% stdout} | - | $direct |"
  else
    echo "| $name | ESCAPED | - | - | - |"
    escaped=$((escaped + 1))
  fi
done
[ "$escaped" -eq 0 ] || { echo "$escaped mutants escaped" >&2; exit 1; }
