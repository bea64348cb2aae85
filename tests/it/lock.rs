//! `leaderd lock` as cron would run it: real processes on every backend, with commands
//! that record what they did (holder, term, nanosecond timestamps) to files. The checks
//! read those records and exit statuses, not the logs.

use crate::support as common;

use common::escape::{Ending, Escape, Heartbeat, MARK};
use common::proxy::{Mode, Proxy};
use common::{Backend, TestDb, leaderd, lines_of, now_ns, script, unique};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

mod cron;
mod flock;
mod processes;
mod rows;
mod unlock;

const HELD: i32 = 75;
const LOST: i32 = 76;

/// `job.sh SECONDS`: records its start, sleeps, records its end. A SIGTERM is recorded
/// and ends it with status 5.
const JOB: &str = r#"#!/bin/sh
record() { echo "$LEADERD_HOLDER $1 $LEADERD_TERM $(date +%s%N) $$ $LEADERD_LOCK" >> "$RECORD_DIR/lock.$LEADERD_HOLDER"; }
trap 'record term; exit 5' TERM
record start
sleep "$1" &
wait $!
record end
"#;

/// Beats every 5 ms until killed, so that its lifetime can be read back to within a beat.
const BEATS: &str = r#"#!/bin/sh
echo "$LEADERD_HOLDER start $LEADERD_TERM $(date +%s%N) $$" >> "$RECORD_DIR/lock.$LEADERD_HOLDER"
while :; do
  echo "$LEADERD_HOLDER beat $LEADERD_TERM $(date +%s%N)" >> "$RECORD_DIR/beats.$LEADERD_HOLDER"
  sleep 0.005
done
"#;

#[derive(Debug, Clone)]
struct Record {
    holder: String,
    event: String,
    term: i64,
    at: u128,
    pid: Option<i32>,
}

fn records(dir: &Path, prefix: &str) -> Vec<Record> {
    let mut all: Vec<Record> = lines_of(dir, prefix)
        .iter()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            Some(Record {
                holder: parts.first()?.to_string(),
                event: parts.get(1)?.to_string(),
                term: parts.get(2)?.parse().ok()?,
                at: parts.get(3)?.parse().ok()?,
                pid: parts.get(4).and_then(|p| p.parse().ok()),
            })
        })
        .collect();
    all.sort_by_key(|r| r.at);
    all
}

struct Setup {
    db: TestDb,
    name: String,
    job: PathBuf,
    beats: PathBuf,
}

impl Setup {
    /// A database with the table already migrated, so that every process starts level.
    fn new(backend: Backend) -> Setup {
        let setup = Setup::fresh(backend);
        let migrated = leaderd()
            .arg("migrate")
            .env("LEADERD_DATABASE__URL", &setup.db.url)
            .output()
            .unwrap();
        assert!(migrated.status.success(), "{migrated:?}");
        setup
    }

    /// A database nothing has migrated yet.
    fn fresh(backend: Backend) -> Setup {
        let db = TestDb::new(backend);
        let job = script(&db.dir, "job.sh", JOB);
        let beats = script(&db.dir, "beats.sh", BEATS);
        Setup {
            db,
            name: unique("nightly-report"),
            job,
            beats,
        }
    }

    /// `leaderd lock ARGS NAME -- COMMAND…` against `url`, stderr to lock-N.err.
    fn lock(&self, url: &str, args: &[&str], command: &[&str]) -> Child {
        self.lock_with_env(url, args, command, &[])
    }

    /// [`Setup::lock`] with extra environment variables for leaderd (and so COMMAND).
    fn lock_with_env(
        &self,
        url: &str,
        args: &[&str],
        command: &[&str],
        env: &[(&str, &str)],
    ) -> Child {
        let stderr = std::fs::File::create(self.db.dir.join(unique("lock") + ".err")).unwrap();
        Command::new(env!("CARGO_BIN_EXE_leaderd"))
            .arg("lock")
            .args(args)
            .arg(&self.name)
            .arg("--")
            .args(command)
            .current_dir(&self.db.dir)
            .env("LEADERD_DATABASE__URL", url)
            .env("RECORD_DIR", &self.db.dir)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    fn job<'a>(&'a self, seconds: &'a str) -> Vec<&'a str> {
        vec![self.job.to_str().unwrap(), seconds]
    }

    /// Everything the lock processes wrote to stderr.
    fn stderr(&self) -> String {
        lines_of(&self.db.dir, "lock_").join("\n")
    }
}

async fn exit_code(child: &mut Child, limit: Duration) -> i32 {
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("leaderd lock did not exit within {limit:?}"))
        .unwrap();
    status.code().expect("exited, not killed")
}

