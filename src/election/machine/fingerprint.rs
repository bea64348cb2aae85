//! What decides a machine's next steps, fed to a hasher: the exhaustive check
//! (`sim/exhaustive`) merges states by it.

use std::fmt::{self, Debug, Write};
use std::hash::{Hash, Hasher};

use super::Machine;

impl Machine {
    /// Feeds the state, the round, the timers, the link and what was published into
    /// `hasher`; not the counters (`rounds_completed`, the status's version), the rng or
    /// the status's wall-clock times, which only report.
    pub(crate) fn fingerprint(&self, hasher: &mut impl Hasher) {
        hash_debug(&(&self.state, &self.awaiting, &self.round), hasher);
        (self.due, self.resigned_until).hash(hasher);
        let link = &self.link;
        (link.failures, link.connected, link.thin_margin, &link.error).hash(hasher);
        let published = &self.published;
        hash_debug(&published.role, hasher);
        (&published.leader, published.term, published.paused).hash(hasher);
        (published.lease_deadline, published.lease_deadline_boot).hash(hasher);
        (published.leader_lease_until, &published.error).hash(hasher);
        (self.single_term, self.held_any, self.foreign_term_warned).hash(hasher);
    }
}

/// Feeds `value`'s `Debug` text into `hasher`, with no string in between.
pub(crate) fn hash_debug(value: &impl Debug, hasher: &mut impl Hasher) {
    struct Feed<'h, H>(&'h mut H);
    impl<H: Hasher> Write for Feed<'_, H> {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            self.0.write(text.as_bytes());
            Ok(())
        }
    }
    write!(Feed(hasher), "{value:?}").expect("hashing never fails");
}
