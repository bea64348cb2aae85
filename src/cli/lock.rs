//! `leaderd lock NAME -- COMMAND`: COMMAND run under the lock NAME, with the same guard,
//! fence and containment as a hook. Built for cron: the flock(1)-compatible flags (`-w`
//! in bare seconds, `-n`, `-E`, `-q`), `--hold-at-least`, which leaves the lock taken in
//! its row after a short COMMAND so that a host whose cron fires late finds it taken and
//! does not run the job again, `--hold-at-most`, and the lock's own row (`lock:NAME`).
//! `--metrics-file` is `metrics_file.rs`.

use anyhow::Context;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tracing::info;

use super::exit::{
    EXIT_CANT_CREATE, EXIT_LOCK_HELD, EXIT_LOCK_LOST, EXIT_TIMED_OUT, EXIT_UNAVAILABLE, EXIT_USAGE,
};
use crate::config::Config;
use crate::election::settings::id_with_suffix;
use crate::hooks::{self, HookContext};
use crate::lock::{LockError, LockGuard, LockOptions, lock_row};
use crate::signals;

mod forward;
mod metrics_file;

use forward::Signals;

/// `--stop-timeout` when not given, as `leader_command`'s `stop_timeout`.
const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(5);

use metrics_file::Outcome;

/// `leaderd lock`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct LockArgs {
    /// The lease length; it is renewed every third of it.
    #[arg(long, default_value = "30s", value_parser = crate::duration::positive)]
    ttl: Duration,
    #[command(flatten)]
    cron: LockCronFlags,
    /// Log at the configured level (default: warnings and errors only).
    #[arg(long, short)]
    verbose: bool,
    /// The lock's name (1 to 95 characters, no white space at either end); its row in the
    /// election table is `lock:NAME` (see --election-row).
    name: String,
    /// The command and its arguments (`--` before it is optional, as with flock(1)).
    #[arg(
        trailing_var_arg = true,
        value_name = "COMMAND",
        required_unless_present = "shell_command"
    )]
    command: Vec<String>,
    /// Run this command line with the shell (`$SHELL -c`, else `/bin/sh -c`), as flock's
    /// -c does, instead of COMMAND.
    #[arg(
        long = "command",
        short = 'c',
        value_name = "COMMAND",
        conflicts_with = "command"
    )]
    shell_command: Option<String>,
}

impl LockArgs {
    /// COMMAND, or the `-c` command line run by the shell as flock(1) runs it.
    fn argv(&self) -> Vec<String> {
        match &self.shell_command {
            Some(line) => {
                let shell = std::env::var("SHELL")
                    .ok()
                    .filter(|shell| !shell.is_empty())
                    .unwrap_or_else(|| "/bin/sh".to_owned());
                vec![shell, "-c".to_owned(), line.clone()]
            }
            None => self.command.clone(),
        }
    }

    /// The log level in place of the configured one: a cron job's mail should hold the
    /// job's output, not leaderd's; with -q, nothing of leaderd's unless it failed.
    pub(super) fn log_level(&self) -> Option<&'static str> {
        match (self.verbose, self.cron.quiet) {
            (true, _) => None,
            (false, true) => Some("error"),
            (false, false) => Some("warn"),
        }
    }
}

/// The whole `leaderd lock`, its outcome written to --metrics-file if asked: COMMAND's
/// exit status, or leaderd's own.
pub(super) async fn run(config: Config, args: LockArgs) -> anyhow::Result<u8> {
    let metrics_file = args.cron.metrics_file.clone();
    if let Some(path) = &metrics_file {
        if let Err(why) = metrics_file::check_directory(path) {
            eprintln!(
                "leaderd: --metrics-file {}: {why}; not taking the lock nor running the command",
                path.display()
            );
            return Ok(EXIT_CANT_CREATE);
        }
    }
    let name = args.name.clone();
    metrics_file::recorded(metrics_file.as_deref(), &name, lock(config, args)).await
}

