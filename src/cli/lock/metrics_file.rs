//! `leaderd lock --metrics-file`: each run's outcome in Prometheus text format, for
//! node_exporter's textfile collector.

use std::future::Future;
use std::path::Path;

/// What became of one `leaderd lock` run, as the run itself knows it: an exit status
/// cannot tell, since COMMAND may exit with any of leaderd's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// COMMAND ran; its status is the exit status.
    Ran,
    /// Held by another holder.
    Held,
    Lost,
    /// Stopped at --hold-at-most.
    TimedOut,
    /// The database could not be used.
    Unavailable,
    Usage,
    /// leaderd failed, or was interrupted before COMMAND ran.
    Failed,
}

impl Outcome {
    const ALL: [Outcome; 7] = [
        Outcome::Ran,
        Outcome::Held,
        Outcome::Lost,
        Outcome::TimedOut,
        Outcome::Unavailable,
        Outcome::Usage,
        Outcome::Failed,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ran => "ran",
            Outcome::Held => "held",
            Outcome::Lost => "lost",
            Outcome::TimedOut => "timed_out",
            Outcome::Unavailable => "unavailable",
            Outcome::Usage => "usage",
            Outcome::Failed => "failed",
        }
    }
}

/// Why `path` cannot be written, if its directory is missing or not a directory: found
/// before the lock is taken and COMMAND runs, not after.
pub(super) fn check_directory(path: &Path) -> Result<(), String> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match std::fs::metadata(directory) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!("{} is not a directory", directory.display())),
        Err(error) => Err(format!("directory {}: {error}", directory.display())),
    }
}

/// Runs `lock` (the whole `leaderd lock`), then writes its outcome to `metrics_file`.
pub(super) async fn recorded(
    metrics_file: Option<&Path>,
    name: &str,
    lock: impl Future<Output = anyhow::Result<(u8, Outcome)>>,
) -> anyhow::Result<u8> {
    let started = std::time::SystemTime::now();
    let result = lock.await;
    if let Some(path) = metrics_file {
        let (code, outcome) = match &result {
            Ok((code, outcome)) => (Some(*code), *outcome),
            Err(_) => (None, Outcome::Failed),
        };
        let text = metrics_text(name, started, code, outcome, path);
        if let Err(error) = crate::status_file::write_atomically(path, text.as_bytes()) {
            eprintln!("leaderd: --metrics-file: {error}");
        }
    }
    result.map(|(code, _)| code)
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
    outcome: Outcome,
    path: &Path,
) -> String {
    let lock = escape(name);
    let ended = std::time::SystemTime::now();
    let took = ended.duration_since(started).unwrap_or_default();
    let success = match (outcome, code) {
        (Outcome::Ran, Some(0)) => Some(format!("{:.3}", unix_seconds(ended))),
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
         timed_out (--hold-at-most), unavailable (database), usage, failed (leaderd failed, \
         or was interrupted before COMMAND ran).",
        Outcome::ALL
            .iter()
            .map(|o| {
                (
                    format!(",outcome=\"{}\"", o.as_str()),
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
