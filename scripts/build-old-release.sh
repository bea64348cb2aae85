#!/usr/bin/env bash
# Builds the leaderd binary of an earlier commit (default: the release before the operator
# commands of issue 14) into a cache outside the clone, once, and prints its path. The
# rolling-upgrade test (tests/it/upgrade.rs) runs it beside the current binary. Callers
# that come at once wait for each other on a lock.
#   scripts/build-old-release.sh [COMMIT]
# The cache is ${XDG_CACHE_HOME:-~/.cache}/leaderd-old/<commit>/leaderd.
set -euo pipefail
cd "$(dirname "$0")/.."

default=23386224790db700c7d60910231e659a43bbe29b
commit=$(git rev-parse --verify "${1:-$default}^{commit}")
cache="${XDG_CACHE_HOME:-$HOME/.cache}/leaderd-old/$commit"
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9
if [ ! -x "$cache/leaderd" ]; then
  echo "building leaderd $commit into $cache (once)" >&2
  rm -rf "$cache/src"
  mkdir "$cache/src"
  git archive "$commit" | tar -x -C "$cache/src"
  (cd "$cache/src" && CARGO_TARGET_DIR="$cache/target" cargo build --locked --quiet --bin leaderd >&2)
  cp "$cache/target/debug/leaderd" "$cache/leaderd.tmp"
  mv "$cache/leaderd.tmp" "$cache/leaderd"
  # Only the binary is kept (the build directory is large).
  rm -rf "$cache/target" "$cache/src"
fi
echo "$cache/leaderd"
