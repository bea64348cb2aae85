//! The optional HTTP endpoint (`http.listen`): `GET /healthz` answers 200 while election
//! rounds keep completing (on every node: readiness and liveness probes), `GET /leader`
//! 200 on the leader and 503 elsewhere (for load balancers, as with Patroni), `GET /status`
//! the status document, `GET /metrics` the Prometheus metrics. It only reads the
//! election's channels and the metrics, so a slow client cannot touch a renewal.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use crate::config::Config;
use crate::election::{Role, Status};
use crate::standing::Standing;
use crate::status_file::StatusDocument;

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on http.listen = {addr}: {source}")]
pub struct HttpError {
    addr: SocketAddr,
    #[source]
    source: std::io::Error,
}

struct Shared {
    election: String,
    node_id: String,
    status: watch::Receiver<Status>,
    standing: watch::Receiver<Standing>,
    metrics: Metrics,
    liveness: Liveness,
}

/// What `/healthz` judges: when the last election round completed (failed rounds too:
/// the loop is turning), and how old that may be.
pub struct Liveness {
    pub last_round: watch::Receiver<Option<Instant>>,
    pub stale_after: Duration,
}

/// Three intervals, plus the longest a round may take (connecting, then one statement).
pub fn stale_after(config: &Config) -> Duration {
    config.election.interval * 3 + config.database.connect_timeout + config.database.query_timeout
}

/// Binds `addr` now (so a taken port fails the start) and serves in the background.
pub async fn serve(
    addr: SocketAddr,
    election: String,
    node_id: String,
    status: watch::Receiver<Status>,
    standing: watch::Receiver<Standing>,
    metrics: Metrics,
    liveness: Liveness,
) -> Result<(SocketAddr, JoinHandle<()>), HttpError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HttpError { addr, source })?;
    let shared = Arc::new(Shared {
        election,
        node_id,
        status,
        standing,
        metrics,
        liveness,
    });
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/leader", get(leader))
        .route("/status", get(status_document))
        .route("/metrics", get(metrics_text))
        .with_state(shared);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "HTTP endpoint stopped");
        }
    });
    Ok((bound, task))
}

/// Leader only while the lease deadline is ahead, like the status file's `valid_until`.
fn leads(status: &Status) -> bool {
    status.role == Role::Leader && status.valid_until > SystemTime::now()
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let last = *shared.liveness.last_round.borrow();
    match last.map(|at| at.elapsed()) {
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: no election round completed yet\n",
        )
            .into_response(),
        Some(age) if age > shared.liveness.stale_after => {
            let text = format!(
                "unhealthy: the last election round completed {} ago\n",
                humantime::format_duration(Duration::from_millis(age.as_millis() as u64))
            );
            (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
        }
        Some(_) => (StatusCode::OK, "ok\n").into_response(),
    }
}

async fn leader(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.status.borrow().clone();
    if leads(&status) {
        (StatusCode::OK, "leader\n").into_response()
    } else {
        let text = format!("not leader ({})\n", status.role.as_str());
        (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
    }
}

async fn status_document(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.status.borrow().clone();
    let standing = *shared.standing.borrow();
    let document = StatusDocument::new(&shared.election, &shared.node_id, &status, standing);
    match serde_json::to_string_pretty(&document) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json + "\n").into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn metrics_text(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn healthz_after(last_round: Option<Duration>) -> StatusCode {
        let at = last_round.map(|age| Instant::now() - age);
        let (_keep, last_round) = watch::channel(at);
        let (_status, status) = watch::channel(Status::initial());
        let (_standing, standing) = watch::channel(Standing::default());
        let shared = Arc::new(Shared {
            election: "e".into(),
            node_id: "n".into(),
            status,
            standing,
            metrics: Metrics::new("e"),
            liveness: Liveness {
                last_round,
                stale_after: Duration::from_secs(5),
            },
        });
        healthz(State(shared)).await.status()
    }

    /// Ready once a round completed, and again unready when rounds stop completing.
    #[tokio::test]
    async fn healthz_follows_completed_rounds() {
        assert_eq!(healthz_after(None).await, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            healthz_after(Some(Duration::from_secs(1))).await,
            StatusCode::OK
        );
        assert_eq!(
            healthz_after(Some(Duration::from_secs(6))).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
