//! The labeller: a task that follows the election's status and merge-patches this node's
//! pod so that `role_label` says `leader` or `follower`. Like the status file writer it is
//! a consumer of the status channel and never holds up a renewal: a slow or lost API
//! server only delays the label. Only the latest role counts (a watch channel coalesces
//! what happened while a patch was in flight or failing), and a failed patch is tried
//! again after a delay that doubles up to [`MAX_RETRY`].
//!
//! The label is `follower` from the start (before the first round: not leader until
//! elected), `leader` while the status says so, and `follower` again as soon as the node
//! is told to stop, before its hooks step down and it releases the lease: a stopping
//! leader takes no new traffic, and for a moment no pod is labelled leader, which is the
//! safe side. Two pods labelled leader can still happen (an old leader cut off from the
//! API server), so fencing stays with the term.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::config::KubernetesConfig;
use crate::election::{Role, Status};

/// The first retry of a failed patch; each further one waits twice as long, up to
/// [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(10);
/// Bound on one patch: connecting, sending, and the answer.
const PATCH_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error(
        "kubernetes.role_label is set, but the in-cluster API configuration cannot be read \
         ({0}); mount the service account token (automountServiceAccountToken) or set \
         kubernetes.api_url and kubernetes.token_file"
    )]
    InCluster(#[source] kube::config::InClusterError),
    #[error("kubernetes.api_url = {url:?}: not a URI ({reason})")]
    ApiUrl { url: String, reason: String },
    #[error(
        "kubernetes.role_label is set but the pod's namespace is unknown: set \
         kubernetes.namespace, or POD_NAMESPACE from the downward API"
    )]
    Namespace,
    #[error(
        "kubernetes.role_label is set but the pod's name is unknown: set kubernetes.pod_name, or POD_NAME from the downward API"
    )]
    PodName,
    #[error("cannot set up the Kubernetes API client: {0}")]
    Client(#[source] kube::Error),
}

/// The running labeller.
pub struct Labeler {
    task: JoinHandle<()>,
}

impl Labeler {
    /// Waits up to `limit` for the last label (`follower`, once the node stops) to be
    /// set, then gives up on it.
    pub async fn finish(self, limit: Duration) {
        let Labeler { mut task } = self;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
            warn!(
                limit = %humantime::format_duration(limit),
                "the pod's role label was not set back to follower in time; \
                 Kubernetes drops the terminating pod from the Service's endpoints anyway"
            );
        }
    }
}

/// The label value for a status. Anything but a held lease routes no traffic here.
fn value_of(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Follower | Role::Unknown => "follower",
    }
}

