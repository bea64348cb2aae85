//! Stepping down, in the one order that a stop and a resign both follow: stop acting,
//! publish that, wait until it is durable, then release the row.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::candidacy::Candidacy;
use super::clock::Instants;
use super::settings::ElectionSettings;
use crate::store::{LeaseStore, ProcessToken, StoreError};

/// How long a stopping node tries to release its row.
const STOP_RELEASE: Duration = Duration::from_millis(500);

/// Gives leadership up, in the one order that a stop and a resign both follow. It stops
/// acting as leader and publishes that, waits until the publication is durable (see
/// [`Election::release_after`](super::Election::release_after)), and only then releases the row, so that no successor can
/// start while this node's last durable word still says it leads. If that takes until the
/// lease would end, the release is withheld: the lease lapses on its own, and what this
/// node last said has expired by then too. `held`: the term to release and where its
/// lease ends (`None`: nothing to release). Returns how the release went, `None` if none
/// was sent.
pub(super) async fn step_down<S: LeaseStore>(
    store: &mut S,
    candidacy: &mut Candidacy,
    durable: Option<&mut watch::Receiver<u64>>,
    held: Option<(i64, Instants)>,
    for_good: bool,
) -> Option<Result<bool, StoreError>> {
    candidacy.stop_acting();
    candidacy.answer_renewals();
    if for_good {
        // Stopped: nothing this node said holds any longer.
        candidacy.status.send_modify(|status| {
            status.valid_until = status.updated_at;
            status.version += 1;
        });
    }
    let (term, lease_end) = held?;
    let settings = Arc::clone(&candidacy.settings);
    if let Some(durable) = durable {
        let published = candidacy.status.borrow().version;
        let left = lease_end.left(Instants::now(&candidacy.boot));
        let said = tokio::time::timeout(left, durable.wait_for(|v| *v >= published)).await;
        if !matches!(said, Ok(Ok(_))) {
            warn!(
                election = %settings.name,
                term,
                "the status file did not say this node stopped leading before its lease \
                 would end; not releasing the lease, which lapses on its own"
            );
            return None;
        }
    }
    Some(release(store, &settings, candidacy.token, term).await)
}

/// Gives the row up if it is still ours in `term`, within STOP_RELEASE; a lease that
/// cannot be released lapses by itself. `Ok(false)`: the row was no longer ours.
async fn release<S: LeaseStore>(
    store: &mut S,
    settings: &ElectionSettings,
    token: ProcessToken,
    term: i64,
) -> Result<bool, StoreError> {
    let released = tokio::time::timeout(STOP_RELEASE, store.release(&settings.lease(token, term)))
        .await
        .unwrap_or(Err(StoreError::QueryTimeout {
            after: STOP_RELEASE,
        }));
    match &released {
        Ok(true) => {
            info!(election = %settings.name, node = %settings.node_id, term, "released the lease")
        }
        Ok(false) => debug!(term, "nothing to release: the row is no longer ours"),
        Err(error) => warn!(%error, term, "could not release the lease; it lapses by itself"),
    }
    released
}
