//! The clocks an election keeps time by: tokio's monotonic clock, which its timers run on,
//! and CLOCK_BOOTTIME ([`BootClock`]), which also counts time the host spent suspended, as
//! the database's clock does. A deadline is an [`Instants`] on both, and passes when either
//! says so.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A clock that goes on while the host is suspended, as the database's clock does:
/// CLOCK_BOOTTIME, as time since boot. tokio's timers run on CLOCK_MONOTONIC, which stands
/// still meanwhile, so a lease judged by it alone would outlive a suspend. Injectable so
/// that tests can suspend the host.
pub type BootClock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// The wall clock the status's `since`, `updated_at` and `valid_until` are read from:
/// the system's, or a stand-in in tests (the simulator steps it).
pub type WallClock = Arc<dyn Fn() -> std::time::SystemTime + Send + Sync>;

/// CLOCK_BOOTTIME now, as time since boot.
pub fn boottime() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .expect("CLOCK_BOOTTIME is available");
    Duration::new(now.tv_sec().max(0) as u64, now.tv_nsec() as u32)
}

/// CLOCK_BOOTTIME as seen from tokio's clock: [`boottime`], plus however far tokio's clock
/// runs ahead of the real one (never, unless tests pause and advance it). Elections use
/// it, so that paused-time tests see a boot clock that moves with their time.
pub(super) fn boottime_by_tokio() -> Duration {
    let (tokio_now, real_now) = (Instant::now().into_std(), std::time::Instant::now());
    match tokio_now.checked_duration_since(real_now) {
        Some(ahead) => boottime() + ahead,
        // A paused clock that real time has overtaken (a starved test thread).
        None => boottime().saturating_sub(real_now - tokio_now),
    }
}

/// An instant on both of this node's clocks: the monotonic one its timers run on, and
/// [`BootClock`], which also counts a suspend of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Instants {
    pub(crate) at: Instant,
    pub(crate) boot: Duration,
}

impl Instants {
    pub(super) fn now(boot: &BootClock) -> Self {
        Instants {
            at: Instant::now(),
            boot: boot(),
        }
    }

    pub(super) fn plus(self, duration: Duration) -> Self {
        Instants {
            at: self.at + duration,
            boot: self.boot + duration,
        }
    }

    /// Time left until this instant by both clocks: the host may have slept since `now`'s
    /// monotonic reading was taken, never the other way round.
    pub(super) fn left(self, now: Instants) -> Duration {
        self.at
            .saturating_duration_since(now.at)
            .min(self.boot.saturating_sub(now.boot))
    }

    pub(super) fn passed(self, now: Instants) -> bool {
        self.left(now).is_zero()
    }
}