/// Starts labelling this node's pod, if `config.role_label` is set. `stopping` turns true
/// when the node is told to stop.
pub fn spawn_labeler(
    config: &KubernetesConfig,
    statuses: watch::Receiver<Status>,
    stopping: watch::Receiver<bool>,
) -> Result<Option<Labeler>, LabelError> {
    let Some(label) = config.role_label.clone() else {
        return Ok(None);
    };
    let pod = config.pod_name.clone().ok_or(LabelError::PodName)?;
    let mut client_config = match &config.api_url {
        Some(url) => {
            let uri = url
                .parse()
                .map_err(|e: axum::http::uri::InvalidUri| LabelError::ApiUrl {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
            kube::Config::new(uri)
        }
        None => kube::Config::incluster().map_err(LabelError::InCluster)?,
    };
    let namespace = match &config.namespace {
        Some(namespace) => namespace.clone(),
        // The service account's namespace file, read by the in-cluster configuration.
        None if config.api_url.is_none() => client_config.default_namespace.clone(),
        None => return Err(LabelError::Namespace),
    };
    if let Some(path) = &config.token_file {
        // Read again as it rotates, like the in-cluster token.
        client_config.auth_info.token_file = Some(path.display().to_string());
    }
    if let Some(path) = &config.ca_file {
        client_config.root_cert_file = Some(path.clone());
    }
    client_config.connect_timeout = Some(PATCH_TIMEOUT);
    client_config.read_timeout = Some(PATCH_TIMEOUT);
    client_config.write_timeout = Some(PATCH_TIMEOUT);
    client_config.reset_reader_on_write = true;
    // The retries are this module's own, with its backoff.
    client_config.default_retry = false;
    let client = kube::Client::try_from(client_config).map_err(LabelError::Client)?;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    info!(%namespace, %pod, %label, "labelling this node's pod with its role");
    let task = tokio::spawn(follow(Target { pods, pod, label }, statuses, stopping));
    Ok(Some(Labeler { task }))
}

struct Target {
    pods: Api<Pod>,
    pod: String,
    label: String,
}

impl Target {
    async fn patch(&self, value: &str) -> Result<(), String> {
        let body = serde_json::json!({ "metadata": { "labels": { &self.label: value } } });
        let params = PatchParams {
            field_manager: Some("leaderd".into()),
            ..PatchParams::default()
        };
        match tokio::time::timeout(
            PATCH_TIMEOUT,
            self.pods.patch(&self.pod, &params, &Patch::Merge(&body)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(PATCH_TIMEOUT)
            )),
        }
    }
}

async fn follow(
    target: Target,
    mut statuses: watch::Receiver<Status>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut applied: Option<&'static str> = None;
    let mut retry = FIRST_RETRY;
    let mut failures = 0u32;
    // Either channel closed: the node is on its way out.
    let mut ended = false;
    loop {
        let stop = ended || *stopping.borrow_and_update();
        let role = statuses.borrow_and_update().role;
        let wanted = if stop { "follower" } else { value_of(role) };
        if applied != Some(wanted) {
            match target.patch(wanted).await {
                Ok(()) => {
                    if failures > 0 {
                        info!(
                            label = %target.label, value = wanted, failures,
                            "pod role label set after failed attempts"
                        );
                    } else {
                        debug!(label = %target.label, value = wanted, "pod role label set");
                    }
                    applied = Some(wanted);
                    failures = 0;
                    retry = FIRST_RETRY;
                }
                Err(error) => {
                    failures += 1;
                    // The first failure, then now and then: a lost API server must not
                    // flood the log.
                    if failures == 1 || failures.is_multiple_of(10) {
                        warn!(
                            pod = %target.pod, label = %target.label, value = wanted,
                            failures, retry_in = %humantime::format_duration(retry),
                            "cannot set the pod's role label: {error}; retrying"
                        );
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(retry) => {}
                        // A stop is tried at once.
                        changed = stopping.changed(), if !ended && !stop => {
                            ended |= changed.is_err();
                        }
                    }
                    retry = (retry * 2).min(MAX_RETRY);
                    continue;
                }
            }
        }
        if stop {
            return;
        }
        tokio::select! {
            changed = statuses.changed() => ended |= changed.is_err(),
            changed = stopping.changed() => ended |= changed.is_err(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TLS side builds (rustls with ring as the only provider), and the client's
    /// errors name what is missing.
    #[tokio::test]
    async fn an_https_client_builds_and_missing_values_are_named() {
        let (_status, statuses) = watch::channel(Status::initial());
        let (_stop, stopping) = watch::channel(false);
        let config = KubernetesConfig {
            role_label: Some("leaderd.io/role".into()),
            pod_name: Some("web-1".into()),
            namespace: Some("jobs".into()),
            api_url: Some("https://127.0.0.1:1".into()),
            ..KubernetesConfig::default()
        };
        let labeler = spawn_labeler(&config, statuses.clone(), stopping.clone());
        assert!(labeler.as_ref().is_ok_and(Option::is_some));
        labeler.unwrap().unwrap().task.abort();
        let no_namespace = KubernetesConfig {
            namespace: None,
            ..config.clone()
        };
        let e = spawn_labeler(&no_namespace, statuses.clone(), stopping.clone())
            .err()
            .unwrap();
        assert!(e.to_string().contains("POD_NAMESPACE"), "{e}");
        let off = KubernetesConfig::default();
        assert!(spawn_labeler(&off, statuses, stopping).unwrap().is_none());
    }
}
