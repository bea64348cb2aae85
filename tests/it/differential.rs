//! The SQL against its model: random sequences of every statement of the store run on
//! `store::memory::Table` (with the backend's `Flavour`) and on the real PostgreSQL,
//! MariaDB and SQLite through `DbConnection`, each on a database of the test's own; every
//! answer, and the rows read back (`get`, `members`, `held_rows`), must agree.
//!
//! Time: no statement waits. A sequence runs in stages; the model runs a stage's
//! statements at one instant of its own, drawn from the seed and kept at least [`GUARD`]
//! away from every instant at which an answer could change (the model knows them all:
//! [`Table::boundaries`]). Between stages the test moves every stored time of the
//! sequence's rows on the database by as much as the model's clock moved, less the real
//! time the stage took, so that the database's clock stays the real one and the model's
//! instants and the database's keep step. A stage whose statements ran longer than
//! [`OVERRUN`] may have crossed a boundary, and a sequence that disagrees after one is
//! run again (a loaded machine costs time, never a false failure). Times read back agree
//! within three times the longest stage plus [`MARGIN`]. Terms start at the database
//! clock, which no test can pin: a started term must lie within the clock's readings over
//! the statement's round trip (or be the last term + 1 where the clock read no more),
//! and the model then starts that same term. Everything else follows from the seed.
//!
//! `LEADERD_DIFF_SEQUENCES` (fixed seeds 0..N), `LEADERD_DIFF_FRESH` (fresh seeds from a
//! base printed at the start, or `LEADERD_DIFF_BASE`), `LEADERD_DIFF_SEED` (one sequence,
//! with its trace): see docs/testing.md.

use crate::support::{Backend, TestDb};
use leaderd::store::memory::{Flavour, Table};
use leaderd::store::{DatabaseUrl, DbConnection, Lease, StoreError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, SystemTime};

mod compare;
mod ops;

use crate::store::by_hand as sql;

use compare::Verdict;
use ops::{Draw, Op};

/// How far every boundary stays from the model's instant of a stage.
pub(super) const GUARD: Duration = Duration::from_millis(500);
/// A stage whose statements ran longer than this may have crossed a boundary: a time the
/// database stored lies up to three stages' lengths from the model's (a hold's length
/// counts from the renewal, and a handover's window is twice the length), which must
/// stay well inside the guard.
const OVERRUN: Duration = Duration::from_millis(120);
/// Times read back agree within three times the longest stage (see [`OVERRUN`]) plus
/// this: the milliseconds the statements round or truncate to, SQLite's millisecond
/// clock, and the part of a millisecond that SQLite's times cannot be moved by.
const MARGIN: Duration = Duration::from_millis(4);
/// How far a started term may lie outside the host's clock over the round trip.
const CLOCK_SLACK_US: i64 = 2_000;

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| {
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?}: not a number"))
    })
}

fn flavour(backend: Backend) -> Flavour {
    match backend {
        Backend::Postgres => Flavour::POSTGRES,
        Backend::Mysql => Flavour::MYSQL,
        Backend::Sqlite => Flavour::SQLITE,
    }
}

/// How one sequence ended.
enum Outcome {
    Agreed,
    /// It disagreed after a stage overran: run it again.
    Overran,
    Disagreed(String),
}

/// One sequence against one database.
struct Sequence<'c> {
    backend: Backend,
    conn: &'c mut DbConnection,
    model: Table,
    draw: Draw,
    /// The model's instant for the statements of this stage.
    plan: tokio::time::Instant,
    /// When this stage started.
    stage_start: std::time::Instant,
    /// How far the database's stored times still have to move (SQLite's move by whole
    /// milliseconds).
    owed_us: i64,
    /// The longest stage so far.
    drift: Duration,
    overran: bool,
    /// The database clock's lead on this host's.
    offset_us: i64,
    /// What ran and what the database answered, when traced (a failure's report runs
    /// the sequence again traced, rather than every run formatting every answer).
    trace: Option<Vec<String>>,
    statements: u64,
    /// By kind of statement: how many ran, and how many took effect.
    counts: Counts,
}

