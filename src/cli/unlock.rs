//! `leaderd unlock NAME`: breaks a lock whose holder is gone (a `leaderd lock` that was
//! SIGKILLed, or one that exited under `--hold-at-least`), or with `--force` any lock,
//! and says what it did. Also what `leaderd locks` marks: whether a holder's process,
//! where it ran on this host, is still there.
//!
//! The release is the protocol's own `release` statement, stated for the holder and term
//! just read: it gives the row up only if the same holder still holds it in the same
//! term, so a lock taken by someone else in between is never released by mistake. It
//! releases a live lease and a held one (`--hold-at-least`) alike.

use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use crate::election::settings::id_with_suffix;
use crate::lock::lock_row;
use crate::store::{Lease, LeaseRow, LeaseStore, ProcessToken};

/// `unlock`: refused, because the holder may still run (without `--force`); as `resign`'s
/// "no other candidate" refusal, which `--force` also overrides.
pub const EXIT_HOLDER_MAY_RUN: u8 = 7;

#[derive(Debug, clap::Args)]
pub(super) struct UnlockArgs {
    /// Release the lock whoever holds it, even a holder that may still run (on another
    /// host, or a process of this host that is still there).
    #[arg(long)]
    force: bool,
    /// The row of election NAME itself (as `lock --election-row` takes it), not the
    /// lock's own row `lock:NAME`.
    #[arg(long)]
    election_row: bool,
    /// The lock's name, as given to `leaderd lock`.
    name: String,
}

/// What this host can tell of a holder's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HolderProcess {
    /// A `leaderd lock` of this host and configuration (`node id:pid`), still running.
    Running(i32),
    /// A `leaderd lock` of this host and configuration whose process is gone (or whose
    /// pid now belongs to a process younger than the lock).
    Gone(i32),
    /// Another host's, or not a `leaderd lock` holder id: it cannot be checked from here.
    Unknown,
}

/// `holder` as this host sees it: `leaderd lock` writes `node id:pid` (the node id cut
/// short to fit), so a holder id that this configuration's node id with that pid makes
/// is a process of this host. `held` (since the lock was taken, by the database clock)
/// tells a pid reused since from the holder.
pub(super) fn holder_process(holder: &str, node_id: &str, held: Option<Duration>) -> HolderProcess {
    let Some(pid) = holder
        .rsplit_once(':')
        .and_then(|(_, pid)| pid.parse::<i32>().ok())
        .filter(|pid| *pid > 0)
    else {
        return HolderProcess::Unknown;
    };
    if id_with_suffix(node_id, &format!(":{pid}")) != holder {
        return HolderProcess::Unknown;
    }
    match process_age(pid) {
        // Younger than the lock (with a margin for the clocks): not the holder.
        Some(age) if held.is_some_and(|held| age + Duration::from_secs(2) < held) => {
            HolderProcess::Gone(pid)
        }
        Some(_) => HolderProcess::Running(pid),
        None => HolderProcess::Gone(pid),
    }
}

/// How long process `pid` has run, if it runs (a zombie does not: it holds nothing).
fn process_age(pid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    let started_ticks: u64 = fields.get(19)?.parse().ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)? as f64;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(Duration::from_secs_f64(
        (uptime - started_ticks as f64 / ticks).max(0.0),
    ))
}

fn seconds(duration: Duration) -> String {
    humantime::format_duration(Duration::from_secs(duration.as_secs().max(1))).to_string()
}

pub(super) async fn unlock(config: Config, args: UnlockArgs) -> anyhow::Result<ExitCode> {
    let name = args.name.as_str();
    let row_name = match args.election_row {
        true => name.to_owned(),
        false => match lock_row(name) {
            Ok(row) => row,
            Err(error) => {
                eprintln!("leaderd: {error}");
                return Ok(ExitCode::from(super::exit::EXIT_USAGE));
            }
        },
    };
    let mut store = config.store(false);
    let row = store
        .get(&row_name)
        .await
        .with_context(|| format!("cannot read lock {name:?} (row {row_name:?})"))?;
    let Some((row, holder)) = row.and_then(|r| {
        let holder = r.live_holder()?.to_owned();
        Some((r, holder))
    }) else {
        println!("lock {name:?} is not held; nothing to release");
        return Ok(ExitCode::SUCCESS);
    };
    let term = row.term;
    let left = seconds(row.remaining());
    let process = holder_process(&holder, &config.node.id, row.held_for);
    let why = match (process, args.force) {
        (HolderProcess::Gone(pid), _) => {
            format!("whose process {pid} is gone from this host")
        }
        (_, true) => "with --force".to_owned(),
        (HolderProcess::Running(pid), false) => {
            eprintln!(
                "leaderd: lock {name:?} is held by {holder} (term {term}), whose process {pid} \
                 still runs on this host; nothing released. `leaderd unlock --force {name}` \
                 releases it anyway: that process then stops its command once its next \
                 renewal is refused (within {left}), and a new holder may start before it has"
            );
            return Ok(ExitCode::from(EXIT_HOLDER_MAY_RUN));
        }
        (HolderProcess::Unknown, false) => {
            eprintln!(
                "leaderd: lock {name:?} is held by {holder} (term {term}), not a `leaderd \
                 lock` of this host ({}) whose process could be checked; its lease lapses in \
                 {left} unless renewed; nothing released. If that holder is gone (its host \
                 is down), `leaderd unlock --force {name}` releases it",
                config.node.id
            );
            return Ok(ExitCode::from(EXIT_HOLDER_MAY_RUN));
        }
    };
    let released = store
        .release(&Lease {
            name: row_name.clone(),
            holder: holder.clone(),
            token: ProcessToken::random(),
            ttl: row.lease,
            term,
        })
        .await
        .with_context(|| {
            format!(
                "cannot release lock {name:?} (it may or may not be released: `leaderd \
                 locks` shows which, and running this again is harmless)"
            )
        })?;
    if released {
        println!(
            "released lock {name:?}, held by {holder} (term {term}) {why}; its lease had \
             {left} left"
        );
        let runs = match process {
            HolderProcess::Running(_) => "its process still runs: it",
            _ => "if its process still runs (on its host), it",
        };
        if !matches!(process, HolderProcess::Gone(_)) {
            eprintln!(
                "leaderd: {runs} stops its command once its next renewal is refused (within \
                 {left}); a new holder may start before it has"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    changed_meanwhile(&mut store, name, &row_name, &row).await
}

/// The release changed nothing: the row is no longer the holder's in that term.
async fn changed_meanwhile(
    store: &mut crate::store::SqlStore,
    name: &str,
    row_name: &str,
    before: &LeaseRow,
) -> anyhow::Result<ExitCode> {
    let now = store
        .get(row_name)
        .await
        .with_context(|| format!("cannot read lock {name:?} again"))?;
    match now.as_ref().and_then(|r| Some((r.live_holder()?, r.term))) {
        Some((holder, term)) => {
            eprintln!(
                "leaderd: lock {name:?} changed hands meanwhile (term {} then): {holder} \
                 holds it now (term {term}); nothing released",
                before.term
            );
            Ok(ExitCode::from(EXIT_HOLDER_MAY_RUN))
        }
        None => {
            println!("lock {name:?} was released meanwhile; nothing to release");
            Ok(ExitCode::SUCCESS)
        }
    }
}
