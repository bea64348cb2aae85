//! The lease contract: what every [`LeaseStore`] guarantees, whatever keeps the table.
//! It runs on PostgreSQL, MariaDB and SQLite through [`SqlStore`], each on a database of
//! the test's own, and on the in-memory [`MemoryStore`] the daemon's unit tests use. That
//! one's "database clock" is tokio's, running in real time here, so that the same waits
//! and the same bounds apply to it.

use super::*;
use std::future::Future;

/// A lease table the contract runs on, and connections onto it.
pub(super) trait Table {
    type Store: LeaseStore + ControlStore + Connect + 'static;
    /// A new connection to the table (opened on its first operation).
    fn store(&self) -> Self::Store;
    /// Whether its connections hint at releases ([`LeaseStore::release_notifications`]).
    fn notifies(&self) -> bool;
    /// Starts the next term of `name` for `holder` as a node of a version without the
    /// term token would (without writing it); false where no such node can write the
    /// table.
    fn start_term_as_old_version(&self, name: &str, holder: &str) -> impl Future<Output = bool>;
    /// Puts `holder` on the row of `name` in `term`, its lease live, by hand (as an
    /// operator, or a database whose clock ran ahead, might leave it).
    fn set_term(&self, name: &str, holder: &str, term: i64) -> impl Future<Output = ()>;
    /// Moves every stored time `by` later: the database clock stepped back by as much.
    fn step_clock_back(&self, by: Duration) -> impl Future<Output = ()>;
    /// Sets the handover columns of `name` by hand (an operator's UPDATE, a node of
    /// another version): `to`, and a window that ends `until` from now.
    fn set_handover(
        &self,
        name: &str,
        to: Option<&str>,
        until: Option<Duration>,
    ) -> impl Future<Output = ()>;
}

/// The term a claim or reacquire that must take the row started.
fn taken(answer: Result<Option<i64>, StoreError>) -> i64 {
    answer.unwrap().expect("the statement takes the row")
}

/// This host's clock, in microseconds since 1970.
fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Connecting ahead of the first operation, so that set-up time does not count.
pub(super) trait Connect {
    fn connect(&mut self) -> impl Future<Output = Result<(), StoreError>>;
}

/// Handles onto one in-memory table.
impl Table for MemoryStore {
    type Store = MemoryStore;

    fn store(&self) -> MemoryStore {
        self.handle()
    }

    fn notifies(&self) -> bool {
        true
    }

    async fn start_term_as_old_version(&self, _: &str, _: &str) -> bool {
        false
    }

    async fn set_term(&self, name: &str, holder: &str, term: i64) {
        self.overwrite(name, holder, term, TTL);
    }

    async fn step_clock_back(&self, by: Duration) {
        self.move_times(true, by);
    }

    async fn set_handover(&self, name: &str, to: Option<&str>, until: Option<Duration>) {
        MemoryStore::set_handover(self, name, to, until);
    }
}

impl Connect for MemoryStore {
    async fn connect(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

pub(super) async fn claim_renew_release(db: impl Table) {
    let (mut a, mut b) = (store(&db), store(&db));
    // Connect (and migrate) before any lease runs, so set-up time does not count.
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "claims";
    assert_eq!(a.get(name).await.unwrap(), None);
    a.ensure_row(name).await.unwrap();
    a.ensure_row(name).await.unwrap();
    let row = a.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.holder, row.term),
        (None, 0),
        "creating the row grants nothing"
    );

    let t1 = taken(a.claim(&lease(name, "a", TTL, 0)).await);
    assert!(
        b.claim(&lease(name, "b", TTL, 0)).await.unwrap().is_none(),
        "stale term"
    );
    assert!(
        b.claim(&lease(name, "b", TTL, t1)).await.unwrap().is_none(),
        "live lease"
    );
    assert!(a.renew(&lease(name, "a", TTL, t1)).await.unwrap());
    assert!(
        !b.renew(&lease(name, "b", TTL, t1)).await.unwrap(),
        "not the holder"
    );
    assert!(
        !a.renew(&lease(name, "a", TTL, 0)).await.unwrap(),
        "wrong term"
    );
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!((row.live_holder(), row.term), (Some("a"), t1));
    // The database runs on this host: its clock agrees with ours to well within 50 ms
    // (a time zone mix-up would be hours off).
    let offset = row
        .clock_offset_us
        .expect("a read measures the clock offset");
    assert!(offset.abs() < 50_000, "clock offset {offset} µs");
    assert!(
        row.remaining() > TTL - Duration::from_millis(300),
        "{row:?}"
    );

