#!/usr/bin/env bash
# Runs the benchmarks and rewrites BENCHMARKS.md: the database servers must be up (as for
# scripts/test.sh), and etcd is installed for the reference measurement.
# Extra arguments go to the benchmark (e.g. `scripts/bench.sh --runs 10`);
# `scripts/bench.sh --only idle` measures idle nodes alone and rewrites only that table.
# `scripts/bench.sh --only ttl` measures the ttl table alone (scripts/bench-ttl.sh) and
# rewrites only its section, the last of the page; a full run measures it too.
set -euo pipefail
cd "$(dirname "$0")/.."

postgres_up() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
mariadb_up() { (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; }
postgres_up || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
mariadb_up || start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
for _ in $(seq 1 60); do postgres_up && mariadb_up && break; sleep 1; done

if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  echo "installing etcd (the reference point)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
# The Debian package starts a system etcd on the default ports; the benchmark runs its own
# on free ports and leaves that one alone.

if [ "${1:-}" = "--only" ] && [ "${2:-}" = "ttl" ]; then
  exec scripts/bench-ttl.sh
fi
cargo bench --bench failover -- "$@"
if [ "${1:-}" != "--only" ]; then
  scripts/bench-ttl.sh
fi