/// By kind of statement: how many ran, and how many took effect.
type Counts = std::collections::BTreeMap<&'static str, (u64, u64)>;

/// What `Sequence::run` found: whether the statement took effect, or how the two sides
/// differ.
type Took = Result<bool, String>;

/// Runs a statement on the database; its answer and the host's clock when it was sent
/// and answered.
macro_rules! on_db {
    ($self:ident, $call:expr) => {{
        let sent = unix_us();
        let answer: Result<_, StoreError> = $call.await;
        let answered = unix_us();
        $self.ran();
        $self.note(|| format!("  -> {answer:?}"));
        (
            answer.map_err(|error| format!("database error: {error}"))?,
            sent,
            answered,
        )
    }};
}

impl Sequence<'_> {
    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(line());
        }
    }

    fn tolerance(&self) -> Duration {
        self.drift * 3 + MARGIN
    }

    /// A statement answered: how long this stage has run.
    fn ran(&mut self) {
        self.statements += 1;
        let elapsed = self.stage_start.elapsed();
        self.drift = self.drift.max(elapsed);
        self.overran |= elapsed > OVERRUN;
    }

    /// The model's clock reads what the database's did.
    fn sync_clock(&mut self, unix_us: i64) {
        self.model.set_clock(self.plan, unix_us);
    }

    /// A claim's or reacquire's answer: the term it started must be the next one, or the
    /// database clock during its round trip; the model then starts that term.
    fn started(
        &mut self,
        lease: &Lease,
        db: Option<i64>,
        sent: i64,
        answered: i64,
    ) -> Result<(), String> {
        let next = lease.term + 1;
        let (low, high) = (
            sent + self.offset_us - CLOCK_SLACK_US,
            answered + self.offset_us + CLOCK_SLACK_US,
        );
        match db {
            Some(term) if term < next => Err(format!("started term {term} below {next}")),
            Some(term) if term > next && !(low..=high).contains(&term) => Err(format!(
                "started term {term}: not the database clock over the round trip, \
                 {low}..={high}"
            )),
            Some(term) if term == next && low > next => Err(format!(
                "started term {term}, though the database clock read at least {low}"
            )),
            Some(term) => {
                self.sync_clock(term);
                Ok(())
            }
            None => {
                self.sync_clock(answered + self.offset_us);
                Ok(())
            }
        }
    }

    /// The answers must be the same; whether the statement took effect.
    fn check<T: PartialEq + std::fmt::Debug>(
        what: &str,
        db: T,
        model: T,
        took: impl FnOnce(&T) -> bool,
    ) -> Took {
        match db == model {
            true => Ok(took(&db)),
            false => Err(format!("{what}: database {db:?}, model {model:?}")),
        }
    }

    /// Runs `op` on both sides and compares what they answer; whether it took effect (a
    /// write that matched, a read that found something).
    async fn run(&mut self, op: &Op) -> Took {
        let now = self.plan;
        match op {
            Op::Get(name) => {
                let (db, sent, answered) = on_db!(self, self.conn.get(name));
                let middle = sent + (answered - sent) / 2;
                self.sync_clock(middle + self.offset_us);
                let model = self.model.lease_row_against(name, now, middle);
                compare::lease_rows(&db, &model, self.tolerance()).map(|()| db.is_some())
            }
            Op::EnsureRow(name) => {
                let ((), _, answered) = on_db!(self, self.conn.ensure_row(name));
                self.sync_clock(answered + self.offset_us);
                self.model.ensure_row(name, now);
                Ok(true)
            }
            Op::Claim(lease) | Op::Reacquire(lease) => {
                let claim = matches!(op, Op::Claim(_));
                let (db, sent, answered) = match claim {
                    true => on_db!(self, self.conn.claim(lease)),
                    false => on_db!(self, self.conn.reacquire(lease)),
                };
                self.started(lease, db, sent, answered)?;
                let mut model = match claim {
                    true => self.model.claim(now, lease),
                    false => self.model.reacquire(now, lease),
                };
                // The model reads SQLite's clock to the millisecond; the term it starts may
                // have been read finer (a float of it). Checked against the clock above.
                if let (Some(db), Some(modelled)) = (db, model) {
                    if db != modelled && db.abs_diff(modelled) < 1000 {
                        self.model.set_term(&lease.name, db);
                        model = Some(db);
                    }
                }
                if let Some(term) = model {
                    let name = self.draw.names.iter().position(|n| *n == lease.name);
                    self.draw.terms[name.unwrap()].push(term);
                }
                Self::check("started", db, model, Option::is_some)
            }
            Op::Renew(lease, seen) => {
                let (db, _, answered) = on_db!(self, self.conn.renew(lease, *seen));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.renew(now, lease, *seen);
                Self::check("renewed", db, model, |took| *took)
            }
            Op::Release(lease) => {
                let (db, _, answered) = on_db!(self, self.conn.release(lease));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.release(now, lease);
                Self::check("released", db, model, |took| *took)
            }
            Op::Hold(lease, left) => {
                let (db, _, answered) = on_db!(self, self.conn.hold(lease, *left));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.hold(now, lease, *left);
                Self::check("held", db, model, |took| *took)
            }
            Op::Pause(name, duration) => {
                let ((), _, answered) = on_db!(self, self.conn.pause(name, *duration));
                self.sync_clock(answered + self.offset_us);
                self.model.pause(now, name, *duration);
                Ok(true)
            }
            Op::Resume(name) => {
                let (db, _, _) = on_db!(self, self.conn.resume(name));
                Self::check("resumed", db, self.model.resume(name), |took| *took)
            }
            Op::Resign { name, holder, term } => {
                let (db, _, answered) = on_db!(self, self.conn.request_resign(name, holder, *term));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.request_resign(now, name, holder, *term);
                Self::check("asked", db, model, |took| *took)
            }
            Op::Handover {
                name,
                holder,
                term,
                to,
                offer,
            } => {
                let (db, _, answered) = on_db!(
                    self,
                    self.conn.request_handover(name, holder, *term, to, *offer)
                );
                self.sync_clock(answered + self.offset_us);
                let model = self
                    .model
                    .request_handover(now, name, holder, *term, to, *offer);
                Self::check("asked", db, model, |took| *took)
            }
            Op::Accept { name, node, term } => {
                let (db, _, answered) = on_db!(self, self.conn.accept_handover(name, node, *term));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.accept_handover(now, name, node, *term);
                Self::check("accepted", db, model, |took| *took)
            }
            Op::Record(record, fresh) => {
                let ((), _, answered) = on_db!(self, self.conn.record_member(record, *fresh));
                self.sync_clock(answered + self.offset_us);
                self.model.record_member(now, record, *fresh);
                Ok(true)
            }
            Op::HoldPreemption {
                election,
                node,
                hold,
            } => {
                let ((), _, answered) =
                    on_db!(self, self.conn.hold_preemption(election, node, *hold));
                self.sync_clock(answered + self.offset_us);
                self.model.hold_preemption(now, election, node, *hold);
                Ok(true)
            }
            Op::Members(election) => {
                let (db, _, answered) = on_db!(self, self.conn.members(election));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.members(now, election);
                compare::members(&db, &model, self.tolerance()).map(|()| !db.is_empty())
            }
            Op::Prune(election, older_than) => {
                let ((), _, answered) =
                    on_db!(self, self.conn.prune_members(election, *older_than));
                self.sync_clock(answered + self.offset_us);
                self.model.prune_members(now, election, *older_than);
                Ok(true)
            }
            Op::HeldRows => {
                let (mut db, _, answered) = on_db!(self, self.conn.held_rows());
                db.retain(|row| self.draw.names.contains(&row.name));
                self.sync_clock(answered + self.offset_us);
                let model = self.model.held_rows(now);
                compare::held_rows(&db, &model, self.tolerance()).map(|()| !db.is_empty())
            }
            Op::EditHandover { name, to, until } => {
                let until = until.map(|(ahead, by)| (ahead, whole_ms(by)));
                sql::edit_handover(self.conn, self.backend, name, to.as_deref(), until).await;
                self.ran();
                let until = until.map(|(ahead, by)| match ahead {
                    true => now + by,
                    false => now - by,
                });
                self.model.set_handover(name, to.as_deref(), until);
                Ok(true)
            }
        }
    }

    /// Every row of the sequence read back on both sides.
    async fn compare_all(&mut self) -> Verdict {
        self.note(|| "-- every row read back".to_owned());
        for name in self.draw.names.clone() {
            self.run(&Op::Get(name.clone())).await?;
            self.run(&Op::Members(name)).await?;
        }
        self.run(&Op::HeldRows).await.map(|_| ())
    }

    /// Moves both clocks on to the next stage, clear of every boundary.
    async fn next_stage(&mut self) {
        let (back, by) = self.draw.advance();
        let mut target = match back {
            true => self.plan - by,
            false => self.plan + by,
        };
        let boundaries = self.model.boundaries(self.draw.prune_after);
        while let Some(near) = boundaries.iter().find(|b| {
            let apart = match target > **b {
                true => target - **b,
                false => **b - target,
            };
            apart < GUARD
        }) {
            target = *near + GUARD;
        }
        let moved_us = match target >= self.plan {
            true => (target - self.plan).as_micros() as i64,
            false => -((self.plan - target).as_micros() as i64),
        };
        let now = std::time::Instant::now();
        self.owed_us += (now - self.stage_start).as_micros() as i64 - moved_us;
        self.stage_start = now;
        self.plan = target;
        let step = match self.backend {
            Backend::Sqlite => (self.owed_us as f64 / 1000.0).round() as i64 * 1000,
            _ => self.owed_us,
        };
        self.owed_us -= step;
        if step != 0 {
            sql::move_times(self.conn, self.backend, Some(&self.draw.names), step).await;
        }
        self.note(|| {
            format!(
                "-- the model's clock moves {}{:?}",
                if moved_us < 0 { "back " } else { "" },
                Duration::from_micros(moved_us.unsigned_abs())
            )
        });
    }

    /// The whole sequence: stages of statements, and every row compared at its end.
    async fn play(&mut self, steps: usize) -> Verdict {
        for name in self.draw.names.clone() {
            if self.draw.rng.random_bool(0.8) {
                self.note(|| format!("EnsureRow({name:?})"));
                self.run(&Op::EnsureRow(name)).await?;
            }
        }
        for _ in 0..steps {
            let op = self.draw.op(&self.model, self.plan);
            self.note(|| format!("{op:?}"));
            let took = self.run(&op).await?;
            let count = self.counts.entry(op.kind()).or_default();
            count.0 += 1;
            count.1 += u64::from(took);
            if self.draw.rng.random_bool(0.3) {
                if self.draw.rng.random_bool(0.25) {
                    self.compare_all().await?;
                }
                self.next_stage().await;
            }
        }
        self.compare_all().await
    }
}