    assert!(!b.release(&lease(name, "b", TTL, t1)).await.unwrap());
    assert!(a.release(&lease(name, "a", TTL, t1)).await.unwrap());
    assert!(
        !a.release(&lease(name, "a", TTL, t1)).await.unwrap(),
        "released once"
    );
    assert!(
        !a.renew(&lease(name, "a", TTL, t1)).await.unwrap(),
        "a released lease cannot be renewed"
    );
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.holder.as_deref(), row.remaining()),
        (None, Duration::ZERO)
    );
    let t2 = b.claim(&lease(name, "b", TTL, t1)).await.unwrap();
    assert!(t2 > Some(t1), "a released lease is free at once");
    assert_eq!(Some(b.get(name).await.unwrap().unwrap().term), t2);
}

/// A new term is the one after the last, or the database clock in microseconds since 1970
/// if that is higher: a term acknowledged and then lost with its commit (an asynchronous
/// standby promoted without it) is not started again by the next claim, which reads a
/// later clock. The claim and the reacquire answer the term they started.
pub(super) async fn a_new_term_is_at_least_the_database_clock(db: impl Table) {
    let mut s = store(&db);
    s.connect().await.unwrap();
    let name = "floor";
    s.ensure_row(name).await.unwrap();
    let row = s.get(name).await.unwrap().unwrap();
    let offset = row
        .clock_offset_us
        .expect("a read measures the clock offset");
    let before = unix_us() + offset;
    let t1 = taken(s.claim(&lease(name, "a", TTL, 0)).await);
    let after = unix_us() + offset;
    // The database's clock and this host's agree to well within 50 ms here.
    let slack = 50_000;
    assert!(
        t1 >= before - slack && t1 <= after + slack,
        "term {t1} started between {before} and {after} by the database clock"
    );
    assert_eq!(s.get(name).await.unwrap().unwrap().term, t1);
    // Terms started in the same millisecond still grow.
    let t2 = taken(s.reacquire(&lease(name, "a", TTL, t1)).await);
    let t3 = taken(s.reacquire(&lease(name, "a", TTL, t2)).await);
    assert!(t1 < t2 && t2 < t3, "{t1} {t2} {t3}");
    // A term ahead of the clock (set by a server whose clock ran ahead): the next term is
    // the one after it.
    let ahead = after + 3_600_000_000;
    db.set_term(name, "a", ahead).await;
    assert_eq!(
        taken(s.reacquire(&lease(name, "a", TTL, ahead)).await),
        ahead + 1
    );
    s.release(&lease(name, "a", TTL, ahead + 1)).await.unwrap();
    assert_eq!(
        taken(s.claim(&lease(name, "b", TTL, ahead + 1)).await),
        ahead + 2
    );
}

