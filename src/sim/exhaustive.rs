//! The exhaustive check of the election's state machine: every interleaving, to a bound,
//! of two nodes' [`Machine::step`](crate::election::machine::Machine::step) against the
//! table model: their rounds, answers that come at once, late, lost after the statement
//! ran, or never because it did not run; statements abandoned by a stop that run later;
//! stops; and operators' resigns and handovers. Time moves only to instants that matter
//! (a node's timer, an answer's last moment, a lease's end by the database clock, just
//! before and after). Properties 1, 2, 3 and 6 hold in every state reached.
//!
//! A hand-written depth-first search rather than `stateright`: a state is merged with
//! another by a hash of a canonical encoding (the machine holds an rng, counters and
//! wall-clock times that must not tell states apart, so it cannot simply derive `Hash`
//! and `Eq`), and a state met again with no more depth left to explore is not explored
//! again.

mod model;
mod node;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use model::{Bound, COMMANDED, Choice, LOST_LEAD, STOPPED, TAKEOVER, UNSENT, World};

/// What a search found.
struct Found {
    /// Distinct states reached, and choices taken.
    states: usize,
    steps: u64,
    /// The property broken, and the path to it.
    violation: Option<(String, Vec<Choice>)>,
    /// The milestones some path reached.
    reached: u8,
}

/// A path longer than this has stopped moving on (time cannot pass).
const MAX_PATH: usize = 500;

struct Search {
    /// The most faults left with which each state was explored.
    seen: HashMap<u64, u8>,
    steps: u64,
    path: Vec<Choice>,
    violation: Option<(String, Vec<Choice>)>,
    reached: u8,
}

impl Search {
    fn explore(&mut self, world: &World) {
        if self.path.len() >= MAX_PATH {
            self.violation = Some((
                "no progress: time stands still".to_owned(),
                self.path.clone(),
            ));
        }
        if self.violation.is_some() {
            return;
        }
        for (choice, fault) in world.choices() {
            let mut next = world.clone();
            next.take(choice, fault);
            self.steps += 1;
            self.reached |= next.reached;
            self.path.push(choice);
            if let Some(violation) = &next.violation {
                self.violation = Some((violation.clone(), self.path.clone()));
                return;
            }
            let (fingerprint, left) = (next.fingerprint(), next.faults_left());
            if self
                .seen
                .get(&fingerprint)
                .is_none_or(|&explored| explored < left)
            {
                self.seen.insert(fingerprint, left);
                self.explore(&next);
            }
            self.path.pop();
            if self.violation.is_some() {
                return;
            }
        }
    }
}

/// Explores every path from the start within `bound`.
fn search(bound: Bound) -> Found {
    let start = World::new(&bound);
    let mut search = Search {
        seen: HashMap::new(),
        steps: 0,
        path: Vec::new(),
        violation: None,
        reached: 0,
    };
    search.seen.insert(start.fingerprint(), bound.faults);
    search.explore(&start);
    Found {
        states: search.seen.len(),
        steps: search.steps,
        violation: search.violation,
        reached: search.reached,
    }
}

/// The bound CI explores.
const CI_BOUND: Bound = Bound {
    horizon: Duration::from_secs(4),
    faults: 2,
    stops: 1,
    commands: 1,
};

#[test]
fn properties_1_2_3_and_6_hold_in_every_state_within_the_bound() {
    let env = |name| {
        std::env::var(name)
            .ok()
            .and_then(|v: String| v.parse::<u64>().ok())
    };
    let bound = Bound {
        faults: env("LEADERD_EXHAUSTIVE_FAULTS").map_or(CI_BOUND.faults, |f| f as u8),
        horizon: env("LEADERD_EXHAUSTIVE_SECONDS").map_or(CI_BOUND.horizon, Duration::from_secs),
        ..CI_BOUND
    };
    let started = Instant::now();
    let found = search(bound);
    eprintln!(
        "exhaustive check, {bound:?}: {} distinct states, {} choices, in {:.1}s",
        found.states,
        found.steps,
        started.elapsed().as_secs_f64()
    );
    if let Some((property, path)) = found.violation {
        panic!("broke property {property}\npath: {path:?}");
    }
    // The search reaches what it is for: a lapse or a refused renewal, a takeover, a
    // finished stop, an operator command that took, a statement a stop kept from leaving.
    for (milestone, what) in [
        (LOST_LEAD, "a leader losing its lease"),
        (TAKEOVER, "a takeover"),
        (STOPPED, "a finished stop"),
        (COMMANDED, "an operator command"),
        (UNSENT, "a stop before a statement left"),
    ] {
        assert!(
            found.reached & milestone != 0,
            "the search never reached {what}"
        );
    }
}