/// Five invocations at once without --wait: one runs the job, the other four exit 75
/// while it still runs, and say who holds the lock.
async fn only_one_of_five_runs_and_the_others_exit_75_at_once(backend: Backend) {
    let setup = Setup::new(backend);
    let children = (0..5).map(|_| {
        let mut child = setup.lock(&setup.db.url, &[], &setup.job("6"));
        async move {
            (
                exit_code(&mut child, Duration::from_secs(30)).await,
                now_ns(),
            )
        }
    });
    let exits = futures_util::future::join_all(children).await;
    let mut codes: Vec<i32> = exits.iter().map(|(code, _)| *code).collect();
    codes.sort();
    assert_eq!(codes, [0, HELD, HELD, HELD, HELD], "{}", setup.stderr());
    let records = records(&setup.db.dir, "lock.");
    let starts: Vec<&Record> = records.iter().filter(|r| r.event == "start").collect();
    assert_eq!(starts.len(), 1, "{records:?}");
    let end = records
        .iter()
        .find(|r| r.event == "end")
        .expect("the job ended");
    // Refused at once: while the one run (6 s) was still going.
    for (_, exited_at) in exits.iter().filter(|(code, _)| *code == HELD) {
        assert!(
            *exited_at < end.at,
            "a refused invocation exited {} ms after the job ended",
            (exited_at - end.at) / 1_000_000
        );
    }
    let stderr = setup.stderr();
    assert_eq!(
        stderr
            .matches(&format!("is held by {}", starts[0].holder))
            .count(),
        4,
        "{stderr}"
    );
    assert!(stderr.contains("its lease lapses in"), "{stderr}");
}

/// Five invocations at once on a fresh database, as cron starts them on the first night:
/// they migrate in turn, so one runs the job and four exit 75 (not 69 for a lost migration
/// race). SQLite's race is tried several times.
async fn five_first_starts_on_a_fresh_database_give_one_run_and_four_75(backend: Backend) {
    let tries = match backend {
        Backend::Sqlite => 5,
        _ => 2,
    };
    for _ in 0..tries {
        let setup = Setup::fresh(backend);
        let children = (0..5).map(|_| {
            let mut child = setup.lock(&setup.db.url, &[], &setup.job("3"));
            async move { exit_code(&mut child, Duration::from_secs(30)).await }
        });
        let mut codes = futures_util::future::join_all(children).await;
        codes.sort();
        assert_eq!(codes, [0, HELD, HELD, HELD, HELD], "{}", setup.stderr());
    }
}

/// With --wait, all five run, one after another: no two runs overlap and every run has a
/// higher term than the one before.
async fn with_wait_all_five_run_in_turn_without_overlap(backend: Backend) {
    let setup = Setup::new(backend);
    let mut children: Vec<Child> = (0..5)
        .map(|_| setup.lock(&setup.db.url, &["--wait", "60s"], &setup.job("0.3")))
        .collect();
    for child in &mut children {
        assert_eq!(
            exit_code(child, Duration::from_secs(60)).await,
            0,
            "{}",
            setup.stderr()
        );
    }
    let records = records(&setup.db.dir, "lock.");
    let runs: Vec<(&Record, &Record)> = records
        .iter()
        .filter(|r| r.event == "start")
        .map(|start| {
            let end = records
                .iter()
                .find(|r| r.event == "end" && r.holder == start.holder)
                .expect("every run ended");
            (start, end)
        })
        .collect();
    assert_eq!(runs.len(), 5, "{records:?}");
    let gaps: Vec<u128> = runs
        .windows(2)
        .map(|pair| pair[1].0.at.saturating_sub(pair[0].1.at) / 1_000_000)
        .collect();
    eprintln!("[measured] {backend:?}: --wait handovers, job end to next job start: {gaps:?} ms");
    for pair in runs.windows(2) {
        let ((_, earlier_end), (later_start, _)) = (pair[0], pair[1]);
        assert!(earlier_end.at < later_start.at, "runs overlap: {records:?}");
        assert!(earlier_end.term < later_start.term, "terms: {records:?}");
    }
}

