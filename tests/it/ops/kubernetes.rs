//! `[kubernetes] role_label` against a local stand-in for the API server: the requests
//! each node sends (path, method, content type, merge patch, bearer token), the retries of
//! a failed patch, and renewals that go on while the API server answers nothing.

use super::*;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{Value, json};

const LABEL: &str = "leaderd.io/role";
const NAMESPACE: &str = "jobs";
const TOKEN: &str = "t0ken-of-the-service-account";

/// One request the API server received.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    content_type: String,
    authorization: String,
    body: Value,
    /// Whether it was answered with a success.
    ok: bool,
}

impl Seen {
    /// The pod name and label value of a well-formed role patch.
    fn pod_and_value(&self) -> Option<(String, String)> {
        let pod = self
            .path
            .strip_prefix(&format!("/api/v1/namespaces/{NAMESPACE}/pods/"))?;
        let value = self.body["metadata"]["labels"][LABEL].as_str()?;
        Some((pod.to_owned(), value.to_owned()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// The patched pod, as the API server returns it.
    Pod,
    /// 500 for this many more requests, then [`Answer::Pod`].
    Fail(u32),
    /// Takes the request and never answers.
    Stall,
}

#[derive(Default)]
struct ApiState {
    seen: Vec<Seen>,
    answer: Option<Answer>,
}

/// The stand-in API server.
struct FakeApi {
    url: String,
    state: Arc<Mutex<ApiState>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeApi {
    async fn start(answer: Answer) -> FakeApi {
        let state = Arc::new(Mutex::new(ApiState {
            seen: Vec::new(),
            answer: Some(answer),
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::clone(&state);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = Arc::clone(&shared);
                async move { respond(state, method, uri, headers, body).await }
            },
        );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeApi { url, state, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The label values patched onto `pod` with success, in order.
    fn applied(&self, pod: &str) -> Vec<String> {
        self.seen()
            .iter()
            .filter(|s| s.ok)
            .filter_map(Seen::pod_and_value)
            .filter(|(p, _)| p == pod)
            .map(|(_, value)| value)
            .collect()
    }

    async fn wait_applied(&self, pod: &str, value: &str, limit: Duration) {
        let start = Instant::now();
        while self.applied(pod).last().map(String::as_str) != Some(value) {
            assert!(
                start.elapsed() < limit,
                "{pod} not labelled {value} within {limit:?}; requests: {:#?}",
                self.seen()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn respond(
    state: Arc<Mutex<ApiState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let answer = {
        let mut state = state.lock().unwrap();
        let answer = state.answer.unwrap();
        if let Answer::Fail(n) = answer {
            state.answer = Some(if n > 1 {
                Answer::Fail(n - 1)
            } else {
                Answer::Pod
            });
        }
        state.seen.push(Seen {
            method,
            path: uri.path().to_owned(),
            content_type: header("content-type"),
            authorization: header("authorization"),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            ok: answer == Answer::Pod,
        });
        answer
    };
    match answer {
        Answer::Stall => std::future::pending().await,
        Answer::Fail(_) => {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
            json_response(StatusCode::INTERNAL_SERVER_ERROR, &status)
        }
        Answer::Pod => {
            let name = uri.path().rsplit('/').next().unwrap_or_default();
            let labels = json!({ LABEL: serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|b| b["metadata"]["labels"][LABEL].as_str().map(str::to_owned)) });
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels}});
            json_response(StatusCode::OK, &pod)
        }
    }
}

/// Terms are compared across seconds here: 2.5 s of room for a renewal on a loaded
/// machine (a lapse would be the database's doing, not the labeller's).
fn settings() -> NodeSettings {
    NodeSettings {
        ttl: Duration::from_secs(3),
        ..NodeSettings::roomy()
    }
}

/// Starts node `id` labelling pod `id` through `api`, with HTTP on a port of its own.
fn start_node(db: &TestDb, settings: &NodeSettings, id: &str, api: &FakeApi) -> (Node, u16) {
    let token = db.dir.join("token");
    // As the kubelet writes it: no line end (kube sends the file as it is).
    std::fs::write(&token, TOKEN).unwrap();
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let node = Node::start_with_env(
        db,
        settings,
        id,
        &db.url,
        &[
            ("LEADERD_KUBERNETES__ROLE_LABEL", LABEL),
            ("LEADERD_KUBERNETES__API_URL", &api.url),
            ("LEADERD_KUBERNETES__TOKEN_FILE", token.to_str().unwrap()),
            ("POD_NAME", id),
            ("POD_NAMESPACE", NAMESPACE),
            ("LEADERD_HTTP__LISTEN", &listen),
        ],
    );
    (node, port)
}

/// Each pod is labelled follower first, the leader's then leader; the requests are merge
/// patches of the label on the pod's own path with the service account's token. On a stop
/// the leader's label goes back to follower and the other pod's becomes leader.
#[tokio::test(flavor = "multi_thread")]
async fn each_pod_is_labelled_with_its_role() {
    let db = TestDb::new(Backend::Sqlite);
    let api = FakeApi::start(Answer::Pod).await;
    // One election for both.
    let settings = settings();
    let (a, port_a) = start_node(&db, &settings, "a", &api);
    let (b, port_b) = start_node(&db, &settings, "b", &api);
    let mut nodes = [a, b];
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    let follower = if leader == "a" { "b" } else { "a" };
    api.wait_applied(&leader, "leader", Duration::from_secs(10))
        .await;
    api.wait_applied(follower, "follower", Duration::from_secs(10))
        .await;
    // Every pod is Ready: /healthz answers on the follower as on the leader.
    for port in [port_a, port_b] {
        let (code, body) = http_get(port, "/healthz");
        assert_eq!(code, 200, "{body}");
    }
    for seen in api.seen() {
        assert_eq!(seen.method, Method::PATCH, "{seen:?}");
        assert_eq!(
            seen.content_type, "application/merge-patch+json",
            "{seen:?}"
        );
        assert_eq!(seen.authorization, format!("Bearer {TOKEN}"), "{seen:?}");
        let (pod, value) = seen.pod_and_value().expect("a role patch");
        assert!(pod == "a" || pod == "b", "{seen:?}");
        assert_eq!(
            seen.body,
            json!({"metadata": {"labels": {LABEL: value}}}),
            "only the label is patched"
        );
    }
    // Not leader until elected: the first label of each pod is follower.
    assert_eq!(api.applied(&leader)[0], "follower");
    assert_eq!(api.applied(follower), ["follower"]);

    let old = nodes.iter_mut().find(|n| n.id == leader).unwrap();
    old.signal(Signal::SIGTERM);
    assert_eq!(old.wait_exit(Duration::from_secs(20)).await, Some(0));
    assert_eq!(api.applied(&leader).last().unwrap(), "follower");
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let (new, _) = common::wait_new_leader(&mut sampler, &rest, term).await;
    assert_eq!(new, follower);
    api.wait_applied(follower, "leader", Duration::from_secs(10))
        .await;
    api.task.abort();
}

/// A patch the API server fails is tried again, with growing delays, until it succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_label_patch_is_retried() {
    let db = TestDb::new(Backend::Sqlite);
    let api = FakeApi::start(Answer::Fail(4)).await;
    let (node, _) = start_node(&db, &settings(), "a", &api);
    let started = Instant::now();
    api.wait_applied("a", "leader", Duration::from_secs(20))
        .await;
    let seen = api.seen();
    let failed = seen.iter().filter(|s| !s.ok).count();
    assert_eq!(failed, 4, "{seen:#?}");
    // Backoff: 200 + 400 + 800 + 1600 ms at least before the fifth attempt.
    assert!(
        started.elapsed() >= Duration::from_millis(3000),
        "four retries in {:?}",
        started.elapsed()
    );
    assert!(node.status().unwrap().is_leader());
    let log = node.log();
    assert!(log.contains("cannot set the pod's role label"), "{log}");
    api.task.abort();
}

/// An API server that takes requests and never answers, then one that is gone: the
/// leader keeps its term and keeps renewing (its status file is rewritten every round),
/// and a stop still ends in bounded time.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_api_server_never_stops_renewals() {
    let db = TestDb::new(Backend::Sqlite);
    let api = FakeApi::start(Answer::Stall).await;
    let (mut node, port) = start_node(&db, &settings(), "a", &api);
    let started = Instant::now();
    while !node.status().is_some_and(|s| s.is_leader()) {
        assert!(started.elapsed() < Duration::from_secs(15), "never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let term = node.status().unwrap().term;
    let mut last_update = node.status().unwrap().updated_at;
    let mut updates = 0;
    let watch_until = Instant::now() + Duration::from_secs(12);
    let mut gone = false;
    while Instant::now() < watch_until {
        if !gone && watch_until - Instant::now() < Duration::from_secs(6) {
            // Then the API server goes away altogether: connections are refused.
            api.task.abort();
            gone = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let status = node.status().unwrap();
        assert!(status.is_leader() && status.term == term, "{status:?}");
        if status.updated_at > last_update {
            updates += 1;
            last_update = status.updated_at;
        }
    }
    assert!(updates >= 12, "{updates} renewals written in 12 s");
    assert!(
        api.applied("a").is_empty(),
        "the stalled API server answered"
    );
    assert!(!api.seen().is_empty(), "no label patch was even tried");
    let (code, body) = http_get(port, "/healthz");
    assert_eq!(code, 200, "{body}");
    node.signal(Signal::SIGTERM);
    // The label gets a bounded wait (5 s) after the step-down.
    assert_eq!(node.wait_exit(Duration::from_secs(20)).await, Some(0));
}

fn json_response(code: StatusCode, body: &Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    let headers = [(axum::http::header::CONTENT_TYPE, "application/json")];
    (code, headers, body.to_string()).into_response()
}
