//! The state machine stepped by hand, with no loop and no store: the interleavings a
//! loop test cannot pin down.

use std::time::Instant as StdInstant;

use super::*;
use crate::election::clock::Instants;
use crate::election::machine::{Action, Input, Machine, Moment, Reply, State, Statement};
use crate::store::{Commands, LeaseRow, Pending, StoreError};

/// The moment `after` past `start`, on both clocks, with the claim gates open.
fn at(start: Instant, after: Duration) -> Moment {
    Moment {
        at: Instants {
            at: start + after,
            boot: Duration::from_secs(1000) + after,
        },
        wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + after,
        claims_open: true,
    }
}

fn machine(start: Instant) -> Machine {
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    Machine::new(Arc::new(settings), start)
}

fn sent(actions: &[Action]) -> Option<Statement> {
    actions.iter().find_map(|action| match action {
        Action::Send(statement) => Some(*statement),
        _ => None,
    })
}

fn row(holder: &str, term: i64, term_token: Option<i64>, pending: Pending) -> LeaseRow {
    LeaseRow {
        holder: Some(holder.to_owned()),
        term,
        lease: TTL,
        age: Duration::from_millis(100),
        clock_offset_us: None,
        term_token,
        pending,
        held_for: None,
    }
}

/// The row as a term this process started shows it: its token, and a known start.
fn started_by(m: &Machine, term: i64) -> LeaseRow {
    LeaseRow {
        term_token: Some(m.token.value()),
        held_for: Some(Duration::from_millis(100)),
        ..row("a", term, None, Pending::default())
    }
}

/// A term a lost answer may have started on top of term 1: the database clock's, far above.
const STARTED: i64 = 1_700_000_000_000_123;

fn lost() -> Result<Reply, StoreError> {
    Err(StoreError::QueryTimeout { after: TTL })
}

/// Lapsed in term 1, a reacquire whose answer is lost (a term above 1 may have started), a
/// resign, and its release of term 1, which finds that term on the row: nothing to release.
/// At 8 ms.
fn resign_with_a_term_in_doubt(m: &mut Machine, start: Instant) {
    m.state = State::Lapsed {
        term: 1,
        in_doubt: None,
    };
    let actions = m.step(at(start, Duration::ZERO), Input::Due);
    assert_eq!(sent(&actions), Some(Statement::Reacquire { term: 1 }));
    m.step(at(start, Duration::from_millis(5)), Input::Answer(lost()));
    m.step(at(start, Duration::from_millis(6)), Input::Resign(None));
    m.step(
        at(start, Duration::from_millis(7)),
        Input::Answer(Ok(Reply::Durable(true))),
    );
    m.step(
        at(start, Duration::from_millis(8)),
        Input::Answer(Ok(Reply::Done(false))),
    );
}

/// A reacquire whose answer was lost may have started a new term. A resign in between
/// keeps that term in doubt, so the read after it knows the term as this process's own
/// (and a stop releases it), not another process's with the same node id.
#[test]
fn a_term_in_doubt_stays_in_doubt_through_a_resign() {
    let start = Instant::from_std(StdInstant::now());
    let mut m = machine(start);
    resign_with_a_term_in_doubt(&mut m, start);
    assert!(
        matches!(
            m.state,
            State::Following {
                in_doubt: Some(1),
                ..
            }
        ),
        "{:?}",
        m.state
    );
    let actions = m.step(at(start, Duration::from_millis(9)), Input::Due);
    assert_eq!(sent(&actions), Some(Statement::Read));
    let ours = started_by(&m, STARTED);
    m.step(
        at(start, Duration::from_millis(10)),
        Input::Answer(Ok(Reply::Row(Some(ours)))),
    );
    assert_eq!(
        m.state,
        State::Lapsed {
            term: STARTED,
            in_doubt: None
        },
        "the term the lost answer started is this process's own"
    );
}

