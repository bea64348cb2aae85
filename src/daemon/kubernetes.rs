//! `[kubernetes] role_label`: this node labels its own pod `leader` or `follower`, so that
//! a Service selecting the label routes to the leader. The label says where to route, not
//! who may act: two pods can carry `leader` for a moment (an old leader whose patch to
//! `follower` has not gone through yet), so whatever the leader does stays fenced by its
//! term, as without Kubernetes.
//!
//! The keys are read whatever the build (`config/kubernetes.rs`); the client (feature
//! `kubernetes`) is in `label`.

use tokio::sync::watch;

use crate::config::KubernetesConfig;
use crate::election::Status;

#[cfg(feature = "kubernetes")]
mod label;

/// How long a stopped node waits for its pod's label to be back at `follower`. The
/// manifests' `terminationGracePeriodSeconds` leaves room for it after the hooks' budget.
#[cfg(feature = "kubernetes")]
pub const SHUTDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    #[cfg(feature = "kubernetes")]
    #[error(transparent)]
    Label(#[from] label::LabelError),
    #[cfg(not(feature = "kubernetes"))]
    #[error(
        "kubernetes.role_label = {0:?}, but this leaderd was built without pod labelling; \
         build it with `cargo build --features kubernetes` (as the container image is), or \
         remove the key"
    )]
    NotBuiltIn(String),
}

/// The role label, kept up to date in the background (nothing when `role_label` is unset).
pub struct Labeling {
    #[cfg(feature = "kubernetes")]
    labeler: Option<label::Labeler>,
}

/// Starts labelling this node's pod when `config.role_label` is set. `stopping` turns
/// true when the node is told to stop, and the label goes back to `follower` at once.
pub fn start(
    config: &KubernetesConfig,
    statuses: watch::Receiver<Status>,
    stopping: watch::Receiver<bool>,
) -> Result<Labeling, KubernetesError> {
    #[cfg(feature = "kubernetes")]
    {
        Ok(Labeling {
            labeler: label::spawn_labeler(config, statuses, stopping)?,
        })
    }
    #[cfg(not(feature = "kubernetes"))]
    {
        let _ = (statuses, stopping);
        match &config.role_label {
            Some(label) => Err(KubernetesError::NotBuiltIn(label.clone())),
            None => Ok(Labeling {}),
        }
    }
}

impl Labeling {
    /// Once the election has stopped: waits up to [`SHUTDOWN_LIMIT`] for the last label.
    pub async fn finish(self) {
        #[cfg(feature = "kubernetes")]
        if let Some(labeler) = self.labeler {
            labeler.finish(SHUTDOWN_LIMIT).await;
        }
    }
}
