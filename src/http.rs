//! The optional HTTP endpoint (`http.listen`): `GET /leader` answers 200 on the leader and
//! 503 elsewhere (for load balancers and readiness probes, as with Patroni), `GET /status`
//! the status document, `GET /metrics` the Prometheus metrics. It only reads the
//! election's status channel and the metrics, so a slow client cannot touch a renewal.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::election::{Role, Status};
use crate::metrics::Metrics;
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
    metrics: Metrics,
}

/// Binds `addr` now (so a taken port fails the start) and serves in the background.
pub async fn serve(
    addr: SocketAddr,
    election: String,
    node_id: String,
    status: watch::Receiver<Status>,
    metrics: Metrics,
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
        metrics,
    });
    let app = Router::new()
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
    let document = StatusDocument::new(&shared.election, &shared.node_id, &status);
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