/// A renewal that finds a pause, renews stating it, and is answered after the deadline:
/// the node stops acting, and its status still says the election is paused.
#[test]
fn a_late_renewal_still_reports_the_pause_it_saw() {
    let start = Instant::from_std(StdInstant::now());
    let mut m = machine(start);
    let deadline = at(start, TTL - Duration::from_millis(10)).at;
    m.state = State::Leading {
        term: 1,
        deadline,
        seen: Commands::default(),
        resign_passed_on: false,
    };
    let actions = m.step(at(start, Duration::ZERO), Input::Due);
    let plain = Commands::default();
    assert_eq!(
        sent(&actions),
        Some(Statement::Renew {
            term: 1,
            seen: plain
        })
    );
    let actions = m.step(
        at(start, Duration::from_millis(1)),
        Input::Answer(Ok(Reply::Done(false))),
    );
    assert_eq!(sent(&actions), Some(Statement::Read));
    let paused = Pending {
        paused_for: Some(Duration::from_secs(60)),
        ..Pending::default()
    };
    let actions = m.step(
        at(start, Duration::from_millis(2)),
        Input::Answer(Ok(Reply::Row(Some(row("a", 1, None, paused))))),
    );
    let seen = Commands {
        resign: false,
        paused: true,
    };
    assert_eq!(sent(&actions), Some(Statement::Renew { term: 1, seen }));
    // Answered after the deadline (with no look at it in between).
    let actions = m.step(at(start, TTL * 2), Input::Answer(Ok(Reply::Done(true))));
    assert!(
        matches!(m.state, State::Lapsed { term: 1, .. }),
        "{:?}",
        m.state
    );
    let published = actions.iter().rev().find_map(|action| match action {
        Action::Publish(status) => Some(status.clone()),
        _ => None,
    });
    let published = published.expect("a status");
    assert_eq!(published.role, Role::Unknown);
    assert!(published.paused, "the pause the renewal saw");
}

/// A node that found no row creates it and then claims it; a stop that closes the claim
/// gates while the row is being created (SIGTERM closes them before the election stops)
/// sends no claim.
#[test]
fn a_claim_gate_closed_while_the_row_is_created_sends_no_claim() {
    let start = Instant::from_std(StdInstant::now());
    let mut m = machine(start);
    let actions = m.step(at(start, Duration::ZERO), Input::Due);
    assert_eq!(sent(&actions), Some(Statement::Read));
    let actions = m.step(
        at(start, Duration::from_millis(1)),
        Input::Answer(Ok(Reply::Row(None))),
    );
    assert_eq!(sent(&actions), Some(Statement::EnsureRow));
    let closed = Moment {
        claims_open: false,
        ..at(start, Duration::from_millis(2))
    };
    let actions = m.step(closed, Input::Answer(Ok(Reply::Done(true))));
    assert_eq!(sent(&actions), None, "{actions:?}");
    assert!(matches!(m.state, State::Following { .. }), "{:?}", m.state);
}

/// A resign keeps the node from claiming for one ttl, reacquires included: a term in
/// doubt through the resign turns out the node's own, and the round after that read
/// must not take the next term at once, undoing the resign.
#[test]
fn a_resign_keeps_its_wait_when_the_term_in_doubt_is_found_ours() {
    let start = Instant::from_std(StdInstant::now());
    let mut m = machine(start);
    resign_with_a_term_in_doubt(&mut m, start);
    m.step(at(start, Duration::from_millis(9)), Input::Due);
    let ours = started_by(&m, STARTED);
    m.step(
        at(start, Duration::from_millis(10)),
        Input::Answer(Ok(Reply::Row(Some(ours)))),
    );
    assert!(
        matches!(m.state, State::Lapsed { term: STARTED, .. }),
        "{:?}",
        m.state
    );
    // Rounds within the ttl after the resign read; none reacquires.
    for after in [11, 100, TTL.as_millis() as u64 - 10] {
        let actions = m.step(at(start, Duration::from_millis(after)), Input::Due);
        assert_ne!(
            sent(&actions),
            Some(Statement::Reacquire { term: STARTED }),
            "{after} ms after the resign"
        );
        if sent(&actions).is_some() {
            let ours = started_by(&m, STARTED);
            m.step(
                at(start, Duration::from_millis(after + 1)),
                Input::Answer(Ok(Reply::Row(Some(ours)))),
            );
        }
    }
}
