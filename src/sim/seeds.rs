//! Fresh seeds for each CI run, beside the fixed ones: from a base derived from the
//! commit the tests are built from (so a run of another commit searches other seeds, and
//! the same commit searches the same ones again), printed with the line that searches
//! them again. `LEADERD_SIM_FRESH_BASE=N` sets the base, `LEADERD_SIM_FRESH_SEEDS=N`
//! how many (0: none). A failing seed is replayed alone as ever (`LEADERD_SIM_SEED`,
//! `LEADERD_SIM_DIRECT_SEED`).

/// Fresh seeds start at or above this, away from the fixed ones and the soak's.
const FRESH_FROM: u64 = 1 << 32;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Where this run's fresh seeds start, and why: the base from the environment, else from
/// the commit (`build.rs`), else from the time.
pub(super) fn fresh_base() -> (u64, String) {
    if let Some(base) = env_u64("LEADERD_SIM_FRESH_BASE") {
        return (base, "LEADERD_SIM_FRESH_BASE".to_owned());
    }
    let commit = env!("LEADERD_COMMIT");
    match u64::from_str_radix(commit, 16) {
        Ok(hash) => (FRESH_FROM + hash % (1 << 40), format!("commit {commit}")),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (
                FRESH_FROM + now.as_secs() % (1 << 40),
                "the time".to_owned(),
            )
        }
    }
}

/// How many fresh seeds to search: `default`, or `LEADERD_SIM_FRESH_SEEDS`.
pub(super) fn fresh_count(default: u64) -> u64 {
    env_u64("LEADERD_SIM_FRESH_SEEDS").unwrap_or(default)
}

/// The line printed before a fresh search.
pub(super) fn announce(what: &str, base: u64, count: u64, from: &str) -> String {
    format!(
        "{what}: {count} fresh seeds from {base} (from {from}); search them again with \
         LEADERD_SIM_FRESH_BASE={base} LEADERD_SIM_FRESH_SEEDS={count}"
    )
}

/// How long one seed may take in real time before the search calls it hung: a seed takes
/// milliseconds, but a model or machine that loops with tokio's clock paused never ends,
/// and would hold CI until its limit.
const SEED_WALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Why a seed's run gave no report.
#[derive(Debug)]
pub(super) enum Unfinished {
    /// It ran past [`SEED_WALL_LIMIT`] (it is left running on its thread).
    Hung,
    /// It panicked.
    Panicked,
}

/// Runs `run` on a thread of its own, giving up after [`SEED_WALL_LIMIT`].
pub(super) fn bounded<T: Send + 'static>(
    run: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Unfinished> {
    let (done, report) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(run());
    });
    report
        .recv_timeout(SEED_WALL_LIMIT)
        .map_err(|error| match error {
            std::sync::mpsc::RecvTimeoutError::Timeout => Unfinished::Hung,
            std::sync::mpsc::RecvTimeoutError::Disconnected => Unfinished::Panicked,
        })
}
