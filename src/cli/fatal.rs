//! The last words of a command that fails at the edge, and their exit status: one line on
//! stderr, or one JSON line through the log under `--log-format json` (also for a
//! configuration that does not load, before it could say the format).

use std::process::ExitCode;

use super::exit::{EXIT_CANT_CREATE, EXIT_CONFIG, EXIT_UNAVAILABLE};
use crate::config::ConfigError;
use crate::daemon::HttpError;
use crate::logging::{self, LogFormat, LogWriter};
use crate::store::StoreError;
use crate::{hooks, operator};

/// The format asked for before the configuration is read: the flag, else the variable.
fn asked(flag: Option<LogFormat>) -> LogFormat {
    flag.unwrap_or_else(|| match std::env::var("LEADERD_LOG__FORMAT").as_deref() {
        Ok("json") => LogFormat::Json,
        _ => LogFormat::Text,
    })
}

/// Before logging is set up: `message`, and exit with `status`.
pub(super) fn before_logging(flag: Option<LogFormat>, message: &str, status: u8) -> ExitCode {
    match asked(flag) {
        LogFormat::Json => {
            let (_, writer) = logging::init(LogFormat::Json, "error");
            after_logging(LogFormat::Json, writer, message, status)
        }
        LogFormat::Text => {
            eprintln!("leaderd: {message}");
            ExitCode::from(status)
        }
    }
}

/// Once logging is set up: `message` as the log's last line (JSON) or after the log
/// (text), and exit with `status`.
pub(super) fn after_logging(
    format: LogFormat,
    writer: LogWriter,
    message: &str,
    status: u8,
) -> ExitCode {
    match format {
        LogFormat::Json => {
            tracing::error!(exit_status = status, "{message}");
            writer.finish();
        }
        LogFormat::Text => {
            writer.finish();
            eprintln!("leaderd: {message}");
        }
    }
    ExitCode::from(status)
}

/// The message and exit status of a command's error: its whole chain, each part once
/// (causes that repeat their source's text), naming `database` where it was about it.
pub(super) fn outcome(error: &anyhow::Error, database: &str) -> (String, u8) {
    let text = crate::store::error_text::chain(error.as_ref());
    let is = |test: fn(&(dyn std::error::Error + 'static)) -> bool| error.chain().any(test);
    let text = match is(|e| e.is::<StoreError>() || e.is::<operator::OperatorError>()) {
        true => super::needs::naming_database(text, database),
        false => text,
    };
    let operator_status = error
        .chain()
        .find_map(|e| e.downcast_ref::<operator::OperatorError>())
        .and_then(operator::OperatorError::exit_status);
    let status = if let Some(status) = operator_status {
        status
    } else if is(|e| e.is::<StoreError>()) {
        EXIT_UNAVAILABLE
    } else if is(|e| e.is::<HttpError>()) {
        // As for a status file that cannot be written: what the configuration names
        // cannot be had.
        EXIT_CANT_CREATE
    } else if is(|e| e.is::<ConfigError>() || e.is::<hooks::ContainmentError>()) {
        EXIT_CONFIG
    } else {
        1
    };
    (text, status)
}
