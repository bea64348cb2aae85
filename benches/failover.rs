//! The numbers behind BENCHMARKS.md, measured on real processes of the release build:
//! crash failover and graceful handover (signal to the new leader's `on_elected` hook),
//! statement round trips and statements per round, and an idle node's memory and CPU, for
//! each backend; and the same graceful handover for `etcdctl elect` as the reference.
//!
//! `cargo bench --bench failover` (what `scripts/bench.sh` runs) rewrites BENCHMARKS.md.
//! `-- --runs N` changes the number of runs per measurement (default 30).

// The benchmark uses a part of the integration tests' support.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/it/support/mod.rs"]
mod common;

use common::records::{hooks_config, records, start};
use common::{
    Backend, Node, NodeSettings, Sampler, TestDb, free_port, http_get, now_ns, wait_agreed,
};
use nix::sys::signal::Signal;
use std::fmt::Write as _;
use std::io::BufRead;
use std::time::{Duration, Instant};

#[path = "failover/etcd.rs"]
mod etcd;
#[path = "failover/scale.rs"]
mod scale;

use etcd::etcd_handovers;
use scale::scale_table;

const BACKENDS: [(Backend, &str); 3] = [
    (Backend::Postgres, "PostgreSQL"),
    (Backend::Mysql, "MariaDB"),
    (Backend::Sqlite, "SQLite"),
];

/// min, median, p99, max in milliseconds.
fn stats(samples: &[f64]) -> [f64; 4] {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    [sorted[0], at(0.5), at(0.99), sorted[sorted.len() - 1]]
}

fn row(name: &str, samples: &[f64]) -> String {
    let [min, median, p99, max] = stats(samples);
    format!(
        "| {name} | {} | {min:.1} | {median:.1} | {p99:.1} | {max:.1} |\n",
        samples.len()
    )
}

/// A log line's timestamp (RFC 3339, first on the line) in ns since the epoch.
fn logged_at(line: &str) -> Option<f64> {
    let at = humantime::parse_rfc3339(line.split_whitespace().next()?).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as f64)
}

/// The times (ms) from the signal to the next term's `on_elected` record, and for a
/// SIGTERM, from the old leader's release (its `released the lease` log line) to that
/// record and to the new leader's `role is now leader` log line (the election alone,
/// before any hook process starts).
struct Failovers {
    from_signal: Vec<f64>,
    from_release: Vec<f64>,
    release_to_role: Vec<f64>,
    /// Per graceful handover, the instant (ns since the epoch) of each of [`STAGES`].
    stages: Vec<[Option<f64>; STAGES.len()]>,
}

/// `--containment MODE`: the nodes' `hooks.containment` (default: theirs, `auto`).
static CONTAINMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The stages of a graceful handover, each the first log line (debug level) of its kind
/// after the one before: the old leader's, then the new leader's.
const STAGES: [&str; 9] = [
    "signal sent",
    "signal handled",
    "release sent",
    "release committed",
    "wake-up received",
    "claim sent",
    "claim answered",
    "role published",
    "hook started",
];

/// A handover's stages from the two nodes' logs (see [`STAGES`]); the first is the
/// instant the benchmark sent the signal, the last the time `on_elected` recorded.
fn stages(
    signalled: f64,
    old: &str,
    new: &str,
    term: i64,
    new_term: i64,
    hook: f64,
) -> [Option<f64>; STAGES.len()] {
    // The first line at or after `after` that contains every one of `parts`.
    let find = |log: &str, after: f64, parts: &[&str]| {
        log.lines()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .filter_map(logged_at)
            .find(|&at| at >= after)
    };
    let handled = find(old, signalled, &["stopping: stepping down"]);
    let release_sent = find(old, signalled, &["release sent", &format!("term={term}")]);
    let released = find(
        old,
        signalled,
        &["released the lease", &format!("term={term}")],
    );
    let from = release_sent.unwrap_or(signalled);
    let woken = find(new, from, &["wake-up:"]);
    let claim_sent = find(new, from, &["claim sent", &format!("expected_term={term}")]);
    let answered = claim_sent.and_then(|sent| find(new, sent, &["claim answered", "taken=true"]));
    let role = find(
        new,
        from,
        &["role is now leader", &format!("term={new_term} ")],
    );
    [
        Some(signalled),
        handled,
        release_sent,
        released,
        woken.filter(|&w| claim_sent.is_none_or(|c| w <= c)),
        claim_sent,
        answered,
        role,
        Some(hook),
    ]
}

