//! The ttl table's spot check on real processes (issue 29, section 5; BENCHMARKS.md,
//! "Choosing ttl and interval"): three `leaderd run` nodes, each behind a proxy of its own
//! that delays every round trip by the simulator's `SlowStatements` draw, scaled to an
//! injected p99. Per cell: a quiet run, counting new terms from the `on_elected` records,
//! then SIGKILLs of the leader at random points of its renewal cycle, each timed from the
//! signal to the next term's `on_elected` record. Wall-clock figures: the machine's load
//! is reported with them.
//!
//! Ignored (minutes): `scripts/bench.sh --only ttl` runs it.
//! * `LEADERD_TTL_SPOT`: cells, `backend:ttl/interval@p99` in ms, comma-separated
//!   (default `postgres:1200/1000@50,postgres:300/100@50`);
//! * `LEADERD_TTL_SPOT_MINUTES`: the quiet run per cell (default 3);
//! * `LEADERD_TTL_SPOT_KILLS`: kills per cell (default 20);
//! * `LEADERD_TTL_SPOT_OUT`: a file the table's rows are appended to.

use crate::support as common;

use common::proxy::{Mode, Proxy};
use common::records::{hooks_config, records, start};
use common::{Backend, Node, StatusFile, TestDb, now_ns};
use nix::sys::signal::Signal;
use std::time::{Duration, SystemTime};

/// The p99 of the draw as a fraction of its maximum (as in `src/sim/ttl_table.rs`).
const P99_OF_MAX: f64 = 1.0 - 0.391_487_2 / 3.0;

struct Cell {
    backend: Backend,
    name: &'static str,
    ttl: Duration,
    interval: Duration,
    p99: Duration,
}

fn bad<T>(cell: &str) -> T {
    panic!("a cell is backend:ttl/interval@p99 (ms), not {cell:?}")
}

fn parse(cell: &str) -> Cell {
    let (backend, rest) = cell.split_once(':').unwrap_or_else(|| bad(cell));
    let (timing, p99) = rest.split_once('@').unwrap_or_else(|| bad(cell));
    let (ttl, interval) = timing.split_once('/').unwrap_or_else(|| bad(cell));
    let ms = |v: &str| Duration::from_millis(v.trim().parse().unwrap_or_else(|_| bad(cell)));
    let (backend, name) = match backend.trim() {
        "postgres" => (Backend::Postgres, "PostgreSQL"),
        "mysql" | "mariadb" => (Backend::Mysql, "MariaDB"),
        _ => bad(cell),
    };
    Cell {
        backend,
        name,
        ttl: ms(ttl),
        interval: ms(interval),
        p99: ms(p99),
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(1).collect())
        .unwrap_or_default()
}

/// The terms `on_elected` recorded, in order: (term, node, ns).
fn elected(db: &TestDb) -> Vec<(i64, String, u128)> {
    let mut terms: Vec<(i64, String, u128)> = records(&db.dir)
        .into_iter()
        .filter(|r| r.event == "elected")
        .map(|r| (r.term, r.node, r.at))
        .collect();
    terms.sort();
    terms.dedup_by_key(|t| t.0);
    terms
}

async fn measure(cell: &Cell, quiet: Duration, kills: usize) -> String {
    let load_before = load();
    let db = TestDb::new(cell.backend);
    let mut settings = hooks_config(&db, "on_elected = [\"RECORD\", \"elected\"]\n");
    settings.ttl = cell.ttl;
    settings.interval = cell.interval;
    let max = cell.p99.div_f64(P99_OF_MAX);
    let mut proxies = Vec::new();
    let mut urls = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    for id in ["a", "b", "c"] {
        let proxy = Proxy::start(db.server_addr()).await;
        proxy.set(Mode::Jitter(max));
        urls.push(db.url_via(proxy.addr));
        proxies.push(proxy);
        nodes.push(start(&db, &settings, id, urls.last().unwrap()));
    }
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    while elected(&db).is_empty() {
        if std::time::Instant::now() > limit {
            // Statements of several round trips (connecting, migrating) can outlast the
            // query timeout (the ttl) at every try.
            let why = nodes[0]
                .log()
                .lines()
                .rev()
                .find(|l| l.contains("error="))
                .map_or(String::new(), |l| {
                    l.split("error=")
                        .nth(1)
                        .unwrap_or_default()
                        .chars()
                        .take(60)
                        .collect()
                });
            return format!(
                "| {} | {} / {} | {} | — | no leader within 30 s: {why} | | | | | | | {} → {} |\n",
                cell.name,
                cell.ttl.as_millis(),
                cell.interval.as_millis(),
                cell.p99.as_millis(),
                load_before,
                load(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = elected(&db)[0].0;
    tokio::time::sleep(quiet).await;
    let terms = elected(&db);
    let new_terms = terms.iter().filter(|t| t.0 > first).count();
    let moves = terms.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let mut failovers = Vec::new();
    let mut missed = 0;
    let mut state = now_ns();
    while failovers.len() + missed < kills {
        let wait = cell.ttl
            + cell
                .interval
                .mul_f64(f64::from((state % 1000) as u32) / 333.0);
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        tokio::time::sleep(wait).await;
        let Some((term, leader, _)) = elected(&db).last().cloned() else {
            continue;
        };
        let index = ["a", "b", "c"].iter().position(|n| *n == leader).unwrap();
        let leads = StatusFile::read(&nodes[index].status_path).is_some_and(|s| {
            s.is_leader() && s.term == Some(term) && s.valid_until > SystemTime::now()
        });
        if !leads {
            continue;
        }
        let killed_at = now_ns();
        nodes[index].signal(Signal::SIGKILL);
        let limit = std::time::Instant::now() + cell.ttl * 6 + Duration::from_secs(5);
        loop {
            if let Some(next) = elected(&db).into_iter().find(|t| t.0 > term) {
                failovers.push((next.2.saturating_sub(killed_at)) as f64 / 1e6);
                break;
            }
            if std::time::Instant::now() > limit {
                missed += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        nodes[index] = start(&db, &settings, &leader, &urls[index]);
    }
    drop(nodes);
    failovers.sort_by(f64::total_cmp);
    let at = |q: f64| {
        failovers
            .get(((failovers.len().max(1) - 1) as f64 * q).round() as usize)
            .map_or("—".to_owned(), |v| format!("{v:.0}"))
    };
    format!(
        "| {} | {} / {} | {} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} | {} → {} |\n",
        cell.name,
        cell.ttl.as_millis(),
        cell.interval.as_millis(),
        cell.p99.as_millis(),
        quiet.as_secs_f64() / 60.0,
        new_terms,
        new_terms as f64 * 3600.0 / quiet.as_secs_f64(),
        moves,
        failovers.len() + missed,
        at(0.5),
        at(0.99),
        missed,
        load_before,
        load(),
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "minutes of wall-clock: run by scripts/bench.sh --only ttl"]
async fn spot_check() {
    let cells: String = env_or(
        "LEADERD_TTL_SPOT",
        "postgres:1200/1000@50,postgres:300/100@50".to_owned(),
    );
    let quiet = Duration::from_secs_f64(env_or("LEADERD_TTL_SPOT_MINUTES", 3.0) * 60.0);
    let kills = env_or("LEADERD_TTL_SPOT_KILLS", 20);
    let out = std::env::var("LEADERD_TTL_SPOT_OUT").ok();
    for cell in cells.split(',').map(parse) {
        let row = measure(&cell, quiet, kills).await;
        print!("{row}");
        if let Some(path) = &out {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            file.write_all(row.as_bytes()).unwrap();
        }
    }
}
