//! `leaderd wait --until …`: blocks a script until this node leads or follows (its status
//! file, read every 100 ms), or until anyone or no one leads the election, or the leader or
//! term changes (the database, read through the read-only store each interval, so it
//! works from any host; on PostgreSQL a release also wakes it at once).

use anyhow::Context;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tokio::time::{Instant, sleep_until};
use tracing::warn;

use crate::config::Config;
use crate::election::Role;
use crate::status_file::StatusDocument;
use crate::store::{LeaseRow, LeaseStore};

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
    /// No one holds a live lease (the database), or a new holder took it from another
    /// since the last read: a lease changes hands only through a moment without one, which
    /// a crash failover makes too short to read.
    NoLeader,
    /// The leader or the term is no longer what the first read found (the database): a
    /// new term, another leader, or none.
    Changed,
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
        Until::Elected | Until::NoLeader | Until::Changed => {
            wait_for_database(&config, args.until, give_up).await?
        }
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
    document.role_at(SystemTime::now())
}

impl Until {
    /// What is waited for, as the flag says it and what it means.
    fn describe(self) -> &'static str {
        match self {
            Until::Leader => "leader (this node leads)",
            Until::Follower => "follower (this node runs and does not lead)",
            Until::Elected => "elected (someone leads)",
            Until::NoLeader => "no-leader (no one leads)",
            Until::Changed => "changed (a new term, or another leader or none)",
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

/// Who leads in which term, as one read of the row found it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    leader: Option<String>,
    term: Option<i64>,
}

impl Seen {
    fn of(row: Option<&LeaseRow>) -> Seen {
        Seen {
            leader: row.and_then(|r| r.live_holder()).map(str::to_owned),
            term: row.map(|r| r.term),
        }
    }
}

/// Whether `until` holds, given what the first read (`first`), the read before (`last`)
/// and this one (`now`) found.
fn met(until: Until, first: &Seen, last: Option<&Seen>, now: &Seen) -> bool {
    match until {
        Until::Elected => now.leader.is_some(),
        Until::NoLeader => {
            // Another holder took the lease in a later term: it was free or lapsed at the
            // moment of that claim, whether or not a read fell in that moment.
            let handed_on = last.is_some_and(|last| {
                last.leader.is_some() && now.leader != last.leader && now.term > last.term
            });
            now.leader.is_none() || handed_on
        }
        Until::Changed => now != first,
        Until::Leader | Until::Follower => unreachable!("read from the status file"),
    }
}

/// Whether the database met `until` (elected, no-leader, changed) before `give_up`. A
/// failing database is retried; an error is reported only if it is still failing then.
async fn wait_for_database(
    config: &Config,
    until: Until,
    give_up: Option<Instant>,
) -> anyhow::Result<bool> {
    let mut store = config.store(false).read_only();
    let mut releases = store.release_notifications(&config.election.name);
    let mut warned = false;
    let mut first: Option<Seen> = None;
    let mut last: Option<Seen> = None;
    loop {
        let mut next = Instant::now() + config.election.interval;
        match store.get(&config.election.name).await {
            Ok(row) => {
                let now = Seen::of(row.as_ref());
                let first = first.get_or_insert_with(|| now.clone());
                if met(until, first, last.as_ref(), &now) {
                    return Ok(true);
                }
                last = Some(now);
                // A lapse is a change: look again as the lease can end.
                if let Some(row) = row.filter(|_| until != Until::Elected) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(leader: Option<&str>, term: i64) -> Seen {
        Seen {
            leader: leader.map(str::to_owned),
            term: Some(term),
        }
    }

    #[test]
    fn no_leader_holds_across_a_failover_no_read_fell_in() {
        let a = seen(Some("a"), 7);
        let b = seen(Some("b"), 8);
        assert!(!met(Until::NoLeader, &a, None, &a));
        assert!(met(Until::NoLeader, &a, Some(&a), &b));
        // The same holder in a new term may have reacquired without a gap.
        assert!(!met(Until::NoLeader, &a, Some(&a), &seen(Some("a"), 8)));
        assert!(met(Until::NoLeader, &a, Some(&a), &seen(None, 7)));
    }

    #[test]
    fn changed_is_a_new_term_or_another_leader_or_none() {
        let a = seen(Some("a"), 7);
        assert!(!met(Until::Changed, &a, Some(&a), &a));
        assert!(met(Until::Changed, &a, Some(&a), &seen(Some("a"), 8)));
        assert!(met(Until::Changed, &a, Some(&a), &seen(None, 7)));
        let nothing = Seen {
            leader: None,
            term: None,
        };
        assert!(met(Until::Changed, &nothing, None, &seen(Some("a"), 1)));
    }
}