async fn lock(config: Config, args: LockArgs) -> anyhow::Result<(u8, Outcome)> {
    let argv = args.argv();
    let LockArgs {
        ttl, cron, name, ..
    } = args;
    let name = name.as_str();
    // Before the lock is taken: a "cgroup" that cannot be had fails without holding it.
    let containment = hooks::resolve_containment(config.hooks.containment)?;
    // Installed first: a signal while waiting ends the wait, and later ones reach COMMAND.
    let mut signals = signals::forwarded_signals().context("cannot install signal handlers")?;
    // Unique per invocation: two `leaderd lock` on one host are two holders. A long node
    // id gives way to the pid.
    let holder = id_with_suffix(&config.node.id, &format!(":{}", std::process::id()));
    if let Err(error) = cron.check() {
        eprintln!("leaderd: {error}");
        return Ok((EXIT_USAGE, Outcome::Usage));
    }
    let options = cron
        .row(name)
        .and_then(|row| LockOptions::new(&row, ttl))
        .and_then(|o| o.holder(&holder));
    let options = match options {
        Ok(options) => options,
        Err(error) => {
            eprintln!("leaderd: {error}");
            return Ok((EXIT_USAGE, Outcome::Usage));
        }
    };
    let renew_every = options.renewal_interval();
    let mut interrupted = None;
    let interrupt = async {
        interrupted = signals.recv().await;
        if interrupted.is_none() {
            std::future::pending::<()>().await;
        }
    };
    let acquired = options
        .acquire_unless(
            config.store(config.database.migrate),
            cron.wait(),
            interrupt,
        )
        .await;
    let guard = match acquired.map_err(|error| named(error, name)) {
        Ok(guard) => guard,
        Err(LockError::Cancelled { .. }) => {
            let signal = interrupted.expect("cancelled by a signal");
            eprintln!("leaderd: {signal} while waiting for lock {name:?}; not running the command");
            return Ok((128 + signal as u8, Outcome::Failed));
        }
        Err(error @ LockError::Held { .. }) => {
            if !cron.quiet {
                eprintln!("leaderd: {error}");
            }
            return Ok((cron.conflict_exit_code, Outcome::Held));
        }
        Err(error) => {
            let url = config.database.url.redacted();
            eprintln!(
                "leaderd: {}",
                super::needs::naming_database(error.to_string(), &url)
            );
            return Ok((EXIT_UNAVAILABLE, Outcome::Unavailable));
        }
    };
    if let Some(signal) = interrupted {
        // It came as the lock was taken: honour it rather than lose it.
        let _ = guard.release().await;
        eprintln!("leaderd: {signal} while taking lock {name:?}; not running the command");
        return Ok((128 + signal as u8, Outcome::Failed));
    }
    info!(
        lock = name,
        holder,
        term = guard.term(),
        "lock taken; running the command"
    );
    let backend = config.database.url.backend();
    let env = vec![
        ("LEADERD_LOCK".to_owned(), name.to_owned()),
        ("LEADERD_TERM".to_owned(), guard.term().to_string()),
        ("LEADERD_HOLDER".to_owned(), holder.clone()),
        ("LEADERD_FENCE".to_owned(), guard.fence().statement(backend)),
    ];
    let context = HookContext {
        election: name.to_owned(),
        node_id: holder.clone(),
        interval: renew_every,
        ttl,
        metrics: None,
        containment,
        backend,
    };
    let term = guard.term();
    let program = argv[0].clone();
    let mut signals = Signals::new(signals);
    let (stop, stop_by) = tokio::sync::watch::channel(None);
    let run = signals.forward_while(|forward| {
        hooks::run_leased(argv, env, context, term, guard.status(), forward, stop_by)
    });
    let (ran, timed_out) = limit(run, &cron, guard.taken_at(), stop).await;
    let still_held = guard.is_held();
    if timed_out && still_held {
        release(guard, name, Duration::ZERO).await;
        return Ok((EXIT_TIMED_OUT, Outcome::TimedOut));
    }
    let hold = match (cron.hold_at_least, ran.status, ran.fenced) {
        (Some(hold), Some(_), false) => hold,
        _ => Duration::ZERO,
    };
    release(guard, name, hold).await;
    use std::os::unix::process::ExitStatusExt;
    match ran.status {
        None if !still_held => {
            eprintln!(
                "leaderd: lost lock {name:?} (term {term}) before the command could start: \
                 the database did not take a renewal in time"
            );
            Ok((EXIT_LOCK_LOST, Outcome::Lost))
        }
        _ if ran.fenced => {
            eprintln!(
                "leaderd: lost lock {name:?} (term {term}): the database did not take a renewal \
                 in time, so the command was stopped before the lease could lapse and another \
                 holder could start"
            );
            Ok((EXIT_LOCK_LOST, Outcome::Lost))
        }
        Some(status) => Ok((
            match (status.code(), status.signal()) {
                (Some(code), _) => code as u8,
                (None, Some(signal)) => 128 + signal as u8,
                _ => 1,
            },
            Outcome::Ran,
        )),
        None => anyhow::bail!("could not start {program:?} (the reason is logged above)"),
    }
}

