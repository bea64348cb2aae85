//! Log output: human-readable or JSON lines on stderr, or journal fields when stderr is
//! the journal (`journal.rs`), written by a thread of their own.
//!
//! Nothing that logs may wait for stderr: a stalled journald or a pipe nobody reads would
//! otherwise stop the election loop at its next log line. Lines go through a bounded
//! queue to a writer thread; when the queue is full they are dropped, counted
//! (`leaderd_log_lines_dropped_total`), and the count is logged once stderr takes lines
//! again.

use prometheus_client::metrics::counter::Counter;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::task::JoinHandle;
use tracing::warn;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

mod journal;

/// Lines waiting for stderr before new ones are dropped: several seconds of a busy log.
/// Hook output lines are at most 8 KiB, so this bounds the queue at 16 MiB; ordinary
/// lines are a few hundred bytes.
const QUEUED_LINES: usize = 2048;

/// How often dropped lines are counted into the metric and, once none are being
/// dropped, reported in the log.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Log lines dropped by this process's writer; one per process, like the writer.
static LINES_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The dropped-lines counter, for the metrics registry.
pub fn lines_dropped_metric() -> Counter {
    LINES_DROPPED.clone()
}

/// The writer thread's dropped lines: counted into [`LINES_DROPPED`], and logged.
struct Drops {
    writer: ErrorCounter,
    /// Drops already written to the log.
    logged: AtomicU64,
}

impl Drops {
    /// Counts drops since the last call into the metric; returns how many there were.
    fn count(&self) -> u64 {
        let total = self.writer.dropped_lines() as u64;
        let new = total.saturating_sub(LINES_DROPPED.get());
        LINES_DROPPED.inc_by(new);
        new
    }

    /// Logs the drops counted but not logged yet.
    fn report(&self) {
        let counted = LINES_DROPPED.get();
        let logged = self.logged.swap(counted, Ordering::Relaxed);
        if counted > logged {
            let dropped = counted - logged;
            warn!(
                dropped,
                "{dropped} log lines dropped while stderr was blocked"
            );
        }
    }
}

/// Owns the writer thread: keep it for the life of the process, then
/// [`LogWriter::finish`] to flush what is queued.
pub struct LogWriter {
    drops: Arc<Drops>,
    guard: WorkerGuard,
}

impl LogWriter {
    /// Counts dropped lines into the metric every second and logs how many were dropped
    /// once a second passes without drops (the stall is over).
    pub fn spawn_reporter(&self) -> JoinHandle<()> {
        let drops = Arc::clone(&self.drops);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(REPORT_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if drops.count() == 0 {
                    drops.report();
                }
            }
        })
    }

    /// Logs drops not reported yet and flushes the queue. Bounded: the writer thread gets
    /// about a second to write what is queued, so a blocked stderr cannot hold up the exit.
    pub fn finish(self) {
        self.drops.count();
        self.drops.report();
        drop(self.guard);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

type SetLevel = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Changes the log level of a running process (on reload).
pub struct LogLevel(SetLevel);

impl LogLevel {
    /// Applies `level` (an `EnvFilter` directive such as `info` or `leaderd=debug`).
    pub fn set(&self, level: &str) -> Result<(), String> {
        (self.0)(level)
    }
}

/// `RUST_LOG` wins over the configured level (and over later reloads of it).
pub fn init(format: LogFormat, level: &str) -> (LogLevel, LogWriter) {
    let from_env = EnvFilter::try_from_default_env().ok();
    let pinned = from_env.is_some();
    let filter = from_env
        .or_else(|| EnvFilter::try_new(level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    // Under systemd, with stderr connected to the journal: journal fields instead of
    // lines (`journal.rs`), whatever the format.
    let journal = journal::stderr_is_journal()
        .then(journal::JournalWriter::new)
        .and_then(Result::ok);
    let to_journal = journal.is_some();
    let output: Box<dyn std::io::Write + Send> = match journal {
        Some(journal) => Box::new(journal),
        None => Box::new(std::io::stderr()),
    };
    // Lossy: a full queue drops the line instead of making the caller wait.
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("leaderd-log")
        .finish(output);
    let log_writer = LogWriter {
        drops: Arc::new(Drops {
            writer: writer.error_counter(),
            logged: AtomicU64::new(LINES_DROPPED.get()),
        }),
        guard,
    };
    // Colours only for a person at a terminal, not for files and journald.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    let set: SetLevel = match format {
        _ if to_journal => {
            let builder = builder
                .with_ansi(false)
                .event_format(journal::JournalFormat)
                .with_filter_reloading();
            let handle = builder.reload_handle();
            let _ = builder.try_init();
            Box::new(move |level| reload(&handle, level, pinned))
        }
        LogFormat::Text => {
            let builder = builder.with_filter_reloading();
            let handle = builder.reload_handle();
            let _ = builder.try_init();
            Box::new(move |level| reload(&handle, level, pinned))
        }
        LogFormat::Json => {
            let builder = builder.json().flatten_event(true).with_filter_reloading();
            let handle = builder.reload_handle();
            let _ = builder.try_init();
            Box::new(move |level| reload(&handle, level, pinned))
        }
    };
    (LogLevel(set), log_writer)
}

fn reload<S>(
    handle: &tracing_subscriber::reload::Handle<EnvFilter, S>,
    level: &str,
    pinned: bool,
) -> Result<(), String> {
    if pinned {
        return Err("RUST_LOG is set and takes precedence over log.level".into());
    }
    let filter = EnvFilter::try_new(level).map_err(|e| format!("log.level = {level:?}: {e}"))?;
    handle.reload(filter).map_err(|e| e.to_string())
}
