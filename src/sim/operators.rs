//! The operator commands the tokio-driven runs play: each on a connection of its own,
//! through the real `operator` code.

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::db::{Dice, SimStore};
use super::world::{ELECTION, MANUAL_HOLD, World};

/// Runs an operator command on a connection of its own (its statements meet the faults
/// the schedule aims at the operators' connection, and the database's).
pub(super) fn operator<F: std::future::Future<Output = ()> + Send + 'static>(
    world: &Arc<World>,
    rng: &mut SmallRng,
    command: impl FnOnce(SimStore) -> F,
) {
    let dice = Dice::new(
        SmallRng::seed_from_u64(rng.next_u64()),
        world.start,
        super::failures::OPERATOR,
        &world.scenario.events,
    );
    let dice = Arc::new(Mutex::new(dice));
    let store = SimStore::new(world, None, "operator", dice);
    tokio::spawn(command(store));
}

/// `leaderd resign` (`to: None`) and `leaderd handover --to`: the real command's steps
/// ([`crate::operator::step_down_with`]), with the properties that judge its outcome.
pub(super) async fn step_down(
    world: Arc<World>,
    mut store: SimStore,
    event: usize,
    to: Option<String>,
) {
    use crate::operator::{StepDownCommand, StepDownOutcome, step_down_with};
    let command = StepDownCommand {
        to: to.clone(),
        wait: world.scenario.ttl * 10,
        hold: MANUAL_HOLD,
        force: false,
        poll: Duration::from_millis(100),
    };
    let asked_at = Instant::now();
    let old = store_leader(&world);
    // A hold whose statement failed (the operators' connection's faults) may not be in
    // the database: property 9 has nothing to hold it to.
    let mut hold_failed = false;
    // The leader the command asked ("asked \"d\" (term …)"): the one it read when it ran,
    // which a slow database may make another than the one leading when it was started.
    let mut asked: Option<String> = None;
    let outcome = step_down_with(&mut store, ELECTION, &command, |said| {
        hold_failed |= said.starts_with(crate::operator::HOLD_NOT_WRITTEN);
        if let Some(rest) = said.strip_prefix("asked \"") {
            asked = rest.split('"').next().map(str::to_owned);
        }
        world.trace("operator", said)
    })
    .await;
    let old = asked.or(old);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => return world.trace("operator", format!("exit 69: {error}")),
    };
    world.trace(
        "operator",
        format!(
            "exit {}: {}",
            outcome.exit_status(),
            outcome.message(ELECTION)
        ),
    );
    let Some(old) = old else { return };
    if to.is_none() {
        world.check_resign_outcome(event, asked_at, &old, &outcome);
    }
    match &outcome {
        StepDownOutcome::TookOver { new, .. } | StepDownOutcome::OtherTookOver { new, .. } => {
            if let Some(to) = &to {
                world.check_handover_accepted(to, asked_at);
            }
            let held = !hold_failed;
            world.check_step_down_outcome(event, asked_at, &old, to.as_deref(), Some(new), held);
        }
        StepDownOutcome::LedAgain { .. } | StepDownOutcome::NobodyTookOver { .. } => {
            if let Some(to) = &to {
                world.check_handover_accepted(to, asked_at);
            }
            let held = !hold_failed;
            world.check_step_down_outcome(event, asked_at, &old, to.as_deref(), None, held);
        }
        StepDownOutcome::NotAnswered { .. } | StepDownOutcome::BadTarget { .. } => {
            world.check_step_down_outcome(event, asked_at, &old, to.as_deref(), None, false);
        }
        _ => {}
    }
}

/// The live holder of the election's row now.
pub(super) fn store_leader(world: &World) -> Option<String> {
    let state = world.state.lock().unwrap();
    state
        .db
        .table
        .lease_row(ELECTION, Instant::now())
        .and_then(|r| r.live_holder().map(str::to_owned))
}
