#!/usr/bin/env bash
# Builds the Debian package into target/debian/ (leaderd_<version>-1_<arch>.deb): the
# binary, the systemd unit, /etc/leaderd/leaderd.toml (a conffile), the shell completions
# and the man page, which the binary generates here (hidden subcommands).
#   scripts/package.sh                      a release build, then the package
#   scripts/package.sh --binary PATH        package a binary built already (the tests give
#                                           their debug build: no second build)
# Other arguments go to cargo deb (e.g. --output DIR, --fast).
set -euo pipefail
cd "$(dirname "$0")/.."

binary=
if [ "${1:-}" = --binary ]; then
  binary=$(realpath "$2")
  shift 2
fi

if ! command -v cargo-deb >/dev/null; then
  echo "installing cargo-deb"
  cargo install cargo-deb --locked
fi

target=$(realpath "${CARGO_TARGET_DIR:-target}")
if [ -z "$binary" ]; then
  cargo build --release --bin leaderd
  binary=$target/release/leaderd
else
  # cargo deb takes the binary from <target dir>/release: give it one there of its own.
  target=$target/deb-staging
  mkdir -p "$target/release"
  ln -f "$binary" "$target/release/leaderd" 2>/dev/null || cp "$binary" "$target/release/leaderd"
fi

assets=target/deb-assets
mkdir -p "$assets"
"$binary" completions bash >"$assets/leaderd.bash"
"$binary" completions zsh >"$assets/_leaderd"
"$binary" completions fish >"$assets/leaderd.fish"
"$binary" man | gzip -9n >"$assets/leaderd.1.gz"

CARGO_TARGET_DIR=$target exec cargo deb --no-build "$@"