fn whole_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}

/// Runs the sequence of `seed` on fresh rows named after `prefix`.
async fn sequence(
    backend: Backend,
    conn: &mut DbConnection,
    offset_us: i64,
    seed: u64,
    prefix: &str,
    traced: bool,
) -> Ran {
    let mut rng = SmallRng::seed_from_u64(seed);
    let steps = rng.random_range(15..=30);
    let draw = Draw::new(rng, prefix);
    let names = draw.names.clone();
    let mut sequence = Sequence {
        backend,
        conn,
        model: Table::with_flavour(flavour(backend)),
        draw,
        // An hour on, so that the model's instants can step back.
        plan: tokio::time::Instant::now() + Duration::from_secs(3600),
        stage_start: std::time::Instant::now(),
        owed_us: 0,
        drift: Duration::ZERO,
        overran: false,
        offset_us,
        trace: traced.then(Vec::new),
        statements: 0,
        counts: Counts::new(),
    };
    let verdict = sequence.play(steps).await;
    let outcome = match verdict {
        Ok(()) => Outcome::Agreed,
        Err(_) if sequence.overran => Outcome::Overran,
        Err(difference) => Outcome::Disagreed(difference),
    };
    let ran = Ran {
        outcome,
        trace: sequence.trace.take().unwrap_or_default(),
        statements: sequence.statements,
        counts: std::mem::take(&mut sequence.counts),
    };
    sql::delete(conn, &names).await;
    ran
}

