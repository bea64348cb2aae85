//! A host that sleeps: CLOCK_BOOTTIME ends leadership that the monotonic clock would let
//! run on.

use super::*;

/// A boot clock that follows tokio's clock, plus the time a test says the host slept.
#[derive(Clone, Default)]
struct SleepingHost(Arc<std::sync::atomic::AtomicU64>);

impl SleepingHost {
    fn clock(&self) -> BootClock {
        let slept = Arc::clone(&self.0);
        Arc::new(move || {
            boottime_by_tokio()
                + Duration::from_nanos(slept.load(std::sync::atomic::Ordering::SeqCst))
        })
    }

    /// The host was suspended for `duration`: boot time moves, monotonic time does not.
    fn sleep(&self, duration: Duration) {
        self.0.fetch_add(
            duration.as_nanos() as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

fn start_on_sleeping_host(store: &MemoryStore, host: &SleepingHost) -> watch::Receiver<Status> {
    let settings = ElectionSettings::new(ELECTION, "a", TTL, INTERVAL).unwrap();
    let (mut election, status) = Election::new(settings, store.clone());
    election.set_boot_clock(host.clock());
    tokio::spawn(election.run(std::future::pending()));
    status
}

#[tokio::test(start_paused = true)]
async fn a_leader_stops_acting_when_the_host_slept_past_its_deadline() {
    let table = MemoryStore::new();
    let host = SleepingHost::default();
    let status = start_on_sleeping_host(&table, &host);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(status.borrow().role, Role::Leader);

    // Right after a renewal the monotonic deadline is over a second away; the host
    // sleeps for two.
    tokio::time::sleep(INTERVAL).await;
    let before = status.borrow().clone();
    assert_eq!(before.role, Role::Leader);
    assert!(before.lease_deadline.unwrap() > Instant::now() + TTL - INTERVAL);
    host.sleep(Duration::from_secs(2));
    tokio::time::sleep(BOOT_LOOK_EVERY + STEP).await;
    let after = status.borrow().clone();
    assert_ne!(
        after.role,
        Role::Leader,
        "still leading after the host slept past the lease"
    );
    assert!(after.valid_until <= SystemTime::now() + INTERVAL + TTL);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_answered_after_the_host_slept_is_not_trusted() {
    let table = MemoryStore::new();
    let host = SleepingHost::default();
    let store = table.handle();
    let status = start_on_sleeping_host(&store, &host);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let led = status.borrow().term;
    // Every answer now takes 30 ms: the next renewal is sent, the host sleeps while it
    // is on its way, and its answer arrives after the wake.
    store.set_faults(Faults {
        answer_delay: Duration::from_millis(30),
        ..Faults::default()
    });
    let renewed = status.borrow().lease_deadline.unwrap() - (TTL - safety_margin(TTL));
    tokio::time::sleep_until(renewed + INTERVAL + Duration::from_millis(10)).await;
    host.sleep(Duration::from_secs(2));
    // The answer is in 20 ms later; the next look at the boot clock is 90 ms away.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let seen = status.borrow().clone();
    assert!(
        !(seen.role == Role::Leader && seen.term == led),
        "a renewal sent before the host slept extended the lease: {seen:?}"
    );
}
