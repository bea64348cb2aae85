//! Leader work's writes through the fence (docs/fencing.md), and property 16.
//!
//! A work process writes in transactions: its writes, the fence of its term last
//! ([`Table::fence`](crate::store::memory::Table::fence)), then COMMIT after a drawn
//! delay, now and then frozen (SIGSTOP) in between. Its statements meet its node's
//! statement faults and go on in the database once sent, whatever becomes of the
//! process; a transaction not committed ends with the process, or with a restart. A claim
//! or reacquire waits while a fenced transaction holds the row ([`wait_for_fences`]).
//!
//! Property 16: no fenced write of term T commits after term T+1 started, judged on the
//! row at each commit; and the fence admits only its own term's live, held lease, judged
//! on the row as a read sees it when the fence passes.

use rand::Rng;
use rand::rngs::SmallRng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep};

use super::world::{ELECTION, World, fail};

/// Runs `apply` in the database `there` from now, and answers `back` after that, unless
/// the statement failed or a restart cut the session (`epoch`) meanwhile, which ends
/// `transaction`. It goes on whatever the sender does.
fn send<T: Send + 'static>(
    world: &Arc<World>,
    (epoch, transaction): (u64, u64),
    who: &str,
    what: String,
    apply: impl FnOnce(&World, &mut super::world::State, Instant) -> T + Send + 'static,
    dice: &Mutex<super::db::Dice>,
) -> oneshot::Receiver<Option<T>> {
    world.on_send(None, who, &what, false);
    let fate = dice.lock().unwrap().fate(Instant::now());
    let (answer, answered) = oneshot::channel();
    let world = Arc::clone(world);
    let who = who.to_owned();
    tokio::spawn(async move {
        sleep(fate.there + fate.lock_wait).await;
        let value = {
            let mut state = world.state.lock().unwrap();
            if state.db.epoch != epoch || fate.fail_before_commit {
                // The session is gone, and its transaction with it.
                state.leader_work.transactions.abort(transaction);
                state.db.table.end_fenced(transaction);
                None
            } else {
                let clock = world.db_clock(Instant::now());
                Some(apply(&world, &mut state, clock))
            }
        };
        world.trace(
            &who,
            format!("{what} -> {}", if value.is_some() { "done" } else { "cut" }),
        );
        world.check();
        sleep(fate.back).await;
        let _ = answer.send(value.filter(|_| !fate.lose_answer));
    });
    answered
}

/// What one work process needs, apart from its signals.
pub(super) struct Work {
    pub(super) world: Arc<World>,
    pub(super) label: String,
    pub(super) term: i64,
    pub(super) exit_after: Duration,
    pub(super) kill_takes: Duration,
    pub(super) rng: SmallRng,
    pub(super) dice: Arc<Mutex<super::db::Dice>>,
}

/// The work's writes, transaction after transaction, until its term is refused; `open`
/// holds the transaction not yet committed, which ends with the process.
pub(super) async fn write_loop(mut work: Work, open: Arc<Mutex<Option<u64>>>) {
    let world = Arc::clone(&work.world);
    let (ttl, timeout) = (world.scenario.ttl, world.scenario.query_timeout);
    let (term, label) = (work.term, work.label.clone());
    loop {
        sleep(Duration::from_millis(work.rng.random_range(10..300))).await;
        let (transaction, epoch) = {
            let mut state = world.state.lock().unwrap();
            if state.db.refusing(Instant::now()) {
                continue;
            }
            (state.leader_work.transactions.begin(), state.db.epoch)
        };
        *open.lock().unwrap() = Some(transaction);
        let fenced = send(
            &world,
            (epoch, transaction),
            &label,
            format!("fence {term} (transaction {transaction})"),
            move |world, state, now| fence(world, state, now, term, transaction),
            &work.dice,
        );
        let passed = match tokio::time::timeout(timeout, fenced).await {
            Ok(Ok(Some(passed))) => passed,
            // No answer: the connection is given up, and the transaction with it.
            _ => {
                end(&world, &open, transaction);
                continue;
            }
        };
        if !passed {
            // The term is over: this work stops acting as its leader.
            open.lock().unwrap().take();
            world.state.lock().unwrap().leader_work.transactions.refused += 1;
            std::future::pending::<()>().await;
        }
        let mut before_commit = Duration::from_millis(work.rng.random_range(0..20));
        if work.rng.random_bool(0.05) {
            // SIGSTOP of the work between its fence and its COMMIT.
            before_commit += ttl.mul_f64(work.rng.random_range(0.0..2.0));
            world.trace(
                &label,
                format!("frozen for {before_commit:?} before its commit"),
            );
        }
        sleep(before_commit).await;
        // Sent: it commits (or not) in the database whatever becomes of this process.
        open.lock().unwrap().take();
        let committed = send(
            &world,
            (epoch, transaction),
            &label,
            format!("commit {term} (transaction {transaction})"),
            move |world, state, now| commit(world, state, now, term, transaction),
            &work.dice,
        );
        let _ = tokio::time::timeout(timeout, committed).await;
    }
}

/// The transaction ends without a commit.
fn end(world: &World, open: &Mutex<Option<u64>>, transaction: u64) {
    open.lock().unwrap().take();
    let mut state = world.state.lock().unwrap();
    state.leader_work.transactions.abort(transaction);
    state.db.table.end_fenced(transaction);
}

/// The fence at database time `now`: whether it passed. Property 16 judges a pass on the
/// row as a read sees it.
fn fence(
    world: &World,
    state: &mut super::world::State,
    now: Instant,
    term: i64,
    transaction: u64,
) -> bool {
    let row = state.db.table.lease_row(ELECTION, now);
    let passed = state
        .db
        .table
        .fence(now, ELECTION, term, transaction)
        .is_ok();
    if state
        .leader_work
        .transactions
        .aborted
        .contains(&transaction)
    {
        // Its session is gone: the server runs what it had received, then rolls back.
        state.db.table.end_fenced(transaction);
    }
    let live = row
        .as_ref()
        .is_some_and(|r| r.term == term && r.holder.is_some() && !r.remaining().is_zero());
    if passed && !live {
        let at = Instant::now() - world.start;
        fail(
            state,
            at,
            "16: the fence admits only a live, held lease of its term",
            format!("the fence of term {term} passed on {row:?}"),
        );
    }
    passed
}

/// COMMIT at database time `now`: property 16 on the row it commits beside.
fn commit(
    world: &World,
    state: &mut super::world::State,
    now: Instant,
    term: i64,
    transaction: u64,
) {
    state.db.table.end_fenced(transaction);
    state.leader_work.transactions.committed += 1;
    let row = state.db.table.lease_row(ELECTION, now);
    if let Some(later) = row.as_ref().map(|r| r.term).filter(|t| *t > term) {
        let at = Instant::now() - world.start;
        fail(
            state,
            at,
            "16: no fenced write of term T commits after term T+1 started",
            format!("transaction {transaction} of term {term} commits in term {later}"),
        );
    }
}
