//! `leaderd wait --until …`: blocks a script until this node leads or follows (its status
//! file, read every 100 ms), or until anyone or no one leads the election (the database,
//! read through the read-only store each interval, so it works from any host; on
//! PostgreSQL a release also wakes it at once).

use anyhow::Context;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tokio::time::{Instant, sleep_until};
use tracing::warn;

use crate::config::Config;
use crate::daemon::store;
use crate::election::Role;
use crate::status_file::StatusDocument;
use crate::store::LeaseStore;

/// `wait`: the condition did not hold within --timeout (sysexits.h EX_TEMPFAIL).
pub const EXIT_WAIT_TIMEOUT: u8 = 75;

/// How often the status file is read.
const FILE_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Until {
    /// This node leads (its status file, still valid, says so).
    Leader,
    /// This node runs and does not lead (its status file, still valid, says follower).
    Follower,
    /// Someone holds a live lease (the database).
    Elected,
    /// No one holds a live lease (the database).
    NoLeader,
}

#[derive(Debug, Clone, clap::Args)]
pub(super) struct WaitArgs {
    /// The condition to wait for.
    #[arg(long, value_enum)]
    until: Until,
    /// Give up after this long (exit 75); without it, wait for as long as it takes.
    #[arg(long, value_parser = crate::duration::positive)]
    timeout: Option<Duration>,
}

impl WaitArgs {
    /// Whether the condition is read from the database (not the status file).
    pub(super) fn reads_database(&self) -> bool {
        !matches!(self.until, Until::Leader | Until::Follower)
    }
}

pub(super) async fn wait(config: Config, args: WaitArgs) -> anyhow::Result<ExitCode> {
    let give_up = args.timeout.and_then(|t| Instant::now().checked_add(t));
    let held = match args.until {
        Until::Leader => wait_for_file(&config, Role::Leader, give_up).await,
        Until::Follower => wait_for_file(&config, Role::Follower, give_up).await,
        Until::Elected => wait_for_database(&config, true, give_up).await?,
        Until::NoLeader => wait_for_database(&config, false, give_up).await?,
    };
    Ok(match held {
        true => ExitCode::SUCCESS,
        false => {
            eprintln!(
                "leaderd: gave up waiting for {} after {}",
                args.until.describe(),
                humantime::format_duration(args.timeout.unwrap_or_default())
            );
            ExitCode::from(EXIT_WAIT_TIMEOUT)
        }
    })
}

/// The role this node's status file gives, if the file is there and still valid.
fn role_in_file(config: &Config) -> Option<Role> {
    let text = std::fs::read_to_string(&config.status.path).ok()?;
    let document: StatusDocument = serde_json::from_str(&text).ok()?;
    let valid_until = humantime::parse_rfc3339(&document.valid_until).ok()?;
    (valid_until > SystemTime::now()).then_some(document.role)
}

impl Until {
    /// What is waited for, as the flag says it and what it means.
    fn describe(self) -> &'static str {
        match self {
            Until::Leader => "leader (this node leads)",
            Until::Follower => "follower (this node runs and does not lead)",
            Until::Elected => "elected (someone leads)",
            Until::NoLeader => "no-leader (no one leads)",
        }
    }
}

/// Whether the file showed `role` before `give_up`.
async fn wait_for_file(config: &Config, role: Role, give_up: Option<Instant>) -> bool {
    let mut said = false;
    loop {
        // A file that is not there may never come: say so once, and keep waiting.
        if !said && !config.status.path.exists() {
            warn!(
                path = %config.status.path.display(),
                "no status file at {} (yet): waiting for `leaderd run` with this \
                 configuration (status.path) to write it",
                config.status.path.display()
            );
            said = true;
        }
        if role_in_file(config) == Some(role) {
            return true;
        }
        let next = Instant::now() + FILE_POLL;
        if give_up.is_some_and(|at| at <= next) {
            // One last look at the deadline.
            sleep_until(give_up.unwrap()).await;
            return role_in_file(config) == Some(role);
        }
        sleep_until(next).await;
    }
}

/// Whether the database showed a live leader (`elected`) or none before `give_up`. A
/// failing database is retried; an error is reported only if it is still failing then.
async fn wait_for_database(
    config: &Config,
    elected: bool,
    give_up: Option<Instant>,
) -> anyhow::Result<bool> {
    let mut store = store(config, false).read_only();
    let mut releases = store.release_notifications(&config.election.name);
    let mut warned = false;
    loop {
        let mut next = Instant::now() + config.election.interval;
        match store.get(&config.election.name).await {
            Ok(row) => {
                let led = row.as_ref().is_some_and(|r| r.live_holder().is_some());
                if led == elected {
                    return Ok(true);
                }
                // Waiting for a lapse: look again as the lease can end.
                if let Some(row) = row.filter(|_| !elected) {
                    next = next.min(Instant::now() + row.remaining() + Duration::from_millis(10));
                }
            }
            Err(error) if give_up.is_some_and(|at| Instant::now() >= at) => {
                return Err(error)
                    .with_context(|| format!("cannot read election {:?}", config.election.name));
            }
            Err(error) => {
                if !warned {
                    warn!(%error, "cannot read the election; retrying");
                    warned = true;
                }
            }
        }
        if give_up.is_some_and(|at| Instant::now() >= at) {
            return Ok(false);
        }
        let next = give_up.map_or(next, |at| next.min(at));
        tokio::select! {
            _ = sleep_until(next) => {}
            Some(()) = async { releases.as_mut()?.recv().await } => {}
        }
    }
}
