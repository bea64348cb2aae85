//! journald's native protocol, for a process whose stderr is the journal
//! (`JOURNAL_STREAM`): each event becomes one datagram of `KEY=value` fields, so
//! `journalctl -o json` shows `ELECTION`, `NODE`, `TERM` and the rest as fields of their
//! own rather than inside a line of text. The datagrams go through the same non-blocking
//! queue as stderr lines: a stalled journald never holds up the election.

use std::fmt::Write as _;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Where journald listens for native-protocol datagrams.
const SOCKET: &str = "/run/systemd/journal/socket";

/// Whether stderr is the journal stream systemd connected this process to: set
/// `JOURNAL_STREAM` (`device:inode`) naming the very stream stderr is, as systemd's
/// documentation asks (a child that inherited the variable with another stderr is not).
pub fn stderr_is_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    match nix::sys::stat::fstat(io::stderr().as_fd()) {
        Ok(stat) => stat.st_dev == dev && stat.st_ino == ino,
        Err(_) => false,
    }
}

/// Sends each write (one formatted event) as one datagram to journald.
pub struct JournalWriter {
    socket: UnixDatagram,
}

impl JournalWriter {
    pub fn new() -> io::Result<Self> {
        Ok(JournalWriter {
            socket: UnixDatagram::unbound()?,
        })
    }
}

impl io::Write for JournalWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.socket.send_to(buf, SOCKET)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Formats an event as journal fields: PRIORITY (syslog's levels), SYSLOG_IDENTIFIER,
/// TARGET, MESSAGE, and each field of the event under its name in upper case (`election`
/// → `ELECTION`). A value's line breaks are written as `\n`, so that every field stays
/// on one line of the simple form of the protocol.
pub struct JournalFormat;

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let priority = match *meta.level() {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        write!(
            writer,
            "PRIORITY={priority}\nSYSLOG_IDENTIFIER=leaderd\nTARGET={}\n{}MESSAGE={}\n",
            one_line(meta.target()),
            fields.text,
            one_line(&fields.message)
        )
    }
}

/// The fields of one event: MESSAGE apart, the others as `KEY=value` lines.
#[derive(Default)]
struct Fields {
    message: String,
    text: String,
}

/// The fields this format sets itself: an event's field of the same name is renamed.
const OWN: [&str; 4] = ["PRIORITY", "SYSLOG_IDENTIFIER", "TARGET", "MESSAGE"];

/// A journal field name: upper case letters, digits and underscores, not starting with
/// a digit or an underscore (those are journald's own).
pub fn field_name(name: &str) -> String {
    let mut key: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' => c.to_ascii_uppercase(),
            'A'..='Z' | '0'..='9' => c,
            _ => '_',
        })
        .collect();
    if key.is_empty()
        || key.starts_with(|c: char| c.is_ascii_digit() || c == '_')
        || OWN.contains(&key.as_str())
    {
        key.insert_str(0, "F_");
    }
    key
}

fn one_line(text: &str) -> String {
    text.replace('\n', "\\n")
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            name => {
                let _ = writeln!(self.text, "{}={}", field_name(name), one_line(value));
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}");
        match field.name() {
            "message" => self.message = value,
            name => {
                let _ = writeln!(self.text, "{}={}", field_name(name), one_line(&value));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_are_journal_names() {
        assert_eq!(field_name("election"), "ELECTION");
        assert_eq!(field_name("elapsed_ms"), "ELAPSED_MS");
        assert_eq!(field_name("hook.name"), "HOOK_NAME");
        assert_eq!(field_name("_private"), "F__PRIVATE");
        assert_eq!(field_name("2x"), "F_2X");
        assert_eq!(field_name("priority"), "F_PRIORITY");
    }
}