/// What one run of a sequence left.
struct Ran {
    outcome: Outcome,
    trace: Vec<String>,
    statements: u64,
    counts: Counts,
}

/// The database clock's lead on this host's, as reads measure it (the smallest of a few).
async fn clock_offset(conn: &mut DbConnection) -> i64 {
    conn.ensure_row("clock").await.unwrap();
    let mut offsets = Vec::new();
    for _ in 0..5 {
        let row = conn.get("clock").await.unwrap().unwrap();
        offsets.push(row.clock_offset_us.unwrap());
    }
    offsets.sort_by_key(|offset| offset.abs());
    offsets[0]
}

/// A database of the test's own; SQLite's in memory-backed /dev/shm where there is one
/// (every claim is synced: on a disk that is most of the run).
fn database(backend: Backend) -> (TestDb, String) {
    let db = TestDb::new(backend);
    let url = match backend {
        Backend::Sqlite if std::path::Path::new("/dev/shm").is_dir() => {
            let dir = std::path::Path::new("/dev/shm").join(db.dir.file_name().unwrap());
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}", dir.join("leaderd.sqlite3").display())
        }
        // No TLS on loopback: its cost is the client's, not the statements'.
        Backend::Postgres => format!("{}?sslmode=disable", db.url),
        Backend::Mysql => format!("{}?ssl-mode=DISABLED", db.url),
        Backend::Sqlite => db.url.clone(),
    };
    (db, url)
}

