//! Log output: human-readable or JSON lines on stderr.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

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
pub fn init(format: LogFormat, level: &str) -> LogLevel {
    let from_env = EnvFilter::try_from_default_env().ok();
    let pinned = from_env.is_some();
    let filter = from_env
        .or_else(|| EnvFilter::try_new(level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    // Colours only for a person at a terminal, not for files and journald.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let set: SetLevel = match format {
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
    LogLevel(set)
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
