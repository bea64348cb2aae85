#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: makes sure the database servers the tests
# talk to are up, installs the tools the tests use, then runs `cargo test`.
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh --test it cluster::`).
set -euo pipefail
cd "$(dirname "$0")/.."

postgres_up() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
mariadb_up() { (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; }

if ! postgres_up; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
if ! mariadb_up; then
  echo "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
fi
for _ in $(seq 1 60); do
  postgres_up && mariadb_up && break
  sleep 1
done
postgres_up || { echo "PostgreSQL is not listening on 127.0.0.1:5432" >&2; exit 1; }
mariadb_up || { echo "MariaDB is not listening on 127.0.0.1:3306" >&2; exit 1; }

# The skewed-clock tests run nodes under libfaketime.
if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then
  echo "installing faketime"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null
fi

# The man page test checks the page with groff's warnings on.
if ! command -v groff >/dev/null; then
  echo "installing groff"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq groff >/dev/null
fi

# A slow-disk test delays a node's fsyncs with strace.
if ! command -v strace >/dev/null; then
  echo "installing strace"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi

# The TLS tests make their certificates with the openssl CLI and start PostgreSQL and
# MariaDB instances of their own (initdb/pg_ctl, mariadb-install-db/mariadbd: already
# there with the servers).
if ! command -v openssl >/dev/null; then
  echo "installing openssl"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi

# The systemd unit is checked with systemd-analyze.
if ! command -v systemd-analyze >/dev/null; then
  echo "installing systemd (for systemd-analyze)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi

# The unit runs under a real systemd booted in a container (systemd-nspawn), for machines
# without systemd as PID 1.
if ! command -v systemd-nspawn >/dev/null; then
  echo "installing systemd-container (for systemd-nspawn)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container >/dev/null
fi

# The Prometheus alert rules are checked, and unit-tested, with promtool (Debian's
# prometheus package: about 19 MB to download, 96 MB installed). Only promtool is
# wanted: on a host running systemd the server the package starts is stopped again.
if ! command -v promtool >/dev/null; then
  echo "installing prometheus (for promtool)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi

# The pooler tests start a PgBouncer of their own in transaction mode (the package's own
# service, where one starts, is stopped again).
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "installing pgbouncer"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  if [ -d /run/systemd/system ]; then
    systemctl disable --now pgbouncer.service >/dev/null 2>&1 || true
  fi
fi

# The fence's tests run leader work through the sqlite3 shell, as docs/fencing.md shows.
if ! command -v sqlite3 >/dev/null; then
  echo "installing sqlite3"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3 >/dev/null
fi

# The HA tests start clusters of their own: a three-member MariaDB Galera cluster
# (galera-4; rsync for the state transfers), and PostgreSQL under Patroni with etcd.
if [ ! -e /usr/lib/galera/libgalera_smm.so ] || ! command -v rsync >/dev/null; then
  echo "installing galera-4 and rsync"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq galera-4 rsync >/dev/null
fi

if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null; then
  echo "installing patroni and etcd-server"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server >/dev/null
  if [ -d /run/systemd/system ]; then
    systemctl disable --now etcd.service patroni.service >/dev/null 2>&1 || true
  fi
fi

# The Debian package is built with cargo-deb (scripts/package.sh; `cargo install` takes
# about 1.5 min here, once: it stays in ~/.cargo/bin).
if ! command -v cargo-deb >/dev/null; then
  echo "installing cargo-deb"
  cargo install cargo-deb --locked
fi

# The Kubernetes manifests are checked offline against the schemas bundled with
# kubernetes-validate (from PyPI), kept in a virtualenv outside the clone (about 10 s to
# make, once; the tests look there too).
tools=${XDG_CACHE_HOME:-$HOME/.cache}/leaderd-tools
if [ ! -x "$tools/venv/bin/kubernetes-validate" ]; then
  echo "installing kubernetes-validate"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install -q kubernetes-validate
fi

# The rolling-upgrade test runs the previous release beside this one: built from git once,
# into a cache outside the clone (the test would build it too, holding the same lock).
scripts/build-old-release.sh >/dev/null

# Two tests at a time per core: the integration tests mostly wait on leases and timers
# (on two cores, at two threads the suite took 488 s; at four, 243-252 s, the test
# processes using 38 % of one core). RUST_TEST_THREADS set by the caller wins.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-$(($(nproc) * 2))}
exec cargo test "$@"