async fn connect(url: &str) -> DbConnection {
    let url = DatabaseUrl::parse(url).unwrap();
    DbConnection::connect(&url, Duration::from_secs(10))
        .await
        .unwrap()
}

/// What the workers share: the seeds, the next to run, and what they found.
#[derive(Default)]
struct Run {
    seeds: Vec<u64>,
    next: std::sync::atomic::AtomicUsize,
    /// (index, report) of every sequence that disagreed.
    failures: std::sync::Mutex<Vec<(usize, String)>>,
    statements: std::sync::atomic::AtomicU64,
    counts: std::sync::Mutex<Counts>,
    reruns: std::sync::atomic::AtomicU64,
    skipped: std::sync::atomic::AtomicU64,
}

/// Runs sequences on a connection of its own until none are left or one disagreed.
async fn worker(backend: Backend, url: String, offset_us: i64, run: std::sync::Arc<Run>) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut conn = connect(&url).await;
    let single = run.seeds.len() == 1;
    loop {
        let index = run.next.fetch_add(1, SeqCst);
        if index >= run.seeds.len() || !run.failures.lock().unwrap().is_empty() {
            return;
        }
        let seed = run.seeds[index];
        for attempt in 0.. {
            let prefix = format!("s{index}a{attempt}_");
            let ran = sequence(backend, &mut conn, offset_us, seed, &prefix, single).await;
            run.statements.fetch_add(ran.statements, SeqCst);
            if single {
                println!("{}", ran.trace.join("\n"));
            }
            {
                let mut counts = run.counts.lock().unwrap();
                for (kind, (sent, took)) in &ran.counts {
                    let count = counts.entry(kind).or_default();
                    count.0 += sent;
                    count.1 += took;
                }
            }
            match ran.outcome {
                Outcome::Agreed => break,
                Outcome::Overran if attempt < 3 => {
                    run.reruns.fetch_add(1, SeqCst);
                }
                Outcome::Overran => {
                    println!("sequence {seed} overran its stages four times: skipped");
                    run.skipped.fetch_add(1, SeqCst);
                    break;
                }
                Outcome::Disagreed(difference) => {
                    // Again, traced.
                    let prefix = format!("s{index}t_");
                    let again = sequence(backend, &mut conn, offset_us, seed, &prefix, true).await;
                    let trace = again.trace;
                    let again = match again.outcome {
                        Outcome::Disagreed(again) if again == difference => String::new(),
                        Outcome::Disagreed(again) => format!("run again: {again}\n"),
                        Outcome::Agreed => "run again, it agreed\n".to_owned(),
                        Outcome::Overran => "run again, it overran\n".to_owned(),
                    };
                    let report = format!(
                        "differential {backend:?}: sequence {} of {} (seed {seed}) disagreed: \
                         {difference}\n{again}replay: LEADERD_DIFF_SEED={seed}\n{}",
                        index + 1,
                        run.seeds.len(),
                        trace.join("\n")
                    );
                    run.failures.lock().unwrap().push((index, report));
                    break;
                }
            }
        }
    }
}

