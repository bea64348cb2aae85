//! The numbers behind BENCHMARKS.md, measured on real processes of the release build:
//! crash failover and graceful handover (signal to the new leader's `on_elected` hook),
//! statement round trips and statements per round, and an idle node's memory and CPU, for
//! each backend; and the same graceful handover for `etcdctl elect` as the reference.
//!
//! `cargo bench --bench failover` (what `scripts/bench.sh` runs) rewrites BENCHMARKS.md.
//! `-- --runs N` changes the number of runs per measurement (default 30).

#[allow(unused_macros)]
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
}

/// Kills (or stops) the leader `runs` times.
async fn failovers(backend: Backend, signal: Signal, runs: usize) -> Failovers {
    let db = TestDb::new(backend);
    let settings = hooks_config(&db, r#"on_elected = ["RECORD", "elected"]"#);
    let ids = ["a", "b", "c"];
    let mut nodes: Vec<Node> = ids
        .iter()
        .map(|id| start(&db, &settings, id, &db.url))
        .collect();
    let mut sampler = Sampler::new();
    let mut samples = Vec::new();
    let mut from_release = Vec::new();
    let mut release_to_role = Vec::new();
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
    }
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
        let value = |name: &str| {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (
            value("leaderd_statements_total "),
            value("leaderd_rounds_total "),
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
async fn idle(backend: Backend, duration: Duration) -> [(f64, f64); 2] {
    let db = TestDb::new(backend);
    let settings = NodeSettings::default();
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|id| Node::start_with_env(&db, &settings, id, &db.url, &[("RUST_LOG", "info")]))
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
    tokio::time::sleep(duration).await;
    let measured: Vec<(f64, f64)> = nodes
        .iter()
        .zip(before)
        .map(|(n, cpu_before)| (rss(n), cpu(n) - cpu_before))
        .collect();
    let leader_index = nodes.iter().position(|n| n.id == leader).unwrap();
    [measured[leader_index], measured[1 - leader_index]]
}

/// What the scale run measured.
struct Scale {
    ticks: Vec<f64>,
    spurious: i64,
    statements_per_second: f64,
    settle: Duration,
}

/// `elections` elections of `contenders` contenders each, in this process, over
/// `connections` shared PostgreSQL connections: round latency (first statement, waiting for
/// a connection included), spurious leadership losses (new terms with no fault) and the
/// statement rate, over `duration` once every election has a leader.
async fn scale(
    elections: usize,
    contenders: usize,
    connections: usize,
    duration: Duration,
) -> Scale {
    use leaderd::config::DatabaseUrl;
    use leaderd::election::{Election, ElectionSettings, Role};
    use leaderd::store::shared::SharedStore;
    use leaderd::store::{LeaseStore, Timeouts};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    let db = TestDb::new(Backend::Postgres);
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        query: Duration::from_millis(1200),
    };
    let store = SharedStore::new(
        DatabaseUrl::parse(&db.url).unwrap(),
        timeouts,
        connections,
        true,
    );
    store.clone().get("warm-up").await.unwrap();
    let measuring = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let statements = Arc::new(AtomicU64::new(0));
    let mut statuses = Vec::new();
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    // Contenders start spread over one interval, as processes on many hosts would; all at
    // one instant would keep their rounds in lockstep.
    let total = elections * contenders;
    let spread = Instant::now();
    for e in 0..elections {
        for c in 0..contenders {
            let index = e * contenders + c;
            tokio::time::sleep_until(
                (spread + Duration::from_secs(1).mul_f64(index as f64 / total as f64)).into(),
            )
            .await;
            let settings = ElectionSettings::new(
                &format!("e{e}"),
                &format!("c{c}"),
                Duration::from_millis(1200),
                Duration::from_secs(1),
            )
            .expect("valid settings");
            let (mut election, status) = Election::new(settings, store.clone());
            election.poll_only();
            let (measuring, ticks, statements) =
                (measuring.clone(), ticks.clone(), statements.clone());
            election.observe(Arc::new(move |report| {
                if measuring.load(Ordering::Relaxed) {
                    statements.fetch_add(report.statements, Ordering::Relaxed);
                    if let Some(trip) = report.round_trip {
                        ticks.lock().unwrap().push(trip.as_secs_f64() * 1000.0);
                    }
                }
            }));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            tasks.push(tokio::spawn(election.run(async move {
                let _ = stopped.await;
            })));
            statuses.push((e, status));
            stops.push(stop);
        }
    }
    let started = Instant::now();
    let leaders = |statuses: &[(
        usize,
        tokio::sync::watch::Receiver<leaderd::election::Status>,
    )]| {
        let mut led = vec![false; elections];
        for (e, status) in statuses {
            if status.borrow().role == Role::Leader {
                led[*e] = true;
            }
        }
        led.iter().filter(|l| **l).count()
    };
    while leaders(&statuses) < elections {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not every election has a leader"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settle = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let terms = |statuses: &[(
        usize,
        tokio::sync::watch::Receiver<leaderd::election::Status>,
    )]| {
        let mut terms = vec![0i64; elections];
        for (e, status) in statuses {
            terms[*e] = terms[*e].max(status.borrow().term.unwrap_or(0));
        }
        terms
    };
    let before = terms(&statuses);
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let after = terms(&statuses);
    let spurious = before.iter().zip(&after).map(|(b, a)| a - b).sum();
    for stop in stops {
        let _ = stop.send(());
    }
    for task in tasks {
        let _ = task.await;
    }
    let ticks = std::mem::take(&mut *ticks.lock().unwrap());
    Scale {
        ticks,
        spurious,
        statements_per_second: statements.load(Ordering::Relaxed) as f64 / duration.as_secs_f64(),
        settle,
    }
}

