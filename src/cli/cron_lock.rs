//! `leaderd lock` under cron: the flock(1)-compatible flags (`-w` in bare seconds, `-n`,
//! `-E`, `-q`), `--hold-at-least`, which leaves the lock taken in its row after a short
//! COMMAND so that a host whose cron fires late finds it taken and does not run the job
//! again, and the lock's own row (`lock:NAME`).

use nix::sys::signal::Signal;
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tracing::info;

use super::EXIT_LOCK_HELD;
use crate::lock::{LOCK_ROW_PREFIX, LockError, LockGuard};

/// The flags `leaderd lock` shares with flock(1), and the hold.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct LockCronFlags {
    /// Wait up to this long for the lock instead of failing at once: seconds as flock(1)
    /// takes them ("10", "0.5") or a duration ("10s", "1m 30s").
    #[arg(long, short = 'w', value_name = "SECONDS|DURATION", value_parser = parse_wait)]
    wait: Option<Duration>,
    /// Fail at once if the lock is held (the default without --wait; as flock -n).
    #[arg(long, short = 'n', conflicts_with = "wait")]
    nonblock: bool,
    /// The exit status when the lock is held elsewhere (default 75), so that it cannot be
    /// mistaken for one of COMMAND's own.
    #[arg(long, short = 'E', value_name = "N", default_value_t = EXIT_LOCK_HELD)]
    pub(super) conflict_exit_code: u8,
    /// Print nothing when the lock is held elsewhere (no cron mail for the hosts that
    /// did not run the job), and nothing of leaderd's own unless it failed.
    #[arg(long, short = 'q')]
    pub(super) quiet: bool,
    /// Keep the lock taken until at least this long after it was taken, even if COMMAND
    /// finished sooner: the end is written into the lock's row and leaderd exits at once
    /// with COMMAND's status; the row lapses then by the database clock. A cron that
    /// fires late on another host finds it held.
    #[arg(long, value_name = "DURATION", value_parser = parse_hold)]
    pub(super) hold_at_least: Option<Duration>,
    /// The longest COMMAND may run (ShedLock's lockAtMostFor): at this long after the lock
    /// was taken it gets SIGTERM, then SIGKILL after --stop-timeout, and leaderd exits
    /// 124 and releases the lock.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::positive)]
    pub(super) hold_at_most: Option<Duration>,
    /// With --hold-at-most: the time COMMAND gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_hold)]
    stop_timeout: Duration,
    /// After each run, write its outcome to FILE in Prometheus text format, for
    /// node_exporter's textfile collector (one file per lock; replaced atomically).
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<std::path::PathBuf>,
    /// Take the row of the election NAME itself instead of the lock's own row
    /// (`lock:NAME`): COMMAND then runs only while no node of election NAME leads, and
    /// keeps them from leading while it runs.
    #[arg(long)]
    election_row: bool,
}

impl LockCronFlags {
    /// How long to wait for the lock (zero: not at all).
    pub(super) fn wait(&self) -> Duration {
        match self.nonblock {
            true => Duration::ZERO,
            false => self.wait.unwrap_or_default(),
        }
    }

    /// The holds make sense together: a minimum no longer than the maximum (as ShedLock
    /// requires), and a maximum above zero.
    pub(super) fn check(&self) -> Result<(), String> {
        match (self.hold_at_least, self.hold_at_most) {
            (_, Some(most)) if most.is_zero() => {
                Err("--hold-at-most 0: must be above zero".to_owned())
            }
            (Some(least), Some(most)) if least > most => Err(format!(
                "--hold-at-least {} is longer than --hold-at-most {}",
                humantime::format_duration(least),
                humantime::format_duration(most)
            )),
            _ => Ok(()),
        }
    }

    /// The row the lock NAME takes: its own, `lock:NAME`, apart from every election's
    /// (an election's name cannot start with `lock:`), or with --election-row the
    /// election's row NAME.
    pub(super) fn row(&self, name: &str) -> String {
        match self.election_row {
            true => name.to_owned(),
            false => format!("{LOCK_ROW_PREFIX}{name}"),
        }
    }
}

/// Awaits `run` (COMMAND), stopping it through `stop` at --hold-at-most after the lock
/// was taken: SIGTERM then, SIGKILL --stop-timeout later. Whether it was stopped so.
pub(super) async fn limit<T>(
    run: impl Future<Output = T>,
    flags: &LockCronFlags,
    taken_at: Instant,
    stop: watch::Sender<Option<Instant>>,
) -> (T, bool) {
    tokio::pin!(run);
    let Some(at_most) = flags.hold_at_most else {
        return (run.await, false);
    };
    tokio::select! {
        ran = &mut run => (ran, false),
        () = sleep_until(taken_at + at_most) => {
            eprintln!(
                "leaderd: COMMAND ran past --hold-at-most {}: sending it SIGTERM, and SIGKILL \
                 after {}",
                humantime::format_duration(at_most),
                humantime::format_duration(flags.stop_timeout),
            );
            let _ = stop.send(Some(Instant::now() + flags.stop_timeout));
            (run.await, true)
        }
    }
}

