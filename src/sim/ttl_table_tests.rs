//! The ttl table's runs: a small cell for CI, and the whole table (ignored; run by
//! `scripts/bench.sh --only ttl`, which puts it in BENCHMARKS.md).

use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// The settings of the table: (ttl, interval), the default first.
const SETTINGS: [(u64, u64); 4] = [(1200, 1000), (300, 100), (5000, 2000), (30_000, 10_000)];
/// Injected p99 latencies, ms.
const P99S: [u64; 3] = [50, 200, 500];
/// Shorter settings, at a p99 of 50 ms only: where the shortest ttl that holds lies (the
/// interval at the configuration's floor, 50 ms).
const SHORTER: [(u64, u64); 3] = [(150, 50), (120, 50), (100, 50)];

fn env_f64(name: &str) -> Option<f64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn ms(d: Duration) -> String {
    format!("{}", d.as_millis())
}

fn per_hour(count: u64, over: Duration) -> f64 {
    count as f64 * 3600.0 / over.as_secs_f64()
}

/// One small cell, as CI's guard that the machinery runs and the default holds under a
/// 50 ms p99: no spurious change, and a crash failover within ttl + interval.
#[test]
fn smoke() {
    let cell = Cell {
        ttl: MS(1200),
        interval: MS(1000),
        p99: MS(50),
    };
    let measured = measure(cell, Duration::from_secs(600), 20, 7);
    assert_eq!(measured.violation, None);
    assert_eq!(measured.new_terms, 0, "{measured:?}");
    assert_eq!(measured.failovers.len(), 20, "{measured:?}");
    let (worst, missing) = failover_quantile(&measured, 1.0);
    assert_eq!(missing, 0, "{measured:?}");
    assert!(worst <= 2200.0, "{measured:?}");
    let drawn = measured.drawn_p99.as_secs_f64() * 1000.0;
    assert!((48.0..52.0).contains(&drawn), "drawn p99 {drawn} ms");
}

/// A 50 ms interval, the configuration's floor, sends twenty renewals a second: property
/// 5 allows it (four statements per interval), and 120 ms / 50 ms holds a 50 ms p99.
#[test]
fn shortest_interval() {
    let cell = Cell {
        ttl: MS(120),
        interval: MS(50),
        p99: MS(50),
    };
    let measured = measure(cell, Duration::from_secs(60), 20, 11);
    assert_eq!(measured.violation, None);
    assert_eq!(measured.new_terms, 0, "{measured:?}");
    let (worst, missing) = failover_quantile(&measured, 1.0);
    assert_eq!(missing, 0, "{measured:?}");
    assert!(worst <= 400.0, "{measured:?}");
}

/// The whole table. `LEADERD_TTL_HOURS` scales the quiet runs (1 = the published
/// lengths), `LEADERD_TTL_KILLS` sets the kills per cell; `LEADERD_TTL_TABLE=PATH` writes
/// the markdown there.
#[test]
#[ignore = "minutes: run by scripts/bench.sh --only ttl"]
fn table() {
    let scale = env_f64("LEADERD_TTL_HOURS").unwrap_or(1.0);
    let kills = env_f64("LEADERD_TTL_KILLS").unwrap_or(300.0) as usize;
    let mut cells = Vec::new();
    for (ttl, interval) in SETTINGS {
        for p99 in P99S {
            // Virtual hours: each cell sends a few hundred thousand statements at most.
            let hours = match interval {
                0..1000 => 2.0,
                _ => 12.0,
            } * scale;
            cells.push((
                Cell {
                    ttl: MS(ttl),
                    interval: MS(interval),
                    p99: MS(p99),
                },
                Duration::from_secs_f64(hours * 3600.0),
            ));
        }
    }
    for (ttl, interval) in SHORTER {
        let cell = Cell {
            ttl: MS(ttl),
            interval: MS(interval),
            p99: MS(50),
        };
        cells.push((cell, Duration::from_secs_f64(scale * 1800.0)));
    }
    let started = std::time::Instant::now();
    let results: Vec<Mutex<Option<Measured>>> = cells.iter().map(|_| Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(&(cell, quiet)) = cells.get(i) else {
                        return;
                    };
                    let timed = std::time::Instant::now();
                    let measured = measure(cell, quiet, kills, 29 + i as u64);
                    eprintln!(
                        "{}/{} p99 {}: {:.1?}, {} statements",
                        ms(cell.ttl),
                        ms(cell.interval),
                        ms(cell.p99),
                        timed.elapsed(),
                        measured.statements
                    );
                    *results[i].lock().unwrap() = Some(measured);
                }
            });
        }
    });
    let took = started.elapsed();
    let mut rows = String::new();
    let mut statements = 0;
    for ((cell, _), result) in cells.iter().zip(&results) {
        let m = result.lock().unwrap().take().expect("every cell ran");
        assert_eq!(m.violation, None, "{cell:?}");
        statements += m.statements;
        let (median, _) = failover_quantile(&m, 0.5);
        let (p99, missing) = failover_quantile(&m, 0.99);
        let (max, _) = failover_quantile(&m, 1.0);
        rows.push_str(&format!(
            "| {} / {} | {} ({:.1}) | {:.1} | {} | {:.2} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {} |\n",
            ms(cell.ttl),
            ms(cell.interval),
            ms(cell.p99),
            m.drawn_p99.as_secs_f64() * 1000.0,
            m.quiet.as_secs_f64() / 3600.0,
            m.new_terms,
            per_hour(m.new_terms, m.quiet),
            per_hour(m.moves, m.quiet),
            m.failovers.len(),
            median,
            p99,
            max,
            missing,
        ));
    }
    let text = format!(
        "| ttl / interval (ms) | injected p99 ms (drawn) | quiet hours | new terms | new terms/h | moves/h | kills | failover median ms | failover p99 ms | failover max ms | no failover within 6 ttl |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n{rows}\n\
         Simulated: {} statements in {:.0} s (wall-clock, {threads} threads, debug build; \
         the figures do not depend on the build or the machine's load).\n",
        statements,
        took.as_secs_f64(),
    );
    println!("{text}");
    if let Ok(path) = std::env::var("LEADERD_TTL_TABLE") {
        std::fs::write(path, &text).unwrap();
    }
}