/// etcd's own election: three `etcdctl elect` contenders on a loopback etcd; SIGTERM to
/// the leader (etcdctl resigns) until the next one prints its proposal.
fn etcd_handovers(runs: usize) -> Result<(Vec<f64>, String), String> {
    let have = |tool: &str, arg: &str| {
        std::process::Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(have("etcd", "--version") && have("etcdctl", "version")) {
        return Err("etcd/etcdctl not installed (apt-get install etcd-server etcd-client)".into());
    }
    let version = String::from_utf8_lossy(
        &std::process::Command::new("etcd")
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .next()
    .unwrap_or_default()
    .to_owned();
    let dir = std::env::temp_dir().join(common::unique("etcd"));
    let (client, peer) = (free_port(), free_port());
    let endpoint = format!("http://127.0.0.1:{client}");
    let mut etcd = std::process::Command::new("etcd")
        .args(["--data-dir", dir.to_str().unwrap()])
        .args([
            "--listen-client-urls",
            &endpoint,
            "--advertise-client-urls",
            &endpoint,
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("default=http://127.0.0.1:{peer}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(2));
    let (lines, elected) = std::sync::mpsc::channel::<(usize, u128)>();
    let contender = |i: usize| {
        let mut child = std::process::Command::new("etcdctl")
            .args(["--endpoints", &endpoint, "elect", "bench", &format!("p{i}")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                if line.is_ok_and(|l| l == format!("p{i}")) {
                    let _ = lines.send((i, now_ns()));
                }
            }
        });
        child
    };
    let mut children: Vec<(usize, std::process::Child)> =
        (0..3).map(|i| (i, contender(i))).collect();
    let mut samples = Vec::new();
    let (mut leader, _) = elected
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "no etcd leader".to_string())?;
    for next_id in 3..3 + runs {
        std::thread::sleep(Duration::from_millis(300));
        let index = children.iter().position(|(id, _)| *id == leader).unwrap();
        let signalled = now_ns();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(children[index].1.id() as i32),
            Signal::SIGTERM,
        )
        .unwrap();
        let (new_leader, at) = elected
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "no etcd handover".to_string())?;
        samples.push((at - signalled) as f64 / 1e6);
        let _ = children[index].1.wait();
        children[index] = (next_id, contender(next_id));
        leader = new_leader;
    }
    for (_, child) in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = etcd.kill();
    let _ = etcd.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((samples, version))
}

async fn scale_table() -> String {
    let mut table = String::new();
    for (what, elections, contenders, connections) in [
        ("1,000 contenders in one election", 1, 1000, 16),
        ("1,000 elections of 3 contenders", 1000, 3, 32),
    ] {
        eprintln!("scale: {what}");
        let run = scale(elections, contenders, connections, Duration::from_secs(30)).await;
        let [_, median, p99, max] = stats(&run.ticks);
        let _ = writeln!(
            table,
            "| {what} | {connections} | {:.1} s | {:.0} | {median:.2} | {p99:.2} | {max:.1} | {} |",
            run.settle.as_secs_f64(),
            run.statements_per_second,
            run.spurious
        );
    }
    table
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(30);
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
            // The PostgreSQL graceful handover alone: the one with a millisecond target.
            let handovers = runtime.block_on(failovers(Backend::Postgres, Signal::SIGTERM, runs));
            println!(
                "from the signal\n{}from the release\n{}release to role\n{}",
                row("PostgreSQL", &handovers.from_signal),
                row("PostgreSQL", &handovers.from_release),
                row("PostgreSQL", &handovers.release_to_role)
            );
            return;
        }
        Some(other) => {
            eprintln!("--only takes scale, etcd or handover, not {other:?}");
            std::process::exit(2);
        }
    }
    let mut crash = String::new();
    let mut graceful = String::new();
    let mut released = String::new();
    let mut elected = String::new();
    let mut trips = String::new();
    let mut idle_table = String::new();
    runtime.block_on(async {
        for (backend, name) in BACKENDS {
            eprintln!("{name}: crash failovers");
            crash += &row(
                name,
                &failovers(backend, Signal::SIGKILL, runs).await.from_signal,
            );
            eprintln!("{name}: graceful handovers");
            let handovers = failovers(backend, Signal::SIGTERM, runs).await;
            graceful += &row(name, &handovers.from_signal);
            released += &row(name, &handovers.from_release);
            elected += &row(name, &handovers.release_to_role);
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
        eprintln!("idle nodes, one minute");
        let idles = futures_util::future::join_all(
            BACKENDS.map(|(backend, _)| idle(backend, Duration::from_secs(60))),
        )
        .await;
        for ((_, name), [leader, follower]) in BACKENDS.iter().zip(idles) {
            let _ = writeln!(
                idle_table,
                "| {name} | {:.1} MiB | {:.0} ms | {:.1} MiB | {:.0} ms |",
                leader.0, leader.1, follower.0, follower.1
            );
        }
    });
    let scale = runtime.block_on(scale_table());
    eprintln!("etcd reference");
    let etcd = match etcd_handovers(runs) {
        Ok((samples, version)) => format!(
            "| etcdctl elect ({version}) |{}",
            row("", &samples).trim_start_matches("|  |")
        ),
        Err(why) => format!("| etcdctl elect | not measured: {why} |||||\n"),
    };
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
         `on_elected` hook writes (`date +%s%N`, so it includes starting the hook).\n\n\
         ## Crash failover (SIGKILL of the leader → new leader's on_elected)\n\n\
         Target: at most ttl + 50 ms = 1250 ms at p99.\n\n{header}{crash}\n\
         ## Graceful handover (SIGTERM of the leader → new leader's on_elected)\n\n\
         Target: 10 ms or less at the median on PostgreSQL (LISTEN/NOTIFY); within one interval\n\
         (1000 ms) on MariaDB and SQLite, which poll.\n\n\
         From the signal (the old leader stops its hooks, then releases):\n\n{header}{graceful}{etcd}\n\
         From the old leader's release (the timestamp of its `released the lease` log line):\n\n{header}{released}\n\
         From the old leader's release to the new leader's `role is now leader` log line: the\n\
         election alone, before the hook's three processes (the guard, `sh`, `date`) start:\n\n{header}{elected}\n\
         ## Statement round trips, and statements per round\n\n\
         Two nodes; round trips from the debug log of each round's first statement (after the\n\
         first two, which connect and migrate), statements per round from the growth of\n\
         `leaderd_statements_total` and `leaderd_rounds_total` over 20 s once both lead or follow.\n\n\
         | backend | role | rounds | median ms | p99 ms | statements per round |\n|---|---|---|---|---|---|\n{trips}\n\
         ## Idle resources (one minute, leader and follower)\n\n\
         | backend | leader RSS | leader CPU | follower RSS | follower CPU |\n|---|---|---|---|---|\n{idle_table}\n\
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
         together after each renewal. See README.md, \"Scaling past one database\".\n",
        started.elapsed().as_secs_f64(),
        env!("CARGO_PKG_VERSION"),
    );
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md");
    std::fs::write(path, &text).unwrap();
    println!("{text}");
}