/// The flags `leaderd lock` shares with flock(1), and the hold.
#[derive(Debug, clap::Args)]
struct LockCronFlags {
    /// Wait up to this long for the lock instead of failing at once: seconds as flock(1)
    /// takes them ("10", "0.5") or a duration ("10s", "1m 30s").
    #[arg(
        long,
        short = 'w',
        visible_alias = "timeout",
        value_name = "SECONDS|DURATION",
        value_parser = parse_wait
    )]
    wait: Option<Duration>,
    /// Fail at once if the lock is held (the default without --wait; as flock -n).
    #[arg(long, short = 'n', visible_alias = "nb", conflicts_with = "wait")]
    nonblock: bool,
    /// Accepted for flock(1)'s sake: a lock is always exclusive.
    #[arg(long, short = 'x', short_alias = 'e')]
    exclusive: bool,
    /// Accepted for flock(1)'s sake: COMMAND holds no descriptor of the lock to close.
    #[arg(long, short = 'o')]
    close: bool,
    /// flock(1)'s shared lock, which leaderd has not: refused.
    #[arg(long, short = 's', hide = true)]
    shared: bool,
    /// flock(1)'s unlock of a descriptor: refused (see `leaderd unlock`).
    #[arg(long, short = 'u', hide = true)]
    unlock: bool,
    /// flock(1)'s --no-fork: refused (COMMAND always runs under a guard of its own).
    #[arg(long = "no-fork", short = 'F', hide = true)]
    no_fork: bool,
    /// The exit status when the lock is held elsewhere (default 75), so that it cannot be
    /// mistaken for one of COMMAND's own.
    #[arg(long, short = 'E', value_name = "N", default_value_t = EXIT_LOCK_HELD)]
    conflict_exit_code: u8,
    /// Print nothing when the lock is held elsewhere (no cron mail for the hosts that
    /// did not run the job), and nothing of leaderd's own unless it failed.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Keep the lock taken until at least this long after it was taken, even if COMMAND
    /// finished sooner: the end is written into the lock's row and leaderd exits at once
    /// with COMMAND's status; the row lapses then by the database clock. A cron that
    /// fires late on another host finds it held.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::zero_or_more)]
    hold_at_least: Option<Duration>,
    /// The longest COMMAND may run (ShedLock's lockAtMostFor): at this long after the lock
    /// was taken it gets SIGTERM, then SIGKILL after --stop-timeout, and leaderd exits
    /// 124 and releases the lock.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::positive)]
    hold_at_most: Option<Duration>,
    /// With --hold-at-most: the time COMMAND gets between SIGTERM and SIGKILL [default:
    /// 5s].
    #[arg(long, value_name = "DURATION", requires = "hold_at_most", value_parser = crate::duration::zero_or_more)]
    stop_timeout: Option<Duration>,
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
    fn wait(&self) -> Duration {
        match self.nonblock {
            true => Duration::ZERO,
            false => self.wait.unwrap_or_default(),
        }
    }

    /// With --hold-at-most: how long COMMAND gets between SIGTERM and SIGKILL.
    fn stop_timeout(&self) -> Duration {
        self.stop_timeout.unwrap_or(DEFAULT_STOP_TIMEOUT)
    }

    /// flock(1)'s flags that have no meaning here are refused, and the holds make sense
    /// together: a minimum no longer than the maximum (as ShedLock requires), and a
    /// maximum above zero.
    fn check(&self) -> Result<(), String> {
        let unlike_flock = [
            (self.shared, "-s/--shared: a leaderd lock is exclusive only"),
            (
                self.unlock,
                "-u/--unlock: there is no descriptor to unlock; `leaderd unlock NAME` \
                 releases a lock whose holder is gone",
            ),
            (
                self.no_fork,
                "-F/--no-fork: COMMAND always runs under a guard process of its own",
            ),
        ];
        if let Some((_, why)) = unlike_flock.iter().find(|(given, _)| *given) {
            return Err(format!("{why} (flock(1) has it; leaderd lock does not)"));
        }
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
    fn row(&self, name: &str) -> Result<String, LockError> {
        match self.election_row {
            true => Ok(name.to_owned()),
            false => lock_row(name),
        }
    }
}

/// Awaits `run` (COMMAND), stopping it through `stop` at --hold-at-most after the lock
/// was taken: SIGTERM then, SIGKILL --stop-timeout later. Whether it was stopped so.
async fn limit<T>(
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
                humantime::format_duration(flags.stop_timeout()),
            );
            let _ = stop.send(Some(Instant::now() + flags.stop_timeout()));
            (run.await, true)
        }
    }
}

/// A lock's errors name it as its user did, not by its row.
fn named(error: LockError, name: &str) -> LockError {
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

/// Releases the lock once COMMAND is done, or with `hold` (--hold-at-least) keeps it
/// taken until `hold` after it was taken: the end is written into the row, and leaderd
/// exits at once while the lease lapses by the database clock.
async fn release(guard: LockGuard, name: &str, hold: Duration) {
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
        assert!(
            crate::duration::zero_or_more("0").is_ok()
                && crate::duration::zero_or_more("2d").is_err()
        );
        assert!(parse_wait("2days").unwrap_err().contains("at most a day"));
    }
}
