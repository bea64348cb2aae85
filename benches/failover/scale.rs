//! The scale run: many elections in this process over a few shared PostgreSQL
//! connections.

use super::*;

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
    use leaderd::DatabaseUrl;
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

pub async fn scale_table() -> String {
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
