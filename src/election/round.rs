//! One round against the store: the statements an election sends and what their answers
//! mean ([`Outcome`], [`RoundError`]). Nothing here keeps state between rounds; the
//! candidacy (`candidacy.rs`) folds each outcome in.

use std::time::Duration;
use tracing::info;

use super::clock::{BootClock, Instants};
use super::hold::Hold;
use super::settings::ElectionSettings;
use crate::store::{Commands, LeaseRow, LeaseStore, ProcessToken, StoreError};

/// The result of one round against the store.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The database holds the lease for this node in `term`, from a statement sent at `sent`.
    Holding { term: i64, sent: Instants },
    /// Someone else holds the lease, or nobody does and this node could not take it.
    Observed(Option<LeaseRow>),
    /// The database refused to renew: the lease is not ours (any more) in the term we led.
    NotHeld,
}

/// A failed round, with the term it may have started: a claim whose answer was lost may
/// still have committed.
#[derive(Debug)]
pub(super) struct RoundError {
    pub(super) error: StoreError,
    pub(super) in_doubt: Option<i64>,
}

impl From<StoreError> for RoundError {
    fn from(error: StoreError) -> Self {
        RoundError {
            error,
            in_doubt: None,
        }
    }
}

/// Who sends a round: the election's settings, the clock its leases are also judged by,
/// and the token that marks the terms it starts.
pub(super) struct Claimant<'a> {
    pub(super) settings: &'a ElectionSettings,
    pub(super) boot: &'a BootClock,
    pub(super) token: ProcessToken,
}

/// One round: renew if leading, else claim a free lease, else observe. The first statement
/// is the only one in steady state (a renewal for the leader, a read for a follower).
/// `may_claim` is asked before each claim. `released_in`: a term whose release was just
/// announced, claimed without reading first. `statements` counts what it sends, for
/// [`RoundReport::statements`](super::RoundReport::statements). `seen`: the operator
/// commands a leader has seen pending on its row (see [`Commands`]), updated when a
/// renewal finds others.
pub(super) async fn round<S: LeaseStore>(
    store: &mut S,
    sender: &Claimant<'_>,
    hold: Hold,
    may_claim: impl Fn() -> bool,
    released_in: Option<i64>,
    statements: &mut u64,
    seen: &mut Commands,
) -> Result<(Outcome, Duration), RoundError> {
    let Claimant {
        settings,
        boot,
        token,
    } = *sender;
    let (name, me) = (&settings.name, &settings.node_id);
    let sent = Instants::now(boot);
    match hold {
        Hold::Leading { term, .. } => {
            // Stop acting as leader at once when the database says no; the next round
            // reads the row.
            *statements += 1;
            let lease = settings.lease(token, term);
            if store.renew_seeing(&lease, *seen).await? {
                return Ok((Outcome::Holding { term, sent }, sent.at.elapsed()));
            }
            let round_trip = sent.at.elapsed();
            // Refused: the lease is no longer ours, or an operator command changed (a
            // pause, a resign or handover request). Only a read tells; it costs a
            // statement only when something changed.
            *statements += 1;
            let row = store.get(name).await?;
            let ours = row.filter(|r| {
                r.holder.as_deref() == Some(me.as_str())
                    && r.term == term
                    && r.live_holder().is_some()
            });
            if let Some(row) = ours {
                // The same guarded renewal, stating what is pending now: it still extends
                // only a live lease of ours in this term. The deadline still counts from
                // the first statement's sending, which is earlier. Also when the commands
                // read are the ones the leader knew: one that came and went between the
                // two statements (a short pause, a pause then a resume) refused the first.
                let now_seen = row.commands();
                *statements += 1;
                if store.renew_seeing(&lease, now_seen).await? {
                    *seen = now_seen;
                    return Ok((Outcome::Holding { term, sent }, round_trip));
                }
            }
            return Ok((Outcome::NotHeld, round_trip));
        }
        Hold::Lapsed { term } if may_claim() => {
            *statements += 1;
            let reacquired = store
                .reacquire(&settings.lease(token, term))
                .await
                .map_err(|error| RoundError {
                    error,
                    in_doubt: Some(term + 1),
                })?;
            if reacquired {
                return Ok((
                    Outcome::Holding {
                        term: term + 1,
                        sent,
                    },
                    sent.at.elapsed(),
                ));
            }
        }
        Hold::None if may_claim() => {
            if let Some(expected) = released_in {
                // The claim checks the term and that the lease is free, so a stale term
                // only costs the read below.
                if let Some(holding) = claim(store, sender, expected, statements).await? {
                    return Ok((holding, sent.at.elapsed()));
                }
            }
        }
        Hold::Lapsed { .. } | Hold::None => {}
    }
    *statements += 1;
    let row = store.get(name).await?;
    let round_trip = sent.at.elapsed();
    // A handover offered to this node: accepting it asks the leader to step down, and
    // proves to the operator that this node runs and could lead (a node that could not,
    // whose gates are closed, never accepts).
    if let Some(offered) = row.as_ref().filter(|r| r.offered_to(me) && may_claim()) {
        *statements += 1;
        if store.accept_handover(name, me, offered.term).await? {
            info!(election = %name, node = %me, term = offered.term, "accepted the handover offered to this node");
        }
    }
    let free_term = match &row {
        _ if !may_claim() => None,
        None => {
            *statements += 1;
            store.ensure_row(name).await?;
            Some(0)
        }
        // A pause, or a handover to another node, keeps a free lease from this node:
        // the claim would check the same, at the cost of a statement.
        Some(row) if row.paused() || row.handed_over_away_from(me) => None,
        Some(row) if row.live_holder().is_none() => Some(row.term),
        Some(_) => None,
    };
    if let Some(expected) = free_term {
        if let Some(holding) = claim(store, sender, expected, statements).await? {
            return Ok((holding, round_trip));
        }
        // Another node was faster; see who.
        *statements += 1;
        return Ok((Outcome::Observed(store.get(name).await?), round_trip));
    }
    Ok((Outcome::Observed(row), round_trip))
}

/// Claims a free lease in `expected`: `Holding` the next term if this node took it, `None`
/// if another node did first or the term was stale. A claim whose answer is lost may have
/// committed: its term is in doubt.
async fn claim<S: LeaseStore>(
    store: &mut S,
    sender: &Claimant<'_>,
    expected: i64,
    statements: &mut u64,
) -> Result<Option<Outcome>, RoundError> {
    let Claimant {
        settings,
        boot,
        token,
    } = *sender;
    let sent = Instants::now(boot);
    *statements += 1;
    let claimed = store
        .claim(&settings.lease(token, expected))
        .await
        .map_err(|error| RoundError {
            error,
            in_doubt: Some(expected + 1),
        })?;
    Ok(claimed.then_some(Outcome::Holding {
        term: expected + 1,
        sent,
    }))
}