async fn the_sql_agrees_with_its_model(backend: Backend) {
    use std::sync::atomic::Ordering::SeqCst;
    let (db, url) = database(backend);
    let mut conn = connect(&url).await.migrate().await.unwrap();
    let offset_us = clock_offset(&mut conn).await;
    drop(conn);
    let seeds: Vec<u64> = match env("LEADERD_DIFF_SEED") {
        Some(seed) => vec![seed],
        None => {
            let fixed = env("LEADERD_DIFF_SEQUENCES").unwrap_or(1500);
            let fresh = env("LEADERD_DIFF_FRESH").unwrap_or(1500);
            let base = env("LEADERD_DIFF_BASE").unwrap_or_else(|| u64::from(rand::random::<u32>()));
            println!(
                "differential {backend:?}: seeds 0..{fixed}, and {fresh} fresh ones from \
                 base {base} (LEADERD_DIFF_BASE={base} runs them again)"
            );
            (0..fixed)
                .chain((0..fresh).map(|i| (base << 32) + i))
                .collect()
        }
    };
    // Statements wait for the database more than for this process: a few connections
    // at once. SQLite takes one writer at a time anyway.
    let connections = match (backend, seeds.len()) {
        (_, 1) | (Backend::Sqlite, _) => 1,
        _ => env("LEADERD_DIFF_CONNECTIONS").unwrap_or(8),
    };
    let run = std::sync::Arc::new(Run {
        seeds,
        ..Run::default()
    });
    let started = std::time::Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(worker(backend, url.clone(), offset_us, run.clone())))
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let took = started.elapsed();
    let mut failures = std::mem::take(&mut *run.failures.lock().unwrap());
    failures.sort_by_key(|(index, _)| *index);
    if let Some((_, report)) = failures.into_iter().next() {
        panic!("{report}");
    }
    let (sequences, skipped) = (run.seeds.len(), run.skipped.load(SeqCst));
    println!(
        "differential {backend:?}: {sequences} sequences, {} statements in {took:?} \
         ({:.0} sequences/s, {connections} connections); {} run again after a stage \
         overran, {skipped} skipped",
        run.statements.load(SeqCst),
        sequences as f64 / took.as_secs_f64(),
        run.reruns.load(SeqCst),
    );
    let counts = run.counts.lock().unwrap();
    let counts: Vec<String> = counts
        .iter()
        .map(|(kind, (sent, took))| format!("{kind} {took}/{sent}"))
        .collect();
    println!(
        "differential {backend:?}: statements that took effect (or found something): {}",
        counts.join(", ")
    );
    assert!(
        skipped * 10 <= sequences as u64,
        "more than 10% of the sequences overran four times: the machine stalls for seconds"
    );
    drop(db);
    if let Some(path) = url.strip_prefix("sqlite://") {
        let _ = std::fs::remove_dir_all(std::path::Path::new(path).parent().unwrap());
    }
}

backend_tests!(postgres = Backend::Postgres => the_sql_agrees_with_its_model);
backend_tests!(mysql = Backend::Mysql => the_sql_agrees_with_its_model);
backend_tests!(sqlite = Backend::Sqlite => the_sql_agrees_with_its_model);
