//! The command line as clap parses it: the global flags ([`Cli`]) and one [`Command`] per
//! job, with what each command needs of the configuration and the database.

use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

use super::flags::{ElectionFlag, NewFlag, StepDownFlags};
use super::needs::DatabaseUse;
use super::{lock, locks, unlock, wait};
use crate::duration;
use crate::hooks;
use crate::logging::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "leaderd",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("LEADERD_COMMIT"), ")"),
    about = "Leader election through the SQL database you already have"
)]
pub(super) struct Cli {
    /// TOML configuration file [default: /etc/leaderd/leaderd.toml, if it exists];
    /// LEADERD_<SECTION>__<KEY> variables override it. (No -c: that is `lock -c`, as
    /// flock's.)
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Log line format on stderr [default: log.format, else text].
    #[arg(long, global = true, value_enum)]
    pub(super) log_format: Option<LogFormat>,
    /// The database to use, over database.url and database.url_file (an SQLite file
    /// too: sqlite://PATH). Prefer LEADERD_DATABASE__URL for a URL with a password.
    #[arg(long, global = true, value_name = "URL")]
    pub(super) database: Option<String>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Join the election and keep this node's status file up to date.
    Run {
        /// This node's id (default: node.id, else the host name).
        #[arg(long)]
        id: Option<String>,
    },
    /// Show who leads the election now, as the database sees it.
    ///
    /// With --local: this node's own view, from its status file, as an exit status for
    /// probes and scripts: 0 leader, 1 follower, 3 unknown, stale or unreadable.
    Status {
        /// Print JSON instead of text (with --local: the status file itself).
        #[arg(long)]
        json: bool,
        /// Read this node's status file instead of asking the database.
        #[arg(long)]
        local: bool,
        #[command(flatten)]
        new: NewFlag,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Apply the database migrations and exit.
    Migrate,
    /// Ask the current leader to step down (from any host that reaches the database).
    ///
    /// The leader stops its leader work, runs on_demoted, writes its status file and
    /// releases; it claims nothing for one ttl, so another node takes over, and it does
    /// not take the lead back by preemption for --hold. Prints the new leader and exits 0;
    /// exits 4 if there was no leader, 5 if nobody else took over within --wait, 6 if the
    /// election is paused, 7 if no other live, healthy candidate could take over (unless
    /// --force), 8 if the answer to the request was lost (it may have been written: see
    /// --term), 69 if the database cannot be used.
    Resign {
        #[command(flatten)]
        step_down: StepDownFlags,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Hand leadership over to NODE: NODE is offered the lead and accepts it if it runs
    /// and could lead; then the leader steps down as for `resign`, and only NODE may claim
    /// until two lease lengths after the leader released (then anyone may, should NODE
    /// have died).
    ///
    /// Prints NODE and exits 0 once it leads (or if it leads already); exits 2 if NODE is
    /// unknown, stopped, an observer, unhealthy, or did not accept the offer, 4 if there
    /// was no leader, 5 if NODE did not take over within --wait, 6 if the election is
    /// paused, 8 if the answer to the request was lost, 69 if the database cannot be used.
    Handover {
        /// The node to hand over to (a member: see `leaderd status`).
        #[arg(long, value_name = "NODE")]
        to: String,
        #[command(flatten)]
        step_down: StepDownFlags,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Freeze the election for maintenance: the leader keeps leading, and no node takes a
    /// free or lapsed lease until the pause ends (after --for, or `leaderd resume`).
    Pause {
        /// How long the pause lasts at most.
        #[arg(long = "for", default_value = "1h", value_parser = duration::positive)]
        duration: std::time::Duration,
        #[command(flatten)]
        new: NewFlag,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// End a pause.
    Resume {
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Print a JSON line (election, leader, term, paused, at) whenever the leader, the
    /// term or the pause changes, until interrupted.
    Watch {
        /// Print the current state once and exit.
        #[arg(long)]
        once: bool,
        #[command(flatten)]
        new: NewFlag,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Run COMMAND while holding the lock NAME, and exit with COMMAND's status.
    ///
    /// Exits 75 (or -E N) if another holder has the lock (after --wait, if given), 76 if
    /// the lock was lost while COMMAND ran (COMMAND was stopped before the lease could
    /// lapse), 124 if COMMAND ran past --hold-at-most and was stopped, 126 if COMMAND
    /// cannot be executed and 127 if it is not found, 69 if the database cannot be used,
    /// 73 if --metrics-file's directory does not exist. The flags follow flock(1): COMMAND
    /// may follow NAME without `--`, and -c runs a command line with the shell; unlike
    /// flock, it does not wait unless told to (-w), and a held lock exits 75, not 1.
    Lock {
        #[command(flatten)]
        args: lock::LockArgs,
    },
    /// Release the lock NAME if its holder is gone, or with --force whoever holds it; a
    /// `--hold-at-least` hold ends with it.
    ///
    /// A holder is gone when it was a `leaderd lock` of this host (holder `node id:pid`)
    /// whose process is no more. Exits 0 once released (or if not held), 7 if the holder
    /// may still run (another host's, or its process is still there) and --force was not
    /// given, 69 if the database cannot be used.
    Unlock {
        #[command(flatten)]
        args: unlock::UnlockArgs,
    },
    /// List every held lease, locks' and elections': name, kind, holder, term, how long it
    /// has been held, when last renewed and how long it has left, as the database sees it.
    Locks {
        #[command(flatten)]
        args: locks::LocksArgs,
    },
    /// Block until a condition holds, for scripts; exit 0 then, or 75 at --timeout.
    ///
    /// leader / follower: this node leads / runs and does not lead, as its status file
    /// says (read every 100 ms). elected / no-leader: anyone / no one holds a live lease,
    /// as the database says (read each interval; works from any host); no-leader also
    /// holds once the lease passed from one holder to another, which it does only through
    /// a moment without one (a crash failover). changed: the leader or the term differs
    /// from the first read (a new term, another leader, or none).
    Wait {
        #[command(flatten)]
        args: wait::WaitArgs,
        #[command(flatten)]
        new: NewFlag,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Validate the configuration and print it, secrets redacted.
    CheckConfig,
    /// Print the completions for SHELL (bash, zsh, fish, elvish, powershell) on stdout.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) on stdout: `leaderd man | man -l -`.
    Man,
    /// Internal: runs one hook and kills all it started if leaderd dies.
    #[command(name = "hook-guard", hide = true)]
    HookGuard {
        daemon_pid: i32,
        /// Enforce this kill deadline (CLOCK_BOOTTIME ns) and newer ones read from the
        /// fence descriptor.
        #[arg(long)]
        fence_until: Option<u64>,
        /// The fence descriptor: 3, or 0 (stdin), in which case the program's stdin is
        /// /dev/null.
        #[arg(long, default_value_t = hooks::guard::FENCE_FD)]
        fence_fd: i32,
        /// Started ahead of time: read the command, its environment and its first fence
        /// deadline from stdin (one line of JSON), then fence deadlines as usual.
        #[arg(long, conflicts_with_all = ["fence_until", "argv"])]
        await_command: bool,
        /// Run a fenced hook in a cgroup of its own, created in this cgroup directory.
        #[arg(long, value_name = "DIR")]
        cgroup_parent: Option<PathBuf>,
        #[arg(last = true, required_unless_present = "await_command")]
        argv: Vec<String>,
    },
}

impl Command {
    /// The election named by `--election`, if this command has the flag and it was given.
    pub(super) fn election(&self) -> Option<&str> {
        match self {
            Command::Status { election, .. }
            | Command::Resign { election, .. }
            | Command::Handover { election, .. }
            | Command::Pause { election, .. }
            | Command::Resume { election }
            | Command::Watch { election, .. }
            | Command::Wait { election, .. } => election.name.as_deref(),
            _ => None,
        }
    }

    /// How this command uses the database, and its name for messages.
    pub(super) fn database_use(&self) -> (DatabaseUse, &'static str) {
        match self {
            Command::Run { .. } => (DatabaseUse::Default, "run"),
            Command::Status { local: true, .. } => (DatabaseUse::None, "status --local"),
            Command::Status { .. } => (DatabaseUse::Existing, "status"),
            Command::Migrate => (DatabaseUse::Named, "migrate"),
            Command::Lock { .. } => (DatabaseUse::Named, "lock"),
            Command::Locks { .. } => (DatabaseUse::Existing, "locks"),
            Command::Resign { .. } => (DatabaseUse::Existing, "resign"),
            Command::Handover { .. } => (DatabaseUse::Existing, "handover"),
            Command::Pause { .. } => (DatabaseUse::Existing, "pause"),
            Command::Resume { .. } => (DatabaseUse::Existing, "resume"),
            Command::Watch { .. } => (DatabaseUse::Existing, "watch"),
            Command::Wait { args, .. } if args.reads_database() => (DatabaseUse::Existing, "wait"),
            _ => (DatabaseUse::None, ""),
        }
    }

    /// For a command that acts on an election in the database: whether it refuses an
    /// unknown one, and the flag that makes it accept a new one (if it has that flag).
    pub(super) fn known_election(&self) -> Option<(bool, Option<&'static str>)> {
        let new = |flag: &NewFlag| Some((!flag.new, Some("--new")));
        match self {
            Command::Status {
                local: false,
                new: flag,
                ..
            }
            | Command::Pause { new: flag, .. }
            | Command::Watch { new: flag, .. } => new(flag),
            Command::Wait {
                args, new: flag, ..
            } if args.reads_database() => new(flag),
            Command::Resign { .. } | Command::Handover { .. } | Command::Resume { .. } => {
                Some((true, None))
            }
            _ => None,
        }
    }
}

/// The command line without its hidden subcommands, for the completions: clap_complete
/// offers hidden subcommands too (clap-rs/clap#1335), and clap has no way to remove one.
pub(super) fn visible_command() -> clap::Command {
    let full = Cli::command();
    clap::Command::new("leaderd")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned())
}
