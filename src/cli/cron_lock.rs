//! `leaderd lock` under cron: the flock(1)-compatible flags (`-w` in bare seconds, `-n`,
//! `-E`, `-q`) and `--hold-at-least`, which keeps the lock held after a short COMMAND so
//! that a host whose cron fires late finds it taken and does not run the job again.

use nix::sys::signal::Signal;
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::EXIT_LOCK_HELD;
use crate::lock::LockGuard;

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
    /// Keep the lock held until at least this long after it was taken, even if COMMAND
    /// finished sooner (renewing it meanwhile), then exit with COMMAND's status. A cron
    /// that fires late on another host then finds it held.
    #[arg(long, value_name = "DURATION", value_parser = parse_hold)]
    pub(super) hold_at_least: Option<Duration>,
}

impl LockCronFlags {
    /// How long to wait for the lock (zero: not at all).
    pub(super) fn wait(&self) -> Duration {
        match self.nonblock {
            true => Duration::ZERO,
            false => self.wait.unwrap_or_default(),
        }
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

/// The signals `leaderd lock` receives: passed on to COMMAND while it runs, and counted
/// during a hold afterwards.
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

/// Keeps `guard` held (its election renews it) until `until`. The point of the hold is to
/// keep a late cron on another host from running the job again, so a first SIGTERM or
/// SIGINT does not end it (a host going down keeps the lock as long as it can); a second
/// signal does, and the lock is then released. A lock lost meanwhile ends the hold too.
pub(super) async fn hold(guard: &LockGuard, name: &str, until: Instant, signals: &mut Signals) {
    if until <= Instant::now() || !guard.is_held() {
        return;
    }
    info!(
        lock = name,
        left = %humantime::format_duration(round_to_ms(until - Instant::now())),
        "command done; holding the lock for the rest of --hold-at-least"
    );
    let mut signalled = false;
    loop {
        tokio::select! {
            _ = sleep_until(until) => return,
            _ = guard.lost() => {
                warn!(
                    lock = name,
                    "lock lost during --hold-at-least; another host may run the job now"
                );
                return;
            }
            signal = signals.next() => {
                if signalled {
                    warn!(lock = name, %signal, "second signal: ending the hold, releasing the lock");
                    return;
                }
                signalled = true;
                eprintln!(
                    "leaderd: {signal} during --hold-at-least: holding lock {name:?} until the \
                     hold ends, so that no other host runs the job; send it again to release now"
                );
            }
        }
    }
}

fn round_to_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
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