/// COMMAND's exit status is leaderd's, a signal death is 128+N, and a SIGTERM to leaderd
/// reaches COMMAND, after which the lock is free at once.
async fn the_command_status_comes_through_and_signals_are_forwarded(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let mut seven = setup.lock(url, &[], &["sh", "-c", "exit 7"]);
    assert_eq!(exit_code(&mut seven, Duration::from_secs(10)).await, 7);
    let mut killed = setup.lock(url, &[], &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(
        exit_code(&mut killed, Duration::from_secs(10)).await,
        128 + 9
    );

    let mut job = setup.lock(url, &[], &setup.job("30"));
    wait_for_record(&setup.db.dir, "start").await;
    let pid = nix::unistd::Pid::from_raw(job.id().unwrap() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    assert_eq!(exit_code(&mut job, Duration::from_secs(10)).await, 5);
    assert!(
        records(&setup.db.dir, "lock.")
            .iter()
            .any(|r| r.event == "term"),
        "the job saw the SIGTERM"
    );
    // Released on the way out: the next holder does not wait for the lease.
    let started = std::time::Instant::now();
    let mut next = setup.lock(url, &[], &["true"]);
    assert_eq!(
        exit_code(&mut next, Duration::from_secs(10)).await,
        0,
        "{}",
        setup.stderr()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

async fn wait_for_record(dir: &Path, event: &str) -> Record {
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(record) = records(dir, "lock.").into_iter().find(|r| r.event == event) {
            return record;
        }
        assert!(std::time::Instant::now() < limit, "no {event} record");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A job that runs for several ttls keeps the lock in one term, and others are refused
/// all along.
async fn a_command_that_outlives_several_ttls_keeps_the_lock(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let mut job = setup.lock(url, &["--ttl", "1s"], &setup.job("3.5"));
    wait_for_record(&setup.db.dir, "start").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut other = setup.lock(url, &["--ttl", "1s"], &["true"]);
    assert_eq!(exit_code(&mut other, Duration::from_secs(10)).await, HELD);
    assert_eq!(
        exit_code(&mut job, Duration::from_secs(10)).await,
        0,
        "{}",
        setup.stderr()
    );
    let records = records(&setup.db.dir, "lock.");
    assert!(
        records.iter().all(|r| r.term == records[0].term),
        "one term: {records:?}"
    );
    assert_eq!(records.iter().filter(|r| r.event == "end").count(), 1);
}

/// The holder's database connection stalls: its command is stopped (and leaderd exits 76)
/// before the lease can lapse, so the next holder's run starts only after the last beat.
async fn a_cut_off_holder_stops_its_command_before_the_lease_can_lapse(backend: Backend) {
    let setup = Setup::new(backend);
    let proxy = Proxy::start(setup.db.server_addr()).await;
    let via_proxy = setup.db.url_via(proxy.addr);
    let beats = setup.beats.to_str().unwrap();
    let mut cut_off = setup.lock(&via_proxy, &["--ttl", "2s"], &[beats]);
    let first = wait_for_record(&setup.db.dir, "start").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set(Mode::Stall);
    let stalled_at = now_ns();
    let mut next = setup.lock(
        &setup.db.url,
        &["--ttl", "2s", "--wait", "30s"],
        &setup.job("0"),
    );
    assert_eq!(exit_code(&mut cut_off, Duration::from_secs(10)).await, LOST);
    assert_eq!(exit_code(&mut next, Duration::from_secs(30)).await, 0);

    let stderr = setup.stderr();
    assert!(
        stderr.contains(&format!("lost lock {:?} (term {})", setup.name, first.term)),
        "{stderr}"
    );
    let last_beat = records(&setup.db.dir, "beats.")
        .iter()
        .map(|r| r.at)
        .max()
        .unwrap();
    let successor = successor(&setup.db.dir, &first);
    assert!(
        last_beat < successor.at,
        "the cut-off command beat {} ms after the next run started",
        (last_beat - successor.at) / 1_000_000
    );
    // Stopped within the ttl of the stall (the bound is ttl after its last renewal).
    assert!(
        last_beat < stalled_at + 2_000_000_000,
        "beat until {} ms after the stall",
        (last_beat - stalled_at) / 1_000_000
    );
    assert_gone(first.pid.unwrap()).await;
}

/// The next holder's run after `first`'s, which must be in a later term.
fn successor(dir: &Path, first: &Record) -> Record {
    let next = records(dir, "lock.")
        .into_iter()
        .find(|r| r.event == "start" && r.holder != first.holder)
        .expect("the next holder ran");
    assert!(next.term > first.term, "{next:?} after {first:?}");
    next
}

/// Waits (briefly) for a process to be gone.
async fn assert_gone(pid: i32) {
    let limit = std::time::Instant::now() + Duration::from_secs(2);
    while Path::new(&format!("/proc/{pid}")).exists() {
        // A zombie until its parent (the guard) reaps it: gone as far as work goes.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.split(' ').nth(2) == Some("Z") {
            return;
        }
        assert!(
            std::time::Instant::now() < limit,
            "process {pid} outlived leaderd"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A SIGKILLed holder takes its command with it, and its stale lock is taken over once
/// the lease has lapsed, in the next term.
async fn a_stale_lock_of_a_killed_holder_is_taken_after_its_ttl(backend: Backend) {
    let setup = Setup::new(backend);
    let url = &setup.db.url;
    let mut killed = setup.lock(url, &["--ttl", "2s"], &setup.job("60"));
    let first = wait_for_record(&setup.db.dir, "start").await;
    killed.start_kill().unwrap();
    let killed_at = std::time::Instant::now();
    killed.wait().await.unwrap();
    assert_gone(first.pid.unwrap()).await;

    let mut refused = setup.lock(url, &["--ttl", "2s"], &["true"]);
    assert_eq!(exit_code(&mut refused, Duration::from_secs(10)).await, HELD);
    let mut next = setup.lock(url, &["--ttl", "2s", "--wait", "30s"], &setup.job("0"));
    assert_eq!(exit_code(&mut next, Duration::from_secs(30)).await, 0);
    let taken_after = killed_at.elapsed();
    successor(&setup.db.dir, &first);
    assert!(
        taken_after < Duration::from_secs(5),
        "taken {taken_after:?} after the kill (ttl 2s)"
    );
}

backend_tests!(postgres = Backend::Postgres =>
    only_one_of_five_runs_and_the_others_exit_75_at_once,
    five_first_starts_on_a_fresh_database_give_one_run_and_four_75,
    with_wait_all_five_run_in_turn_without_overlap,
    the_command_status_comes_through_and_signals_are_forwarded,
    a_command_that_outlives_several_ttls_keeps_the_lock,
    a_cut_off_holder_stops_its_command_before_the_lease_can_lapse,
    a_stale_lock_of_a_killed_holder_is_taken_after_its_ttl,
);
backend_tests!(mysql = Backend::Mysql =>
    only_one_of_five_runs_and_the_others_exit_75_at_once,
    five_first_starts_on_a_fresh_database_give_one_run_and_four_75,
    with_wait_all_five_run_in_turn_without_overlap,
    the_command_status_comes_through_and_signals_are_forwarded,
    a_command_that_outlives_several_ttls_keeps_the_lock,
    a_cut_off_holder_stops_its_command_before_the_lease_can_lapse,
    a_stale_lock_of_a_killed_holder_is_taken_after_its_ttl,
);
backend_tests!(sqlite = Backend::Sqlite =>
    only_one_of_five_runs_and_the_others_exit_75_at_once,
    five_first_starts_on_a_fresh_database_give_one_run_and_four_75,
    with_wait_all_five_run_in_turn_without_overlap,
    the_command_status_comes_through_and_signals_are_forwarded,
    a_command_that_outlives_several_ttls_keeps_the_lock,
    a_stale_lock_of_a_killed_holder_is_taken_after_its_ttl,
);