/// A directory on tmpfs, removed with what it holds when dropped.
struct TmpfsDir(std::path::PathBuf);

impl TmpfsDir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TmpfsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpfs_dir() -> TmpfsDir {
    let dir = std::path::Path::new("/dev/shm").join(common::unique("leaderd-bench"));
    std::fs::create_dir_all(&dir).expect("/dev/shm is a writable tmpfs");
    TmpfsDir(dir)
}

/// Kills (or stops) the leader `runs` times.
async fn failovers(backend: Backend, signal: Signal, runs: usize) -> Failovers {
    let db = TestDb::new(backend);
    let containment = CONTAINMENT
        .get()
        .map_or(String::new(), |mode| format!("containment = \"{mode}\"\n"));
    // Status files on tmpfs, where the systemd unit (/run) and the Kubernetes manifest
    // (an emptyDir in memory) put them: their fsyncs cost nothing there.
    let status_dir = tmpfs_dir();
    let settings = NodeSettings {
        status_dir: Some(status_dir.path().to_owned()),
        ..hooks_config(
            &db,
            &format!(r#"{containment}on_elected = ["RECORD", "elected"]"#),
        )
    };
    let ids = ["a", "b", "c"];
    let mut nodes: Vec<Node> = ids
        .iter()
        .map(|id| start(&db, &settings, id, &db.url))
        .collect();
    let mut sampler = Sampler::new();
    let mut samples = Vec::new();
    let mut from_release = Vec::new();
    let mut release_to_role = Vec::new();
    let mut staged = Vec::new();
    for run in 0..runs {
        let all: Vec<&Node> = nodes.iter().collect();
        let (leader, term) = wait_agreed(&mut sampler, &all).await;
        // Spread the signal over the renewal cycle.
        let phase = settings.interval.mul_f64((run as f64 * 0.618_034) % 1.0);
        tokio::time::sleep(Duration::from_millis(300) + phase).await;
        let index = nodes.iter().position(|n| n.id == leader).unwrap();
        let signalled = now_ns();
        nodes[index].signal(signal);
        let elected = loop {
            let next = records(&db.dir)
                .into_iter()
                .find(|r| r.event == "elected" && r.term > term);
            if let Some(record) = next {
                break record;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        samples.push((elected.at - signalled) as f64 / 1e6);
        nodes[index].wait_exit(Duration::from_secs(10)).await;
        let released = nodes[index]
            .log()
            .lines()
            .filter(|l| l.contains("released the lease") && l.contains(&format!("term={term}")))
            .find_map(logged_at);
        if let Some(released) = released {
            from_release.push((elected.at as f64 - released) / 1e6);
            let led = nodes
                .iter()
                .find(|n| n.id == elected.node)
                .and_then(|winner| {
                    let term = format!("term={} ", elected.term);
                    winner
                        .log()
                        .lines()
                        .filter(|l| l.contains("role is now leader") && l.contains(&term))
                        .find_map(logged_at)
                });
            if let Some(led) = led {
                release_to_role.push((led - released) / 1e6);
            }
            if let Some(winner) = nodes.iter().find(|n| n.id == elected.node) {
                staged.push(stages(
                    signalled as f64,
                    &nodes[index].log(),
                    &winner.log(),
                    term,
                    elected.term,
                    elected.at as f64,
                ));
            }
        }
        let all: Vec<&Node> = nodes.iter().collect();
        sampler.sample(&all);
        nodes[index] = start(&db, &settings, &leader, &db.url);
    }
    sampler.check_terms();
    Failovers {
        from_signal: samples,
        from_release,
        release_to_role,
        stages: staged,
    }
}

fn median(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| stats(samples)[1])
}

/// A stage's name and its median, in ms.
type StageMedian = (&'static str, f64);

/// The medians of each stage of the handovers (ms from the stage before; a missing wake-up
/// counts from the release), of signal to role and to hook, and how many were woken.
fn stage_row(
    name: &str,
    handovers: &[[Option<f64>; STAGES.len()]],
) -> (String, Option<f64>, Option<f64>, Option<StageMedian>) {
    let mut cells = String::new();
    // The stage up to the role that takes longest: what holds the signal → role goal back.
    let mut largest: Option<StageMedian> = None;
    for stage in 1..STAGES.len() {
        let deltas: Vec<f64> = handovers
            .iter()
            .filter_map(|h| {
                let at = h[stage].or_else(|| (stage == 4).then_some(h[3]?))?;
                let before = h[..stage].iter().rev().find_map(|s| *s)?;
                Some((at - before) / 1e6)
            })
            .collect();
        match median(&deltas) {
            Some(m) => {
                cells += &format!(" {m:.2} |");
                if stage <= 7 && largest.is_none_or(|(_, l)| m > l) {
                    largest = Some((STAGES[stage], m));
                }
            }
            None => cells += " - |",
        }
    }
    let total = |stage: usize| {
        let samples: Vec<f64> = handovers
            .iter()
            .filter_map(|h| Some((h[stage]? - h[0]?) / 1e6))
            .collect();
        median(&samples)
    };
    let (role, hook) = (total(7), total(8));
    let woken = handovers.iter().filter(|h| h[4].is_some()).count();
    let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    (
        format!(
            "| {name} |{cells} {} | {} | {woken}/{} |\n",
            show(role),
            show(hook),
            handovers.len()
        ),
        role,
        hook,
        largest,
    )
}

/// Round trips from the debug log (`round round_trip_us=…`), leader and follower, and
/// statements per round from the metrics, over `duration`.
async fn round_trips(backend: Backend, duration: Duration) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    let (nodes, ports) = Node::start_with_http(&db, &settings, &["a", "b"]);
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, _) = wait_agreed(&mut sampler, &all).await;
    let counts = |port: u16| {
        let (_, metrics) = http_get(port, "/metrics");
        // `leaderd_rounds_total{election="…"} 42`: the sample after the label set.
        let value = |name: &str| {
            metrics
                .lines()
                .find_map(|l| {
                    let labels = l.strip_prefix(name)?.strip_prefix('{')?;
                    labels.split_once("} ")?.1.trim().parse::<f64>().ok()
                })
                .unwrap_or(0.0)
        };
        (
            value("leaderd_statements_total"),
            value("leaderd_rounds_total"),
        )
    };
    let before: Vec<(f64, f64)> = ports.iter().map(|&p| counts(p)).collect();
    tokio::time::sleep(duration).await;
    let mut result = (Vec::new(), Vec::new(), 0.0, 0.0);
    for ((node, &port), before) in nodes.iter().zip(&ports).zip(before) {
        let trips: Vec<f64> = node
            .log()
            .lines()
            .filter_map(|l| l.split("round_trip_us=").nth(1))
            .filter_map(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map(|us| us / 1000.0)
            .skip(2) // connecting and migrating
            .collect();
        let after = counts(port);
        let per_round = (after.0 - before.0) / (after.1 - before.1);
        if node.id == leader {
            (result.0, result.2) = (trips, per_round);
        } else {
            (result.1, result.3) = (trips, per_round);
        }
    }
    result
}

/// RSS (MiB) and CPU time (ms) of an idle leader and follower over `duration`.
/// An idle leader's and follower's memory, CPU over `duration`, and database connections
/// (the most held at any of the samples taken every 500 ms; `None` on SQLite).
async fn idle(backend: Backend, duration: Duration) -> [(f64, f64, Option<usize>); 2] {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    // Over TCP, where the connections can be counted (mysql_async would take the
    // server's Unix socket on this host).
    let url = match backend {
        Backend::Sqlite => db.url.clone(),
        _ => db.url_via(db.server_addr()),
    };
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|id| Node::start_with_env(&db, &settings, id, &url, &[("RUST_LOG", "info")]))
        .collect();
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, _) = wait_agreed(&mut sampler, &all).await;
    let cpu = |node: &Node| {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", node.pid())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks * 1000.0 / 100.0
    };
    let rss = |node: &Node| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).unwrap();
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        kb / 1024.0
    };
    let before: Vec<f64> = nodes.iter().map(cpu).collect();
    let end = Instant::now() + duration;
    let mut connections = [0; 2];
    while Instant::now() < end {
        if backend != Backend::Sqlite {
            for (node, most) in nodes.iter().zip(&mut connections) {
                *most = (*most).max(node.connections_to(db.server_addr()));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let measured: Vec<(f64, f64, Option<usize>)> = nodes
        .iter()
        .zip(before)
        .zip(connections)
        .map(|((n, cpu_before), most)| {
            let held = (backend != Backend::Sqlite).then_some(most);
            (rss(n), cpu(n) - cpu_before, held)
        })
        .collect();
    let leader_index = nodes.iter().position(|n| n.id == leader).unwrap();
    [measured[leader_index], measured[1 - leader_index]]
}

/// The idle table's rows: a leader and a follower on each backend, idle for a minute.
async fn idle_rows() -> String {
    eprintln!("idle nodes, one minute");
    let idles = futures_util::future::join_all(
        BACKENDS.map(|(backend, _)| idle(backend, Duration::from_secs(60))),
    )
    .await;
    let held = |connections: Option<usize>| {
        connections.map_or("— (a file)".to_owned(), |n| n.to_string())
    };
    let mut rows = String::new();
    for ((_, name), [leader, follower]) in BACKENDS.iter().zip(idles) {
        let _ = writeln!(
            rows,
            "| {name} | {:.1} MiB | {:.0} ms | {} | {:.1} MiB | {:.0} ms | {} |",
            leader.0,
            leader.1,
            held(leader.2),
            follower.0,
            follower.1,
            held(follower.2)
        );
    }
    rows
}

/// BENCHMARKS.md with the idle table's rows replaced by `rows`, the rest as it was.
fn with_idle_rows(page: &str, rows: &str) -> String {
    let mut out = String::new();
    let mut lines = page.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        if line.starts_with("| backend | leader RSS") {
            // The header's rule, then the old rows.
            if let Some(rule) = lines.next() {
                out.push_str(rule);
                out.push('\n');
            }
            while lines.peek().is_some_and(|l| l.starts_with('|')) {
                lines.next();
            }
            out.push_str(rows);
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(30);
    if let Some(mode) = args
        .iter()
        .position(|a| a == "--containment")
        .and_then(|i| args.get(i + 1))
    {
        let _ = CONTAINMENT.set(mode.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    // `--only PART`: one part, printed and not written to BENCHMARKS.md.
    match args
        .iter()
        .position(|a| a == "--only")
        .map(|i| args.get(i + 1))
    {
        None => {}
        Some(Some(part)) if part == "scale" => {
            println!("{}", runtime.block_on(scale_table()));
            return;
        }
        Some(Some(part)) if part == "etcd" => {
            match etcd_handovers(runs) {
                Ok((samples, version)) => {
                    println!("{version}\n{}", row("etcdctl elect", &samples))
                }
                Err(why) => println!("{why}"),
            }
            return;
        }
        Some(Some(part)) if part == "handover" => {
            // The graceful handovers alone, stage by stage, and etcd's figure.
            let header = format!(
                "| backend |{} signal → role | signal → hook | woken |",
                STAGES[1..]
                    .iter()
                    .map(|s| format!(" → {s} |"))
                    .collect::<String>()
            );
            println!("{header}");
            for (backend, name) in BACKENDS {
                let handovers = runtime.block_on(failovers(backend, Signal::SIGTERM, runs));
                print!("{}", stage_row(name, &handovers.stages).0);
            }
            match etcd_handovers(runs) {
                Ok((samples, version)) => {
                    print!("{version}\n{}", row("etcdctl elect", &samples))
                }
                Err(why) => println!("{why}"),
            }
            return;
        }
        Some(Some(part)) if part == "idle" => {
            // The idle table alone, written into BENCHMARKS.md in place.
            let rows = runtime.block_on(idle_rows());
            print!("{rows}");
            let page = std::fs::read_to_string("BENCHMARKS.md").unwrap();
            std::fs::write("BENCHMARKS.md", with_idle_rows(&page, &rows)).unwrap();
            return;
        }
        Some(Some(part)) if part == "rounds" => {
            // Statements per round on each backend (the steady state stays one).
            for (backend, name) in BACKENDS {
                let (leader, follower, leader_statements, follower_statements) =
                    runtime.block_on(round_trips(backend, Duration::from_secs(20)));
                println!(
                    "{name}: leader {leader_statements:.2} statements/round ({} rounds), \
                     follower {follower_statements:.2} ({} rounds)",
                    leader.len(),
                    follower.len()
                );
            }
            return;
        }
        Some(other) => {
            eprintln!("--only takes scale, etcd, handover, rounds or idle, not {other:?}");
            std::process::exit(2);
        }
    }
    let mut crash = String::new();
    let mut graceful = String::new();
    let mut released = String::new();
    let mut elected = String::new();
    let mut trips = String::new();
    let mut idle_table = String::new();
    let mut breakdown = String::new();
    let mut goals = Vec::new();
    runtime.block_on(async {
        for (backend, name) in BACKENDS {
            eprintln!("{name}: crash failovers");
            let crashes = failovers(backend, Signal::SIGKILL, runs).await.from_signal;
            crash += &row(name, &crashes);
            let crash_p99 = stats(&crashes)[2];
            eprintln!("{name}: graceful handovers");
            let handovers = failovers(backend, Signal::SIGTERM, runs).await;
            graceful += &row(name, &handovers.from_signal);
            released += &row(name, &handovers.from_release);
            elected += &row(name, &handovers.release_to_role);
            let (line, role, hook, largest) = stage_row(name, &handovers.stages);
            breakdown += &line;
            goals.push((name, role, hook, crash_p99, largest));
            eprintln!("{name}: round trips");
            let (leader, follower, leader_statements, follower_statements) =
                round_trips(backend, Duration::from_secs(20)).await;
            for (role, samples, per_round) in [
                ("leader (renew)", leader, leader_statements),
                ("follower (read)", follower, follower_statements),
            ] {
                let [_, median, p99, _] = stats(&samples);
                let _ = writeln!(
                    trips,
                    "| {name} | {role} | {} | {median:.2} | {p99:.2} | {per_round:.2} |",
                    samples.len()
                );
            }
        }
        idle_table = idle_rows().await;
    });
    let scale = runtime.block_on(scale_table());
    eprintln!("etcd reference");
    let (etcd, etcd_median) = match etcd_handovers(runs) {
        Ok((samples, version)) => (
            format!(
                "| etcdctl elect ({version}) |{}",
                row("", &samples).trim_start_matches("|  |")
            ),
            median(&samples),
        ),
        Err(why) => (
            format!("| etcdctl elect | not measured: {why} |||||\n"),
            None,
        ),
    };
    let mut goal_table = String::new();
    let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    let met = |value: Option<f64>, bound: Option<f64>| match (value, bound) {
        (Some(value), Some(bound)) if value <= bound => "yes",
        (Some(_), Some(_)) => "**no**",
        _ => "-",
    };
    let crash_bound = 1250.0;
    for (name, role, hook, crash_p99, largest) in goals {
        let largest = largest.map_or("-".to_owned(), |(stage, ms)| format!("→ {stage} ({ms:.2})"));
        let _ = writeln!(
            goal_table,
            "| {name} | {} | {} | {} | {} | {} | {} | {crash_p99:.1} | {} | {largest} |",
            show(role),
            show(etcd_median),
            met(role, etcd_median),
            show(hook),
            show(etcd_median.map(|e| 2.0 * e)),
            met(hook, etcd_median.map(|e| 2.0 * e)),
            met(Some(crash_p99), Some(crash_bound)),
        );
    }
    let stage_header = format!(
        "| backend |{} signal → role | signal → hook | woken |\n|---|{}---|---|---|\n",
        STAGES[1..]
            .iter()
            .map(|s| format!(" → {s} |"))
            .collect::<String>(),
        "---|".repeat(STAGES.len() - 1)
    );
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split(':')
                    .nth(1)
                    .map(|m| m.trim().to_owned())
            })
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let header = "| | runs | min ms | median ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n";
    let text = format!(
        "# Benchmarks\n\n\
         Written by `scripts/bench.sh` (`cargo bench --bench failover`) on {date}, in {:.0} s.\n\n\
         * Machine: {machine}, {cores} cores; PostgreSQL and MariaDB on loopback, SQLite on local disk.\n\
         * leaderd {} (release build), {rustc}; defaults: ttl 1200 ms, interval 1 s.\n\
         * Each failover: three nodes; the signal goes to the leader at a different point of its\n  \
         renewal cycle each run; the time is from the signal to the timestamp the new leader's\n  \
         `on_elected` hook writes (`date +%s%N`, so it includes starting the hook).\n\
         * Status files on tmpfs (/dev/shm), where the systemd unit (/run) and the Kubernetes\n  \
         manifest (an emptyDir in memory) put them.\n\n\
         ## Crash failover (SIGKILL of the leader → new leader's on_elected)\n\n\
         Target: at most ttl + 50 ms = 1250 ms at p99.\n\n{header}{crash}\n\
         ## Graceful handover (SIGTERM of the leader → new leader's on_elected)\n\n\
         Target: at the median, the new leader's role at or before etcd's figure, and its\n\
         `on_elected` within twice it, on every backend (wake-ups: LISTEN/NOTIFY on PostgreSQL,\n\
         a lock the leader holds on MariaDB and SQLite).\n\n\
         From the signal (the old leader stops its hooks, then releases):\n\n{header}{graceful}{etcd}\n\
         From the old leader's release (the timestamp of its `released the lease` log line):\n\n{header}{released}\n\
         From the old leader's release to the new leader's `role is now leader` log line: the\n\
         election alone, before the hook's three processes (the guard, `sh`, `date`) start:\n\n{header}{elected}\n\
         ### Stage by stage (medians in ms, each from the stage before)\n\n\
         From the nodes' debug log lines (microsecond timestamps): the old leader handles the\n\
         signal (`stopping`), sends its release (`release sent`) and sees it commit (`released\n\
         the lease`); the new leader receives the wake-up (`wake-up:`: NOTIFY on PostgreSQL, the\n\
         side lock elsewhere; a handover that found no wake-up counts this stage as zero from\n\
         the release, see `woken`), sends its claim and gets the answer, publishes its role, and\n\
         its `on_elected` hook records its start.\n\n{stage_header}{breakdown}\n\
         ### Goals (medians of this run; etcd measured in the same run)\n\n\
         | backend | signal → role | etcd | met | signal → on_elected | 2× etcd | met | crash p99 | ≤ ttl + 50 ms | longest stage before the role (ms) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n{goal_table}\n\
         Where a goal is missed, the stage table says which stage holds it back. What bounds\n\
         each stage on this machine:\n\n\
         * **→ release sent**: the old leader stops acting, and its status file says so\n  \
         durably (write, fsync, rename, fsync of the directory; on tmpfs here) before the\n  \
         release, as the fence requires. On a disk-backed path the two fsyncs add about 1.5 ms\n  \
         here.\n\
         * **→ release committed**: one write's round trip. It does not wait for the disk on\n  \
         PostgreSQL (`synchronous_commit` off for the release alone) or SQLite (`synchronous =\n  \
         NORMAL`); MariaDB has no such choice per statement, and its commit waits for the redo\n  \
         log (docs/protocol.md, \"Which writes wait for the disk\").\n\
         * **→ claim answered**: one write's round trip that must reach the disk before it is\n  \
         answered (a term is never handed out twice), taken while the old leader's process and\n  \
         connections end and the other follower's claim loses the same row, on two cores.\n\
         * **role → hook**: starting the hook's processes: the pre-started guard hands the\n  \
         command to a stub it forked ahead (in the hook's cgroup already, in cgroup mode),\n  \
         which execs `sh`, which starts `date`.\n\n\
         etcd needs one write per handover where leaderd needs two: the leader deletes its key,\n\
         and the next contender, whose key was written when it began to campaign, leads from\n\
         that revision on and learns it from a watch it holds open. leaderd's protocol is one\n\
         row per election with no queue of contenders (seed 002): the successor takes the row\n\
         with a write of its own, and that write must be durable.\n\n\
         ## Statement round trips, and statements per round\n\n\
         Two nodes; round trips from the debug log of each round's first statement (after the\n\
         first two, which connect and migrate), statements per round from the growth of\n\
         `leaderd_statements_total` and `leaderd_rounds_total` over 20 s once both lead or follow.\n\n\
         | backend | role | rounds | median ms | p99 ms | statements per round |\n|---|---|---|---|---|---|\n{trips}\n\
         ## Idle resources (one minute, leader and follower)\n\n\
         Connections: the most each node held at any of the samples taken every 500 ms over\n\
         the minute, over TCP: the election's, the wake-up channel's (LISTEN on PostgreSQL, the\n\
         side lock on MariaDB) and, for a few milliseconds every 10 s, the members record's.\n\
         RSS is mostly the binary's code, paged in: this build has the `kubernetes` feature (the\n\
         test build turns it on), 1.4 MB more code than the package's build, which leaves it out.\n\n\
         | backend | leader RSS | leader CPU | leader connections | follower RSS | follower CPU | follower connections |\n|---|---|---|---|---|---|---|\n{idle_table}\n\
         ## Scale (one local PostgreSQL, one process)\n\n\
         Elections in this process share a few connections (`store::shared::SharedStore`);\n\
         contenders start spread over one interval; defaults otherwise (ttl 1200 ms, interval\n\
         1 s, polling only). Tick latency is each round's first statement, waiting for a\n\
         connection included, over 30 s once every election has a leader; a spurious loss is\n\
         a new term without any fault. Target: none, and p99 under 20 ms.\n\n\
         | run | connections | until all led | statements/s | median ms | p99 ms | max ms | spurious losses |\n\
         |---|---|---|---|---|---|---|---|\n{scale}\n\
         Followers that expect a lease to lapse read at a random instant within min(ttl/64,\n\
         20 ms) after it; at one instant, the 999 followers of one election would all read\n\
         together after each renewal. See docs/scaling-and-databases.md, \"Load\".\n",
        started.elapsed().as_secs_f64(),
        env!("CARGO_PKG_VERSION"),
    );
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md");
    // The ttl table (scripts/bench-ttl.sh, run after this) is the page's last section:
    // kept as it was until that script rewrites it.
    let ttl_section = std::fs::read_to_string(path)
        .ok()
        .and_then(|old| {
            let at = old.find("\n## Choosing ttl and interval")?;
            Some(old[at..].to_owned())
        })
        .unwrap_or_default();
    std::fs::write(path, format!("{text}{ttl_section}")).unwrap();
    println!("{text}");
}
