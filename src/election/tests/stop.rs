//! The stop between a round's statements.

use super::*;

/// A stop that comes after the read found the lease free, but before the claim it
/// decided on has left, sends no claim: a stopping node starts no term.
#[tokio::test(start_paused = true)]
async fn a_stop_before_the_claim_leaves_sends_no_claim() {
    let table = MemoryStore::new();
    let ghost_term = ghost_holds_a_term(&table).await;
    tokio::time::sleep(TTL + Duration::from_millis(5)).await;
    let store = table.handle();
    let (watch, count) = (store.clone(), store.clone());
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, _status) = Election::new(settings, store);
    election.poll_only();
    // Ready at its second look once the read is under way: the read's answer has come
    // back, and the claim it decided on has not left.
    let looks = std::sync::atomic::AtomicU32::new(0);
    let shutdown = std::future::poll_fn(move |_| {
        let reading = watch.operations() == 1;
        match reading && looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1 {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    });
    let released = election.run(shutdown).await;
    assert!(released.is_none(), "{released:?}");
    let row = table.row(ELECTION).unwrap();
    assert_eq!(
        (row.term, row.live_holder()),
        (ghost_term, None),
        "no term started"
    );
    assert_eq!(count.operations(), 1, "only the read was sent");
}
