//! `leaderd lock --metrics-file`: each run's outcome in Prometheus text format, for
//! node_exporter's textfile collector.

use std::future::Future;
use std::path::Path;

use crate::cli::exit::{EXIT_LOCK_LOST, EXIT_TIMED_OUT, EXIT_UNAVAILABLE, EXIT_USAGE};

/// What became of one `leaderd lock` run, by its exit status, for --metrics-file.
fn outcome(conflict_exit_code: u8, code: Option<u8>) -> &'static str {
    match code {
        None => "failed",
        Some(code) if code == conflict_exit_code => "held",
        Some(EXIT_LOCK_LOST) => "lost",
        Some(EXIT_TIMED_OUT) => "timed_out",
        Some(EXIT_UNAVAILABLE) => "unavailable",
        Some(EXIT_USAGE) => "usage",
        Some(_) => "ran",
    }
}

const OUTCOMES: [&str; 7] = [
    "ran",
    "held",
    "lost",
    "timed_out",
    "unavailable",
    "usage",
    "failed",
];

/// Runs `lock` (the whole `leaderd lock`), then writes its outcome to `metrics_file`;
/// `conflict_exit_code` is `-E`, the status that says the lock was held elsewhere.
pub(super) async fn recorded(
    metrics_file: Option<&Path>,
    conflict_exit_code: u8,
    name: &str,
    lock: impl Future<Output = anyhow::Result<u8>>,
) -> anyhow::Result<u8> {
    let started = std::time::SystemTime::now();
    let result = lock.await;
    if let Some(path) = metrics_file {
        let code = result.as_ref().ok().copied();
        let text = metrics_text(name, started, code, outcome(conflict_exit_code, code), path);
        if let Err(error) = write_atomically(path, &text) {
            eprintln!(
                "leaderd: cannot write --metrics-file {}: {error}",
                path.display()
            );
        }
    }
    result
}

fn unix_seconds(time: std::time::SystemTime) -> f64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The last success this host recorded before, kept across runs that did not run.
fn previous_success(path: &Path, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let prefix = format!(
        "leaderd_lock_last_success_timestamp_seconds{{lock=\"{}\"}} ",
        escape(name)
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix).map(str::to_owned))
}

/// A label value: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn metrics_text(
    name: &str,
    started: std::time::SystemTime,
    code: Option<u8>,
    outcome: &str,
    path: &Path,
) -> String {
    let lock = escape(name);
    let ended = std::time::SystemTime::now();
    let took = ended.duration_since(started).unwrap_or_default();
    let success = match (outcome, code) {
        ("ran", Some(0)) => Some(format!("{:.3}", unix_seconds(ended))),
        _ => previous_success(path, name),
    };
    let mut text = String::new();
    let mut gauge = |metric: &str, help: &str, samples: Vec<(String, String)>| {
        text.push_str(&format!("# HELP {metric} {help}\n# TYPE {metric} gauge\n"));
        for (labels, value) in samples {
            text.push_str(&format!("{metric}{{lock=\"{lock}\"{labels}}} {value}\n"));
        }
    };
    gauge(
        "leaderd_lock_last_run_timestamp_seconds",
        "When the last leaderd lock run on this host started (Unix time).",
        vec![(String::new(), format!("{:.3}", unix_seconds(started)))],
    );
    gauge(
        "leaderd_lock_last_run_duration_seconds",
        "How long the last leaderd lock run on this host took, waiting included.",
        vec![(String::new(), format!("{:.3}", took.as_secs_f64()))],
    );
    gauge(
        "leaderd_lock_last_exit_status",
        "The exit status of the last leaderd lock run on this host (-1: it failed).",
        vec![(
            String::new(),
            code.map_or("-1".to_owned(), |c| c.to_string()),
        )],
    );
    gauge(
        "leaderd_lock_last_outcome",
        "1 for what became of the last leaderd lock run on this host: ran (COMMAND ran, \
         its status in leaderd_lock_last_exit_status), held (by another holder), lost, \
         timed_out (--hold-at-most), unavailable (database), usage, failed.",
        OUTCOMES
            .iter()
            .map(|o| {
                (
                    format!(",outcome=\"{o}\""),
                    if *o == outcome { "1" } else { "0" }.to_owned(),
                )
            })
            .collect(),
    );
    if let Some(success) = success {
        gauge(
            "leaderd_lock_last_success_timestamp_seconds",
            "When COMMAND last ended with status 0 under this lock on this host (Unix time).",
            vec![(String::new(), success)],
        );
    }
    text
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}