/// A lock's errors name it as its user did, not by its row.
pub(super) fn named(error: LockError, name: &str) -> LockError {
    match error {
        LockError::Held {
            holder,
            term,
            lapses_in,
            waited,
            ..
        } => LockError::Held {
            name: name.to_owned(),
            holder,
            term,
            lapses_in,
            waited,
        },
        LockError::Unavailable { source, .. } => LockError::Unavailable {
            name: name.to_owned(),
            source,
        },
        LockError::TaskEnded { .. } => LockError::TaskEnded {
            name: name.to_owned(),
        },
        other => other,
    }
}

/// A wait as flock(1) writes it, bare seconds ("10", "0.5"), or a duration ("10s").
fn parse_wait(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let wait = match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())?
        }
        Ok(_) => return Err("must be zero or more seconds".to_owned()),
        Err(_) => crate::duration::parse(text)
            .map_err(|e| format!("{e}, or write seconds as flock(1) does (\"10\", \"0.5\")"))?,
    };
    crate::duration::Rule::zero_means("do not wait").check(wait)
}

fn parse_hold(text: &str) -> Result<Duration, String> {
    crate::duration::zero_or_more(text)
}

/// The signals `leaderd lock` receives: passed on to COMMAND while it runs.
pub(super) struct Signals {
    received: mpsc::UnboundedReceiver<Signal>,
    open: bool,
}

impl Signals {
    pub(super) fn new(received: mpsc::UnboundedReceiver<Signal>) -> Self {
        Signals {
            received,
            open: true,
        }
    }

    /// The next signal; pending for ever once none can come.
    async fn next(&mut self) -> Signal {
        if self.open {
            match self.received.recv().await {
                Some(signal) => return signal,
                None => self.open = false,
            }
        }
        std::future::pending().await
    }

    /// Runs `run` (COMMAND) with every signal that arrives meanwhile passed on to it.
    pub(super) async fn forward_while<F: Future>(
        &mut self,
        run: impl FnOnce(mpsc::UnboundedReceiver<Signal>) -> F,
    ) -> F::Output {
        let (forward, forwarded) = mpsc::unbounded_channel();
        let run = run(forwarded);
        tokio::pin!(run);
        loop {
            tokio::select! {
                output = &mut run => return output,
                signal = self.next() => {
                    let _ = forward.send(signal);
                }
            }
        }
    }
}

/// Releases the lock once COMMAND is done, or with `hold` (--hold-at-least) keeps it
/// taken until `hold` after it was taken: the end is written into the row, and leaderd
/// exits at once while the lease lapses by the database clock.
pub(super) async fn release(guard: LockGuard, name: &str, hold: Duration) {
    let left = (guard.taken_at() + hold).saturating_duration_since(Instant::now());
    let term = guard.term();
    match guard.release_holding(hold).await {
        Ok(true) if !left.is_zero() => info!(
            lock = name,
            term,
            left = %humantime::format_duration(round_to_ms(left)),
            "command done; the lock stays taken for the rest of --hold-at-least, renewed no more"
        ),
        Ok(_) => {}
        Err(error) if !left.is_zero() => eprintln!(
            "leaderd: could not keep lock {name:?} taken for the rest of --hold-at-least \
             ({error}); it lapses at the end of its last renewed lease"
        ),
        Err(error) => {
            eprintln!("leaderd: could not release lock {name:?} ({error}); it lapses by itself")
        }
    }
}

fn round_to_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}

/// What became of one `leaderd lock` run, by its exit status, for --metrics-file.
fn outcome(flags: &LockCronFlags, code: Option<u8>) -> &'static str {
    match code {
        None => "failed",
        Some(code) if code == flags.conflict_exit_code => "held",
        Some(super::EXIT_LOCK_LOST) => "lost",
        Some(super::EXIT_TIMED_OUT) => "timed_out",
        Some(super::EXIT_UNAVAILABLE) => "unavailable",
        Some(super::EXIT_USAGE) => "usage",
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

/// Runs `lock` (the whole `leaderd lock`), then writes its outcome to --metrics-file.
pub(super) async fn recorded(
    flags: &LockCronFlags,
    name: &str,
    lock: impl Future<Output = anyhow::Result<u8>>,
) -> anyhow::Result<u8> {
    let started = std::time::SystemTime::now();
    let result = lock.await;
    if let Some(path) = &flags.metrics_file {
        let code = result.as_ref().ok().copied();
        let text = metrics_text(name, started, code, outcome(flags, code), path);
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
fn previous_success(path: &std::path::Path, name: &str) -> Option<String> {
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
    path: &std::path::Path,
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

fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_bare_seconds_or_a_duration() {
        assert_eq!(parse_wait("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_wait("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_wait("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(parse_wait("-1").is_err());
        assert!(parse_wait("ten").unwrap_err().contains("write seconds"));
        assert!(parse_hold("0").is_ok() && parse_hold("2d").is_err());
        assert!(parse_wait("2days").unwrap_err().contains("at most a day"));
    }
}
