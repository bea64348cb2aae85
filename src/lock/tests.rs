//! The lock against the in-memory store, with tokio's clock paused.

use super::*;
use crate::election::safety_margin;
use crate::store::StoreError;
use crate::store::memory::{Faults, MemoryStore};

const NAME: &str = "nightly-report";
const TTL: Duration = Duration::from_secs(30);

fn options(holder: &str) -> LockOptions {
    LockOptions::new(NAME, TTL).unwrap().holder(holder).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_free_lock_is_taken_and_a_second_holder_is_told_who_has_it() {
    let table = MemoryStore::new();
    let first = options("a").try_acquire(table.handle()).await.unwrap();
    assert_eq!(
        (first.term(), first.holder()),
        (table.row(NAME).unwrap().term, "a")
    );
    assert!(first.is_held());

    tokio::time::sleep(Duration::from_secs(4)).await;
    let refused = options("b").try_acquire(table.handle()).await.unwrap_err();
    let LockError::Held {
        holder,
        term,
        lapses_in,
        waited,
        ..
    } = &refused
    else {
        panic!("expected Held, got {refused:?}");
    };
    assert_eq!(
        (holder.as_str(), *term, *waited),
        ("a", first.term(), Duration::ZERO)
    );
    // Renewed every 10 s: 26 s to 30 s left.
    assert!(
        *lapses_in > Duration::from_secs(25) && *lapses_in <= TTL,
        "{lapses_in:?}"
    );
    let message = refused.to_string();
    let held = format!(
        "lock \"nightly-report\" is held by a (term {}); its lease lapses in 2",
        first.term()
    );
    assert!(message.starts_with(&held), "{message}");
    // The refused attempt left the row alone.
    assert_eq!(table.row(NAME).unwrap().live_holder(), Some("a"));
    assert!(first.is_held());
}

/// A holds the lock for 5 s while B waits; returns how long after A's release B had it.
async fn wait_for_release(table: MemoryStore) -> Duration {
    let first = options("a").try_acquire(table.handle()).await.unwrap();
    let first_term = first.term();
    let waiter = tokio::spawn(options("b").acquire(table.handle(), Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let released_at = Instant::now();
    assert!(first.release().await.unwrap());
    let second = waiter.await.unwrap().unwrap();
    assert!(second.term() > first_term);
    released_at.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_waiting_holder_is_woken_by_the_release() {
    let after = wait_for_release(MemoryStore::new()).await;
    assert!(
        after <= Duration::from_millis(1),
        "took {after:?} after the release"
    );
}

#[tokio::test(start_paused = true)]
async fn without_notifications_a_waiting_holder_polls_every_second() {
    let after = wait_for_release(MemoryStore::without_release_notifications()).await;
    assert!(
        after > Duration::from_millis(1) && after <= MAX_POLL,
        "took {after:?} after the release"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_runs_out_reports_the_holder_and_how_long_it_waited() {
    let table = MemoryStore::new();
    let _first = options("a").try_acquire(table.handle()).await.unwrap();
    let started = Instant::now();
    let refused = options("b")
        .acquire(table.handle(), Duration::from_secs(3))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(&refused, LockError::Held { holder, waited, .. } if holder == "a" && *waited == Duration::from_secs(3)),
        "{refused:?}"
    );
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_millis(3100),
        "{elapsed:?}"
    );
    assert!(refused.to_string().ends_with("(gave up after waiting 3s)"));
}

#[tokio::test(start_paused = true)]
async fn a_stale_lock_is_taken_the_moment_its_lease_lapses() {
    let table = MemoryStore::new();
    table.overwrite(NAME, "crashed", 7, TTL);
    let started = Instant::now();
    let taken = options("b")
        .acquire(table.handle(), Duration::from_secs(60))
        .await
        .unwrap();
    let after = started.elapsed();
    assert!(
        // Followers poll within 20 ms after the lapse (ElectionSettings::lapse_spread).
        after >= TTL && after <= TTL + Duration::from_millis(30),
        "{after:?}"
    );
    assert!(taken.term() > 7);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_database_is_reported_not_waited_on_forever() {
    let table = MemoryStore::new();
    let store = table.handle();
    store.set_faults(Faults {
        fail: true,
        ..Faults::default()
    });
    let refused = options("a").try_acquire(store.clone()).await.unwrap_err();
    assert!(
        matches!(refused, LockError::Unavailable { .. }),
        "{refused:?}"
    );
    // The store's own error comes along as the source.
    let source = std::error::Error::source(&refused).expect("a source");
    assert!(source.is::<StoreError>(), "{source:?}");
    let started = Instant::now();
    let refused = options("a")
        .acquire(store.clone(), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(refused, LockError::Unavailable { .. }));
    assert!(started.elapsed() >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_database_failing_for_a_moment_does_not_refuse_a_try_once_lock() {
    let table = MemoryStore::new();
    let store = table.handle();
    store.set_faults(Faults {
        fail: true,
        ..Faults::default()
    });
    let recovers = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        recovers.set_faults(Faults::default());
    });
    let held = options("a").try_acquire(store).await;
    assert!(held.is_ok(), "{held:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lock_is_lost_before_its_lease_can_lapse_and_never_retaken() {
    let table = MemoryStore::new();
    let store = table.handle();
    let guard = options("a").try_acquire(store.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let last_renewal = Instant::now() - table.row(NAME).unwrap().age;
    store.set_faults(Faults {
        fail: true,
        ..Faults::default()
    });
    guard.lost().await;
    let lost_after = last_renewal.elapsed();
    assert!(!guard.is_held());
    assert!(
        lost_after < TTL && lost_after >= TTL - safety_margin(TTL) - Duration::from_millis(1),
        "lost {lost_after:?} after the last renewal"
    );
    // The table still holds the lease for a: nobody else could have started yet.
    assert_eq!(table.row(NAME).unwrap().live_holder(), Some("a"));
    let held = guard.term();
    assert!(matches!(
        guard.extend().await,
        Err(LockError::Lost { term, .. }) if term == held
    ));

    // The database comes back while the row still names a: an election would take a new
    // term at once; the lock does not, and it does not poll faster than once a second.
    store.set_faults(Faults::default());
    let before = store.operations();
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(!guard.is_held());
    assert_eq!(table.row(NAME).unwrap().term, held);
    let reads = store.operations() - before;
    assert!(reads <= 41, "{reads} operations in 40 s");

    let other = options("b").try_acquire(table.handle()).await.unwrap();
    assert!(other.term() > held);
    assert!(!guard.is_held());
    assert!(!guard.release().await.unwrap(), "the row is b's now");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_releases_what_it_took() {
    let table = MemoryStore::new();
    let first = options("a").try_acquire(table.handle()).await.unwrap();
    let first_term = first.term();
    let slow = table.handle();
    // b's statements take effect 50 ms after they are sent. Its read at 5 s finds the
    // lease free at 5.05 s; its claim is on its way when the wait is cancelled at 5.07 s.
    // (A stop ends a round at the statement in flight: a cancel during the read would
    // send no claim.)
    slow.set_faults(Faults {
        latency: Duration::from_millis(50),
        ..Faults::default()
    });
    let cancel = async {
        tokio::time::sleep(Duration::from_secs(5) + Duration::from_millis(70)).await;
    };
    let waiter = tokio::spawn(options("b").acquire_unless(slow, Duration::MAX, cancel));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(first.release().await.unwrap());
    let cancelled = waiter.await.unwrap().unwrap_err();
    assert!(
        matches!(cancelled, LockError::Cancelled { .. }),
        "{cancelled:?}"
    );
    let row = table.row(NAME).unwrap();
    assert_eq!(
        (row.holder, row.term > first_term),
        (None, true),
        "b's claim landed and was released"
    );
}

/// A release listener (a second connection on PostgreSQL) lives only while a lock is
/// waited for: not for a single try, and not once the lock is held.
#[tokio::test(start_paused = true)]
async fn only_a_waiting_lock_listens_for_releases() {
    let table = MemoryStore::new();
    let first = options("a").try_acquire(table.handle()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(table.listeners(), (0, 0), "try_acquire does not listen");
    let waiter = tokio::spawn(options("b").acquire(table.handle(), Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(table.listeners(), (1, 1), "a waiter listens");
    assert!(first.release().await.unwrap());
    let second = waiter.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(table.listeners(), (0, 1), "a held lock does not");
    assert!(second.is_held());
}

#[tokio::test(start_paused = true)]
async fn waiting_without_a_limit_is_allowed() {
    let table = MemoryStore::new();
    let guard = options("a")
        .acquire(table.handle(), Duration::MAX)
        .await
        .unwrap();
    assert_eq!(guard.term(), table.row(NAME).unwrap().term);
}

#[tokio::test(start_paused = true)]
async fn extending_renews_at_once_and_moves_the_deadline() {
    let table = MemoryStore::new();
    let store = table.handle();
    let guard = options("a").try_acquire(store.clone()).await.unwrap();
    let first = guard.deadline().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let extended = guard.extend().await.unwrap();
    assert_eq!(extended, guard.deadline().unwrap());
    assert!(
        extended >= first + Duration::from_secs(2),
        "{first:?} -> {extended:?}"
    );
    assert_eq!(store.last_operation(), "renew");
    assert!(table.row(NAME).unwrap().age < Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn a_lock_outlives_many_ttls_in_one_term_with_one_statement_per_renewal() {
    let table = MemoryStore::new();
    let store = table.handle();
    let guard = options("a").try_acquire(store.clone()).await.unwrap();
    let before = store.operations();
    let term = guard.term();
    tokio::time::sleep(TTL * 5 + Duration::from_millis(1)).await;
    assert!(guard.is_held());
    assert_eq!((guard.term(), table.row(NAME).unwrap().term), (term, term));
    // A renewal every ttl/3.
    assert_eq!(store.operations() - before, 15);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_guard_releases_the_lock() {
    let table = MemoryStore::new();
    let guard = options("a").try_acquire(table.handle()).await.unwrap();
    let term = guard.term();
    drop(guard);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(table.row(NAME).unwrap().holder, None);
    let next = options("b").try_acquire(table.handle()).await.unwrap();
    assert!(next.term() > term);
}

#[test]
fn options_name_what_is_wrong() {
    let error = LockOptions::new("", TTL).unwrap_err().to_string();
    assert_eq!(error, "lock name \"\": must not be empty");
    let long = "x".repeat(101);
    let error = LockOptions::new(&long, TTL).unwrap_err().to_string();
    assert!(error.contains("is 101 characters long"), "{error}");
    let error = LockOptions::new("x", Duration::from_millis(10))
        .unwrap_err()
        .to_string();
    assert_eq!(error, "lock ttl \"10ms\": must be between 100ms and 1day");
    let error = LockOptions::new("x", TTL)
        .unwrap()
        .renew_every(TTL)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("lock ttl \"30s\": must be greater than renewal interval (30s)"),
        "{error}"
    );
    let holders = [LockOptions::default_holder(), LockOptions::default_holder()];
    assert_ne!(holders[0], holders[1]);
    assert!(holders[0].contains(&format!(":{}:", std::process::id())));
}