pub(super) async fn leases_lapse_by_the_database_clock(db: impl Table) {
    let (mut a, mut b) = (store(&db), store(&db));
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "lapse";
    let short = Duration::from_millis(600);
    a.ensure_row(name).await.unwrap();
    let sent = Instant::now();
    let t1 = taken(a.claim(&lease(name, "a", short, 0)).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let row = b.get(name).await.unwrap().unwrap();
    // Sub-second precision: whole-second timestamps would show 0 or 1000.
    assert!(
        row.age >= Duration::from_millis(150)
            && row.age <= sent.elapsed() + Duration::from_millis(20),
        "age {:?} after {:?}",
        row.age,
        sent.elapsed()
    );
    assert!(
        b.claim(&lease(name, "b", TTL, t1)).await.unwrap().is_none(),
        "still live before its lease ends"
    );

    // Past the lease by the database clock (it executed the claim after `sent`).
    tokio::time::sleep(
        (sent + short + Duration::from_millis(30)).saturating_duration_since(Instant::now()),
    )
    .await;
    assert!(
        !a.renew(&lease(name, "a", short, t1)).await.unwrap(),
        "a lapsed lease is not renewed"
    );
    let t2 = b.claim(&lease(name, "b", TTL, t1)).await.unwrap();
    assert!(t2 > Some(t1), "a lapsed lease can be taken");
    let t2 = t2.unwrap();
    assert!(
        a.reacquire(&lease(name, "a", TTL, t1))
            .await
            .unwrap()
            .is_none(),
        "not ours any more"
    );

    // The holder of a row can start a new term on it while it still holds it.
    let t3 = b.reacquire(&lease(name, "b", TTL, t2)).await.unwrap();
    assert!(t3 > Some(t2));
    assert_eq!(Some(a.get(name).await.unwrap().unwrap().term), t3);
}

pub(super) async fn ids_are_compared_exactly(db: impl Table) {
    let mut s = store(&db);
    let name = "exact";
    s.ensure_row(name).await.unwrap();
    let t1 = taken(s.claim(&lease(name, "node-a", TTL, 0)).await);
    assert!(
        !s.renew(&lease(name, "Node-A", TTL, t1)).await.unwrap(),
        "case-insensitive match"
    );
    assert!(!s.release(&lease(name, "NODE-A", TTL, t1)).await.unwrap());
    assert!(s.renew(&lease(name, "node-a", TTL, t1)).await.unwrap());
    // Election names, too.
    assert_eq!(s.get("EXACT").await.unwrap(), None);
}

pub(super) async fn concurrent_claims_have_one_winner(db: impl Table) {
    let mut setup = store(&db);
    setup.ensure_row("race").await.unwrap();
    let mut term = 0;
    for round in 0..5 {
        let mut tasks = Vec::new();
        for i in 0..5 {
            let mut s = store(&db);
            tasks.push(tokio::spawn(async move {
                s.claim(&lease(
                    "race",
                    &format!("n{i}"),
                    Duration::from_millis(1),
                    term,
                ))
                .await
                .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            winners.extend(task.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert!(winners[0] > term);
        term = winners[0];
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A release wakes the nodes waiting for that name, and only them: PostgreSQL through
/// NOTIFY, MySQL and SQLite through the side lock the holder lets go of (`wakeup.rs`).
pub(super) async fn a_release_notifies_where_the_backend_can_tell(db: impl Table) {
    let mut holder = store(&db);
    holder.connect().await.unwrap();
    let waiter = store(&db);
    let Some(mut woken) = waiter.release_notifications("notified") else {
        assert!(!db.notifies(), "every backend has wake-ups");
        return;
    };
    let mut other_name = waiter.release_notifications("other").unwrap();
    holder.ensure_row("notified").await.unwrap();
    let t1 = taken(holder.claim(&lease("notified", "a", TTL, 0)).await);
    // A listener may wake once when it starts (a release may have come first), and a
    // waiter for a side lock finds it held within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for listener in [&mut woken, &mut other_name] {
        while listener.try_recv().is_ok() {}
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(woken.try_recv().is_err(), "a claim is not a release");
    let released_at = Instant::now();
    assert!(
        holder
            .release(&lease("notified", "a", TTL, t1))
            .await
            .unwrap()
    );
    tokio::time::timeout(Duration::from_secs(2), woken.recv())
        .await
        .expect("the release is notified");
    let after = released_at.elapsed();
    assert!(
        after < Duration::from_millis(500),
        "notified after {after:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        other_name.try_recv().is_err(),
        "another name's listener stays asleep"
    );
    // A release that changed nothing tells nobody.
    assert!(
        !holder
            .release(&lease("notified", "a", TTL, t1))
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(woken.try_recv().is_err());
}

/// A claim or a reacquire marks the term it starts with its process's token, and `get`
/// returns it: a node whose claim's answer was lost tells its own term from one another
/// process with the same node id started. A node of a version without the column (here
/// its claim, run by hand) starts a term without writing it; the value it leaves behind
/// must not pass for that term.
pub(super) async fn the_term_token_tells_which_process_started_the_term(db: impl Table) {
    let mut s = store(&db);
    let (first, second) = (ProcessToken::random(), ProcessToken::random());
    let name = "tokens";
    s.ensure_row(name).await.unwrap();
    let row = s.get(name).await.unwrap().unwrap();
    assert_eq!(row.term_token, None, "no process started a term yet");
    assert!(!row.started_by(first));

    let t1 = taken(
        s.claim(&Lease {
            token: first,
            ..lease(name, "twin", TTL, 0)
        })
        .await,
    );
    let row = s.get(name).await.unwrap().unwrap();
    assert_eq!(row.term_token, Some(first.value()));
    assert!(row.started_by(first));
    assert!(
        !row.started_by(second),
        "the same node id in another process"
    );
    assert!(s.renew(&lease(name, "twin", TTL, t1)).await.unwrap());
    assert!(s.release(&lease(name, "twin", TTL, t1)).await.unwrap());
    let t2 = taken(
        s.claim(&Lease {
            token: first,
            ..lease(name, "twin", TTL, t1)
        })
        .await,
    );
    assert!(s.get(name).await.unwrap().unwrap().started_by(first));
    let t3 = taken(
        s.reacquire(&Lease {
            token: second,
            ..lease(name, "twin", TTL, t2)
        })
        .await,
    );
    let row = s.get(name).await.unwrap().unwrap();
    assert_eq!(row.term, t3);
    assert!(row.started_by(second) && !row.started_by(first));

    if !db.start_term_as_old_version(name, "twin").await {
        return;
    }
    let row = s.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.term, row.term_token),
        (t3 + 1, Some(second.value())),
        "left behind"
    );
    assert!(!row.started_by(second), "a term this process did not start");
}

/// `held_for` counts from the start of the term, by the database clock: a claim and a
/// reacquire start it, a renewal keeps it (`leaderd locks` shows it as the time held). A
/// term started by a node of a version without the column has none: the time the previous
/// term left behind must not pass for this one's.
pub(super) async fn the_time_held_counts_from_the_start_of_the_term(db: impl Table) {
    let mut s = store(&db);
    s.connect().await.unwrap();
    let name = "held";
    s.ensure_row(name).await.unwrap();
    assert_eq!(s.get(name).await.unwrap().unwrap().held_for, None);
    let a = lease(name, "a", TTL, 0);
    let claimed = Instant::now();
    let t1 = taken(s.claim(&a).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.renew(&a.in_term(t1)).await.unwrap());
    let row = s.get(name).await.unwrap().unwrap();
    let held = row.held_for.expect("a claim records when the term started");
    // Milliseconds on every backend, from two clocks that agree to well within 50 ms.
    let margin = Duration::from_millis(50);
    assert!(
        held + margin >= Duration::from_millis(300) && held <= claimed.elapsed() + margin,
        "held {held:?} after {:?}",
        claimed.elapsed()
    );
    assert!(row.age < held, "a renewal keeps the term's start: {row:?}");

    let reacquired = Instant::now();
    let t2 = taken(s.reacquire(&a.in_term(t1)).await);
    let held = s.get(name).await.unwrap().unwrap().held_for.unwrap();
    assert!(
        held <= reacquired.elapsed() + margin,
        "a reacquire starts the count again: held {held:?}"
    );

    if !db.start_term_as_old_version(name, "old").await {
        return;
    }
    let row = s.get(name).await.unwrap().unwrap();
    assert_eq!((row.term, row.held_for), (t2 + 1, None), "{row:?}");
}

/// `leaderd pause`: no claim of a free or lapsed lease, no reacquire of a lapsed one, while
/// a live leader keeps renewing, stating that it has seen the pause; `resume` ends it, and
/// a pause ends by itself when its time is up.
pub(super) async fn a_pause_keeps_free_and_lapsed_leases_from_every_claim(db: impl Table) {
    let (mut a, mut b) = (store(&db), store(&db));
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "paused";
    let short = Duration::from_millis(300);
    a.ensure_row(name).await.unwrap();
    let t1 = taken(a.claim(&lease(name, "a", short, 0)).await);
    b.pause(name, Duration::from_secs(60)).await.unwrap();
    let row = b.get(name).await.unwrap().unwrap();
    assert!(row.paused() && row.pending.paused_for.unwrap() > Duration::from_secs(50));
    let paused = Commands {
        paused: true,
        ..Commands::default()
    };
    assert!(
        !a.renew(&lease(name, "a", short, t1)).await.unwrap(),
        "a renewal that has not seen the pause"
    );
    assert!(
        a.renew_seeing(&lease(name, "a", short, t1), paused)
            .await
            .unwrap()
    );
    let t2 = a.reacquire(&lease(name, "a", short, t1)).await.unwrap();
    assert!(
        t2 > Some(t1),
        "a live lease starts a new term during a pause"
    );
    let t2 = t2.unwrap();
    assert!(a.release(&lease(name, "a", TTL, t2)).await.unwrap());
    assert!(
        b.claim(&lease(name, "b", TTL, t2)).await.unwrap().is_none(),
        "a released lease during a pause"
    );
    assert!(
        a.claim(&lease(name, "a", short, t2))
            .await
            .is_ok_and(|c| c.is_none())
    );
    // The pause outlives a lease taken before it.
    b.resume(name).await.unwrap();
    let t3 = taken(a.claim(&lease(name, "a", short, t2)).await);
    b.pause(name, Duration::from_secs(60)).await.unwrap();
    tokio::time::sleep(short + Duration::from_millis(50)).await;
    assert!(
        a.reacquire(&lease(name, "a", short, t3))
            .await
            .unwrap()
            .is_none(),
        "a lapsed lease is not reacquired during a pause"
    );
    assert!(
        b.claim(&lease(name, "b", TTL, t3)).await.unwrap().is_none(),
        "a lapsed lease during a pause"
    );
    assert!(b.resume(name).await.unwrap());
    assert!(!b.get(name).await.unwrap().unwrap().paused());
    let t4 = taken(b.claim(&lease(name, "b", TTL, t3)).await);
    // A pause ends when its time is up.
    assert!(b.release(&lease(name, "b", TTL, t4)).await.unwrap());
    b.pause(name, Duration::from_millis(200)).await.unwrap();
    assert!(a.claim(&lease(name, "a", TTL, t4)).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(!b.get(name).await.unwrap().unwrap().paused());
    assert!(a.claim(&lease(name, "a", TTL, t4)).await.unwrap().is_some());
    // Resuming an election without a row finds nothing; pausing one creates it.
    assert!(!b.resume("no-row").await.unwrap());
    b.pause("no-row", Duration::from_secs(1)).await.unwrap();
    assert!(b.get("no-row").await.unwrap().is_some());
}

/// `leaderd resign` and `handover`: asked of a live term only; the leader's renewal that
/// has not seen the request matches nothing; the resigned term is not reacquired; after a
/// handover only the target claims until the window (two lease lengths) ends, then anyone.
pub(super) async fn a_handover_lets_only_its_target_claim_within_its_window(db: impl Table) {
    let (mut a, mut b, mut c) = (store(&db), store(&db), store(&db));
    for s in [&mut a, &mut b, &mut c] {
        s.connect().await.unwrap();
    }
    let name = "handover";
    let short = Duration::from_millis(400);
    let resign_seen = Commands {
        resign: true,
        ..Commands::default()
    };
    a.ensure_row(name).await.unwrap();
    let t1 = taken(a.claim(&lease(name, "a", short, 0)).await);
    assert!(
        !c.request_step_down(name, "a", 0, StepDownRequest::Resign)
            .await
            .unwrap(),
        "a term that is not the live one"
    );
    assert!(
        c.request_step_down(name, "a", t1, StepDownRequest::Resign)
            .await
            .unwrap()
    );
    assert_eq!(
        a.get(name).await.unwrap().unwrap().pending.resign_term,
        Some(t1)
    );
    assert!(!a.renew(&lease(name, "a", short, t1)).await.unwrap());
    assert!(
        a.renew_seeing(&lease(name, "a", short, t1), resign_seen)
            .await
            .unwrap()
    );
    assert!(
        a.reacquire(&lease(name, "a", short, t1))
            .await
            .unwrap()
            .is_none(),
        "a resigned term is not started again by its holder"
    );
    assert!(a.release(&lease(name, "a", TTL, t1)).await.unwrap());
    let t2 = taken(b.claim(&lease(name, "b", short, t1)).await);
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!(row.pending.resign_term, None, "a new term starts clean");

    // Handover from b (term t2) to c, offered first: the leader is not asked until c
    // accepts, and only c can.
    let offer = StepDownRequest::Offer { to: "c" };
    assert!(a.request_step_down(name, "b", t2, offer).await.unwrap());
    let row = a.get(name).await.unwrap().unwrap();
    assert_eq!(
        row.pending.resign_term, None,
        "an offer asks nothing of the leader"
    );
    assert!(row.offered_to("c") && !row.offered_to("a"));
    assert!(
        b.renew(&lease(name, "b", short, t2)).await.unwrap(),
        "the leader renews as before"
    );
    assert!(
        !a.accept_handover(name, "a", t2).await.unwrap(),
        "not offered to a"
    );
    for other in [
        StepDownRequest::Resign,
        StepDownRequest::Offer { to: "a" },
        StepDownRequest::Handover { to: "a" },
    ] {
        assert!(
            !a.request_step_down(name, "b", t2, other).await.unwrap(),
            "an offer is not overwritten: {other:?}"
        );
    }
    assert!(
        !c.accept_handover(name, "c", t1).await.unwrap(),
        "a stale term"
    );
    assert!(c.accept_handover(name, "c", t2).await.unwrap());
    assert!(
        !a.request_step_down(name, "b", t2, StepDownRequest::Resign)
            .await
            .unwrap(),
        "a term asked to step down is not asked again"
    );
    let row = a.get(name).await.unwrap().unwrap();
    assert_eq!(row.pending.handover_to.as_deref(), Some("c"));
    let window = row.pending.handover_for.unwrap();
    assert!(
        window > short && window <= short * 2,
        "the window is two lease lengths: {window:?}"
    );
    assert!(
        b.renew_seeing(&lease(name, "b", short, t2), resign_seen)
            .await
            .unwrap()
    );
    assert!(b.release(&lease(name, "b", TTL, t2)).await.unwrap());
    assert!(
        a.claim(&lease(name, "a", short, t2))
            .await
            .unwrap()
            .is_none(),
        "only the target claims within the window"
    );
    assert!(
        b.reacquire(&lease(name, "b", short, t2))
            .await
            .unwrap()
            .is_none(),
        "nor the old holder"
    );
    let t3 = taken(c.claim(&lease(name, "c", short, t2)).await);
    let row = a.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.pending.handover_to, row.pending.handover_for),
        (None, None),
        "the target's claim ends the handover"
    );

    // A handover (not an offer: `--force`) to a node that never claims: anyone may, once
    // the window is over.
    let forced = StepDownRequest::Handover { to: "gone" };
    assert!(a.request_step_down(name, "c", t3, forced).await.unwrap());
    assert!(
        c.renew_seeing(&lease(name, "c", short, t3), resign_seen)
            .await
            .unwrap(),
        "asked at once"
    );
    assert!(c.release(&lease(name, "c", TTL, t3)).await.unwrap());
    assert!(
        a.claim(&lease(name, "a", short, t3))
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(short * 2 + Duration::from_millis(50)).await;
    let row = a.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.pending.handover_to, row.pending.handover_for),
        (None, None),
        "a handover whose window is over reads as none"
    );
    assert!(
        a.claim(&lease(name, "a", short, t3))
            .await
            .unwrap()
            .is_some()
    );
}

/// `leaderd_member`: a record refreshes `last_seen`, a fresh one restarts `started`; the
/// preemption hold lasts its time; pruning forgets members not seen for long.
pub(super) async fn members_are_recorded_by_the_database_clock(db: impl Table) {
    let mut s = store(&db);
    s.connect().await.unwrap();
    let record = |node: &str, candidate: bool| MemberRecord {
        election: "members".to_owned(),
        node_id: node.to_owned(),
        standing: match candidate {
            true => MemberStanding::Candidate,
            false => MemberStanding::Observer,
        },
        priority: 3,
        version: "1.0".to_owned(),
        host: "h".to_owned(),
        order: RecordOrder::default(),
    };
    s.record_member(&record("a", true), true).await.unwrap();
    s.record_member(&record("b", false), true).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.record_member(&record("a", true), false).await.unwrap();
    s.hold_preemption("members", "b", Duration::from_secs(60))
        .await
        .unwrap();
    let members = s.members("members").await.unwrap();
    assert_eq!(
        members
            .iter()
            .map(|m| m.node_id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    let (a, b) = (&members[0], &members[1]);
    assert!(a.candidate && !b.candidate && a.priority == 3);
    assert_eq!(
        (a.standing, b.standing),
        (
            Some(MemberStanding::Candidate),
            Some(MemberStanding::Observer)
        )
    );
    assert!(a.member_for >= Duration::from_millis(150), "{a:?}");
    assert!(a.seen_ago < Duration::from_millis(150), "{a:?}");
    assert!(b.seen_ago >= Duration::from_millis(150), "{b:?}");
    assert_eq!(a.no_preempt_for, None);
    assert!(b.no_preempt_for.unwrap() > Duration::from_secs(50));
    // A shorter hold (a preemption's) never cuts an operator's longer one short.
    s.hold_preemption("members", "b", Duration::from_secs(4))
        .await
        .unwrap();
    let members = s.members("members").await.unwrap();
    assert!(members[1].no_preempt_for.unwrap() > Duration::from_secs(50));
    s.hold_preemption("members", "a", Duration::from_secs(4))
        .await
        .unwrap();
    let members = s.members("members").await.unwrap();
    let a_hold = members[0].no_preempt_for.unwrap();
    assert!(a_hold > Duration::from_secs(2) && a_hold <= Duration::from_secs(4));
    s.record_member(&record("a", true), true).await.unwrap();
    let members = s.members("members").await.unwrap();
    assert!(members[0].member_for < Duration::from_millis(150));
    // A node that stops says so: gone at once.
    let stopped = MemberRecord {
        standing: MemberStanding::Unhealthy,
        ..record("b", true)
    };
    s.record_member(&stopped, false).await.unwrap();
    assert_eq!(
        s.members("members").await.unwrap()[1].standing(),
        MemberStanding::Unhealthy
    );
    let stopped = MemberRecord {
        standing: MemberStanding::Stopped,
        ..record("b", true)
    };
    s.record_member(&stopped, false).await.unwrap();
    let members = s.members("members").await.unwrap();
    assert!(members[1].gone() && !members[1].candidate && !members[0].gone());
    s.prune_members("members").await.unwrap();
    assert_eq!(s.members("members").await.unwrap().len(), 2, "seen lately");
    assert!(s.members("other").await.unwrap().is_empty());
    // A late record of a process (it waited behind a row lock after its client gave up)
    // never overwrites a later one, such as its stop; another process's always applies.
    let ordered = |standing, process, count| MemberRecord {
        standing,
        order: RecordOrder { process, count },
        ..record("c", true)
    };
    let c = |members: Vec<Member>| members[2].standing();
    s.record_member(&ordered(MemberStanding::Stopped, 7, 2), true)
        .await
        .unwrap();
    s.record_member(&ordered(MemberStanding::Candidate, 7, 1), false)
        .await
        .unwrap();
    assert_eq!(
        c(s.members("members").await.unwrap()),
        MemberStanding::Stopped
    );
    s.record_member(&ordered(MemberStanding::Candidate, 8, 1), true)
        .await
        .unwrap();
    assert_eq!(
        c(s.members("members").await.unwrap()),
        MemberStanding::Candidate
    );
}

/// A handover target with no window (left by hand, or by a node of another version) is no
/// handover: every node may claim, and the leader can be asked to step down, as a read of
/// the row says (`handover_to` reads as none). SQL's `handover_until <= now` is NULL for it,
/// which kept every other node from the lease for good.
pub(super) async fn a_handover_without_a_window_is_none(db: impl Table) {
    let (mut a, mut b) = (store(&db), store(&db));
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "windowless";
    a.ensure_row(name).await.unwrap();
    let t1 = taken(a.claim(&lease(name, "a", TTL, 0)).await);
    db.set_handover(name, Some("c"), None).await;
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!(
        (row.pending.handover_to, row.pending.handover_for),
        (None, None),
        "reads as no handover"
    );
    let t2 = a.reacquire(&lease(name, "a", TTL, t1)).await.unwrap();
    assert!(t2 > Some(t1), "its leader starts a new term");
    let t2 = t2.unwrap();
    db.set_handover(name, Some("c"), None).await;
    assert!(
        b.request_step_down(name, "a", t2, StepDownRequest::Handover { to: "b" })
            .await
            .unwrap(),
        "its leader can be asked to hand over"
    );
    assert!(a.release(&lease(name, "a", TTL, t2)).await.unwrap());
    let t3 = taken(b.claim(&lease(name, "b", TTL, t2)).await);
    assert!(b.release(&lease(name, "b", TTL, t3)).await.unwrap());
    db.set_handover(name, Some("c"), None).await;
    assert!(
        a.claim(&lease(name, "a", TTL, t3)).await.unwrap().is_some(),
        "a node other than the target claims the free lease"
    );
}

/// `leaderd lock --hold-at-least` after the database clock stepped back past the last
/// renewal: the lease still lasts at least the time asked (its length from the renewal
/// is never below zero, which PostgreSQL's and SQLite's tables refused with an error,
/// and which MySQL stored, so that a read showed the held lease as lapsed).
pub(super) async fn a_hold_after_the_clock_stepped_back_lasts_its_time(db: impl Table) {
    let (mut a, mut b) = (store(&db), store(&db));
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "lock:stepped";
    a.ensure_row(name).await.unwrap();
    let t1 = taken(a.claim(&lease(name, "a", TTL, 0)).await);
    db.step_clock_back(Duration::from_secs(3)).await;
    let left = Duration::from_secs(1);
    assert!(a.hold(&lease(name, "a", TTL, t1), left).await.unwrap());
    let row = b.get(name).await.unwrap().unwrap();
    assert_eq!(row.live_holder(), Some("a"), "{row:?}");
    assert!(
        row.remaining() >= left - Duration::from_millis(100),
        "{row:?}"
    );
    assert!(
        b.claim(&lease(name, "b", TTL, t1)).await.unwrap().is_none(),
        "held"
    );
}

/// A resign written after a handover offer whose window passed unanswered ends the offer:
/// the release gives its target no window again, and another node claims at once. The
/// simulator's property 20 found it (seed 4749): the offer's target was dead, and the
/// resigner took the lead back when the window the release had given it ended.
pub(super) async fn a_resign_ends_an_offer_that_went_unanswered(db: impl Table) {
    let (mut a, mut b) = (store(&db), store(&db));
    a.connect().await.unwrap();
    b.connect().await.unwrap();
    let name = "unanswered";
    a.ensure_row(name).await.unwrap();
    let t1 = taken(a.claim(&lease(name, "a", TTL, 0)).await);
    db.set_handover(name, Some("c"), Some(Duration::from_millis(1)))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        b.request_step_down(name, "a", t1, StepDownRequest::Resign)
            .await
            .unwrap(),
        "an offer that is over does not keep the leader from being asked"
    );
    assert!(a.release(&lease(name, "a", TTL, t1)).await.unwrap());
    assert!(
        b.claim(&lease(name, "b", TTL, t1)).await.unwrap().is_some(),
        "no window for the target of an offer that is over"
    );
}
