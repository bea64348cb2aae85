//! The command line: one subcommand per job, each a function returning a result; the exit
//! status is decided here, at the edge.

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use tracing::info;

use crate::config::{Config, ConfigError};
use crate::daemon::{self, ConfigSource, store};
use crate::duration;
use crate::election::Role;
use crate::election::settings::id_with_suffix;
use crate::hooks::{self, HookContext};
use crate::lock::{LockError, LockOptions};
use crate::logging::{self, LogFormat};
use crate::operator::{self, MemberReport};
use crate::signals;
use crate::status_file::StatusDocument;
use crate::store::{ControlStore, LeaseStore, StoreError};

mod cron_lock;
use cron_lock::LockCronFlags;
mod locks;
mod man;
mod wait;

/// Configuration errors (sysexits.h EX_CONFIG).
pub const EXIT_CONFIG: u8 = 78;
/// The database could not be reached or used (sysexits.h EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// `lock`: someone else holds the lock (sysexits.h EX_TEMPFAIL: try again later).
pub const EXIT_LOCK_HELD: u8 = 75;
/// `lock`: the lock was lost while the command ran, and the command was stopped.
pub const EXIT_LOCK_LOST: u8 = 76;
/// `status --local`: this node follows a live leader (or no leader, as far as it knows).
pub const EXIT_FOLLOWER: u8 = 1;
/// `status --local`: no valid status: unknown role, a stale or missing file.
pub const EXIT_STATUS_UNKNOWN: u8 = 3;
/// `lock --hold-at-most`: COMMAND ran too long and was stopped (as timeout(1) exits).
pub const EXIT_TIMED_OUT: u8 = 124;
/// `lock`: an invalid lock name (a usage error, as clap reports its own).
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "leaderd",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("LEADERD_COMMIT"), ")"),
    about = "Leader election through the SQL database you already have"
)]
pub struct Cli {
    /// TOML configuration file [default: /etc/leaderd/leaderd.toml, if it exists];
    /// LEADERD_<SECTION>__<KEY> variables override it.
    #[arg(long, short, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log line format on stderr [default: log.format, else text].
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
        election: ElectionFlag,
    },
    /// Run COMMAND while holding the lock NAME, and exit with COMMAND's status.
    ///
    /// Exits 75 (or -E N) if another holder has the lock (after --wait, if given), 76 if
    /// the lock was lost while COMMAND ran (COMMAND was stopped before the lease could
    /// lapse), 124 if COMMAND ran past --hold-at-most and was stopped, 69 if the database
    /// cannot be used. The flags follow flock(1).
    Lock {
        /// The lease length; it is renewed every third of it.
        #[arg(long, default_value = "30s", value_parser = duration::positive)]
        ttl: std::time::Duration,
        #[command(flatten)]
        cron: LockCronFlags,
        /// Log at the configured level (default: warnings and errors only).
        #[arg(long, short)]
        verbose: bool,
        /// The lock's name; its row in the election table is `lock:NAME` (see
        /// --election-row).
        name: String,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// List every held lease, locks' and elections': name, kind, holder, term, when last
    /// renewed and how long it has left, as the database sees it now.
    Locks {
        #[command(flatten)]
        args: locks::LocksArgs,
    },
    /// Block until a condition holds, for scripts; exit 0 then, or 75 at --timeout.
    ///
    /// leader / follower: this node leads / runs and does not lead, as its status file
    /// says (read every 100 ms). elected / no-leader: anyone / no one holds a live lease,
    /// as the database says (read each interval; works from any host).
    Wait {
        #[command(flatten)]
        args: wait::WaitArgs,
        #[command(flatten)]
        election: ElectionFlag,
    },
    /// Validate the configuration and print it, secrets redacted.
    CheckConfig,
    /// Print the completions for SHELL (bash, zsh, fish, elvish, powershell) on stdout.
    #[command(hide = true)]
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) on stdout: `leaderd man | man -l -`.
    #[command(hide = true)]
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

/// `--election NAME`: the operator commands act on this election instead of election.name.
#[derive(Debug, Clone, clap::Args)]
struct ElectionFlag {
    /// The election to act on [default: election.name].
    #[arg(long = "election", value_name = "NAME")]
    name: Option<String>,
}

impl Command {
    /// The election named by `--election`, if this command has the flag and it was given.
    fn election(&self) -> Option<&str> {
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
}

/// The command line without its hidden subcommands, for the completions: clap_complete
/// offers hidden subcommands too (clap-rs/clap#1335), and clap has no way to remove one.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    clap::Command::new("leaderd")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned())
}

/// Parses the command line, runs the command and maps its outcome to an exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::HookGuard {
        daemon_pid,
        fence_until,
        fence_fd,
        await_command,
        cgroup_parent,
        argv,
    } = &cli.command
    {
        let start = match await_command {
            true => hooks::guard::Start::Await,
            false => hooks::guard::Start::Now {
                argv: argv.clone(),
                fence: fence_until.map(|until| hooks::guard::Fence {
                    until,
                    fd: *fence_fd,
                }),
            },
        };
        return hooks::guard::run(*daemon_pid, start, cgroup_parent.clone());
    }
    // The Debian package's completions and man page (scripts/package.sh): no configuration.
    let generated = match &cli.command {
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(*shell, &mut visible_command(), "leaderd", &mut text);
            Some(Ok(text))
        }
        Command::Man => Some(man::render(visible_command())),
        _ => None,
    };
    if generated.is_some() && (cli.config.is_some() || cli.log_format.is_some()) {
        eprintln!(
            "leaderd: --config and --log-format mean nothing to `man` and `completions`, \
             which print the same text whatever the configuration"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    if let Some(text) = generated {
        use std::io::Write;
        return match text.and_then(|text| std::io::stdout().write_all(&text)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("leaderd: cannot write to stdout: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let id = match &cli.command {
        Command::Run { id } => id.as_deref(),
        _ => None,
    };
    // --config, else the default file if it exists, else none (defaults and variables).
    let file = cli.config.clone().or_else(crate::config::default_file);
    let loaded =
        Config::load(file.as_deref(), id).and_then(|config| match cli.command.election() {
            Some(name) => config.with_election(name),
            None => Ok(config),
        });
    let config = match loaded {
        Ok(config) => config,
        Err(error) => {
            eprintln!("leaderd: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let level = match &cli.command {
        // A cron job's mail should hold the job's output, not leaderd's; with -q, nothing
        // of leaderd's unless it failed.
        Command::Lock {
            verbose: false,
            cron,
            ..
        } if cron.quiet => "error",
        Command::Lock { verbose: false, .. } => "warn",
        _ => &config.log.level,
    };
    // `writer` flushes the log at the end of main, before the last words on stderr.
    let (log, writer) = logging::init(cli.log_format.unwrap_or(config.log.format), level);
    for fallback in &config.env_fallbacks {
        match fallback.from_hook {
            true => tracing::debug!(variable = fallback.variable, "{fallback}"),
            false => tracing::warn!(variable = fallback.variable, "{fallback}"),
        }
    }
    if !config.unknown_variables.is_empty() {
        tracing::warn!(
            "ignoring environment variables {}: leaderd reads LEADERD_<SECTION>__<KEY> \
             (two underscores) and sets the hook variables, and these are neither",
            config.unknown_variables.join(", ")
        );
    }
    if let Command::CheckConfig | Command::Run { .. } = cli.command {
        // What the configuration points at: the status file's directory, the hooks.
        if let Err(error) = config.preflight() {
            writer.finish();
            eprintln!("leaderd: {error}");
            return ExitCode::from(error.exit_code());
        }
    }
    if let Command::CheckConfig = cli.command {
        match &file {
            Some(file) => println!("# read {}", file.display()),
            None => println!(
                "# no configuration file (no --config, and {} does not exist)",
                crate::config::default_path().display()
            ),
        }
        print!("{}", config.to_toml_redacted());
        writer.finish();
        return ExitCode::SUCCESS;
    }
    // The SQLite driver and the migration harness block in place: multi-threaded runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    let result = runtime.block_on(async {
        writer.spawn_reporter();
        let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
        match cli.command {
            Command::Run { id } => {
                let source = ConfigSource {
                    file: file.clone(),
                    node_id: id,
                };
                done(daemon::run(config, source, log).await)
            }
            Command::Status {
                json, local: true, ..
            } => Ok(local_status(&config, json)),
            Command::Status { json, .. } => done(status(config, json).await),
            Command::Migrate => done(migrate(config).await),
            Command::Resign { step_down, .. } => {
                let term = step_down.term;
                Ok(operator::step_down(&config, step_down.command(None), term).await?)
            }
            Command::Handover { to, step_down, .. } => {
                let term = step_down.term;
                Ok(operator::step_down(&config, step_down.command(Some(to)), term).await?)
            }
            Command::Pause { duration, .. } => Ok(operator::pause(&config, duration).await?),
            Command::Resume { .. } => Ok(operator::resume(&config).await?),
            Command::Watch { once, .. } => {
                let stop = signals::shutdown_signal().context("cannot install signal handlers")?;
                Ok(operator::watch(&config, once, stop).await?)
            }
            Command::Lock {
                ttl,
                cron,
                name,
                command,
                ..
            } => cron_lock::recorded(
                &cron.clone(),
                &name,
                lock(config, &name, ttl, cron, command),
            )
            .await
            .map(ExitCode::from),
            Command::Wait { args, .. } => wait::wait(config, args).await,
            Command::Locks { args } => done(locks::locks(config, args).await),
            Command::CheckConfig
            | Command::HookGuard { .. }
            | Command::Completions { .. }
            | Command::Man => unreachable!("handled above"),
        }
    });
    // Database work still finishing in the background must not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    writer.finish();
    match result {
        Ok(code) => code,
        Err(error) => {
            // The whole chain, each part once (causes that repeat their source's text).
            eprintln!(
                "leaderd: {}",
                crate::store::error_text::chain(error.as_ref())
            );
            let operator_status = error
                .chain()
                .find_map(|e| e.downcast_ref::<operator::OperatorError>())
                .and_then(operator::OperatorError::exit_status);
            if let Some(status) = operator_status {
                ExitCode::from(status)
            } else if error.chain().any(|e| e.is::<StoreError>()) {
                ExitCode::from(EXIT_UNAVAILABLE)
            } else if error
                .chain()
                .any(|e| e.is::<ConfigError>() || e.is::<hooks::ContainmentError>())
            {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The flags `resign` and `handover` share.
#[derive(Debug, clap::Args)]
struct StepDownFlags {
    /// How long to wait for another node to take over.
    #[arg(long, default_value = "30s", value_parser = duration::positive)]
    wait: std::time::Duration,
    /// How long the leader moved away from may not take the lead back by preemption
    /// (`election.priority`); `0` lets it at once.
    #[arg(long, default_value = "5m", value_parser = duration::zero_or_more)]
    hold: std::time::Duration,
    /// Step down even if no node could take over as far as the members table says
    /// (resign), or without the named node's answer (handover).
    #[arg(long)]
    force: bool,
    /// Only if N is the live term (exit 4 otherwise): repeats a command whose answer was
    /// lost (exit 8) without asking the next leader too.
    #[arg(long, value_name = "N")]
    term: Option<i64>,
}

impl StepDownFlags {
    fn command(self, to: Option<String>) -> operator::StepDownCommand {
        operator::StepDownCommand {
            to,
            wait: self.wait,
            hold: self.hold,
            force: self.force,
            poll: std::time::Duration::from_millis(20),
        }
    }
}

#[derive(Debug, Serialize)]
struct ElectionReport<'a> {
    election: &'a str,
    leader: Option<&'a str>,
    term: Option<i64>,
    /// The holder (live or not) of the row; differs from `leader` once its lease lapsed.
    holder: Option<&'a str>,
    lease_ms: Option<u64>,
    age_ms: Option<u64>,
    remaining_ms: Option<u64>,
    /// `leaderd pause`: how long the pause lasts yet (`null`: not paused).
    paused: bool,
    paused_ms: Option<u64>,
    /// A handover in its window: only this node may claim.
    handover_to: Option<&'a str>,
    /// Every member of the election (`null` if the table cannot be read).
    members: Option<Vec<MemberReport>>,
}

async fn status(config: Config, json: bool) -> anyhow::Result<()> {
    // Reads only, so that a role that may only SELECT can ask.
    let mut store = store(&config, false).read_only();
    let row = store
        .get(&config.election.name)
        .await
        .with_context(|| format!("cannot read election {:?}", config.election.name))?;
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    let report = ElectionReport {
        election: &config.election.name,
        leader: row.as_ref().and_then(|r| r.live_holder()),
        term: row.as_ref().map(|r| r.term),
        holder: row.as_ref().and_then(|r| r.holder.as_deref()),
        lease_ms: row.as_ref().map(|r| ms(r.lease)),
        age_ms: row.as_ref().map(|r| ms(r.age)),
        remaining_ms: row.as_ref().map(|r| ms(r.remaining())),
        paused: row.as_ref().is_some_and(|r| r.paused()),
        paused_ms: row.as_ref().and_then(|r| r.pending.paused_for).map(ms),
        handover_to: row.as_ref().and_then(|r| r.pending.handover_to.as_deref()),
        members: None,
    };
    let leader = report.leader;
    let members = match store.members(&config.election.name).await {
        Ok(members) => Some(operator::member_reports(&members, leader)),
        Err(error) => {
            tracing::warn!(%error, "cannot read the members");
            None
        }
    };
    let report = ElectionReport { members, ..report };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("election:  {}", report.election);
    println!("leader:    {}", report.leader.unwrap_or("none"));
    match &row {
        None => println!("term:      none (no node has joined yet)"),
        Some(row) => {
            println!("term:      {}", row.term);
            println!(
                "lease:     renewed {} ago, {} left of {}{}",
                humantime::format_duration(row.age),
                humantime::format_duration(row.remaining()),
                humantime::format_duration(row.lease),
                match (&row.holder, row.live_holder()) {
                    (None, _) => " (released)".to_owned(),
                    (Some(holder), None) => format!(" (lapsed; last held by {holder})"),
                    _ => String::new(),
                }
            );
            if let Some(left) = row.pending.paused_for {
                println!(
                    "paused:    for {} more (leaderd resume ends it)",
                    humantime::format_duration(std::time::Duration::from_secs(left.as_secs()))
                );
            }
            if let Some(to) = &row.pending.handover_to {
                println!("handover:  to {to}");
            }
        }
    }
    if let Some(members) = &report.members {
        println!("members:");
        for m in members {
            println!(
                "  {:<20} {:<9} priority {:<4} {} on {}, seen {:.1}s ago{}",
                m.node_id,
                m.role,
                m.priority,
                m.version,
                if m.host.is_empty() { "?" } else { &m.host },
                m.seen_ms as f64 / 1000.0,
                match m.preempt_hold_ms {
                    Some(ms) => format!(", no preemption for {:.0}s", ms as f64 / 1000.0),
                    None => String::new(),
                }
            );
        }
    }
    Ok(())
}

async fn migrate(config: Config) -> anyhow::Result<()> {
    store(&config, true)
        .connect()
        .await
        .with_context(|| format!("cannot migrate {}", config.database.url))?;
    println!("migrations applied to {}", config.database.url);
    Ok(())
}

async fn lock(
    config: Config,
    name: &str,
    ttl: std::time::Duration,
    cron: LockCronFlags,
    argv: Vec<String>,
) -> anyhow::Result<u8> {
    // Before the lock is taken: a "cgroup" that cannot be had fails without holding it.
    let containment = hooks::resolve_containment(config.hooks.containment)?;
    // Installed first: a signal while waiting ends the wait, and later ones reach COMMAND.
    let mut signals = signals::forwarded_signals().context("cannot install signal handlers")?;
    // Unique per invocation: two `leaderd lock` on one host are two holders. A long node
    // id gives way to the pid.
    let holder = id_with_suffix(&config.node.id, &format!(":{}", std::process::id()));
    if let Err(error) = cron.check() {
        eprintln!("leaderd: {error}");
        return Ok(EXIT_USAGE);
    }
    let row = cron.row(name);
    let options = match LockOptions::new(&row, ttl).and_then(|o| o.holder(&holder)) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("leaderd: {error}");
            return Ok(EXIT_USAGE);
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
            store(&config, config.database.migrate),
            cron.wait(),
            interrupt,
        )
        .await;
    let guard = match acquired.map_err(|error| cron_lock::named(error, name)) {
        Ok(guard) => guard,
        Err(LockError::Cancelled { .. }) => {
            let signal = interrupted.expect("cancelled by a signal");
            eprintln!("leaderd: {signal} while waiting for lock {name:?}; not running the command");
            return Ok(128 + signal as u8);
        }
        Err(error @ LockError::Held { .. }) => {
            if !cron.quiet {
                eprintln!("leaderd: {error}");
            }
            return Ok(cron.conflict_exit_code);
        }
        Err(error) => {
            eprintln!("leaderd: {error}");
            return Ok(EXIT_UNAVAILABLE);
        }
    };
    if let Some(signal) = interrupted {
        // It came as the lock was taken: honour it rather than lose it.
        let _ = guard.release().await;
        eprintln!("leaderd: {signal} while taking lock {name:?}; not running the command");
        return Ok(128 + signal as u8);
    }
    info!(
        lock = name,
        holder,
        term = guard.term(),
        "lock taken; running the command"
    );
    let env = vec![
        ("LEADERD_LOCK".to_owned(), name.to_owned()),
        ("LEADERD_TERM".to_owned(), guard.term().to_string()),
        ("LEADERD_HOLDER".to_owned(), holder.clone()),
    ];
    let context = HookContext {
        election: name.to_owned(),
        node_id: holder.clone(),
        interval: renew_every,
        ttl,
        metrics: None,
        containment,
    };
    let term = guard.term();
    let program = argv[0].clone();
    let mut signals = cron_lock::Signals::new(signals);
    let (stop, stop_by) = tokio::sync::watch::channel(None);
    let run = signals.forward_while(|forward| {
        hooks::run_leased(argv, env, context, term, guard.status(), forward, stop_by)
    });
    let (ran, timed_out) = cron_lock::limit(run, &cron, guard.taken_at(), stop).await;
    let still_held = guard.is_held();
    if timed_out && still_held {
        cron_lock::release(guard, name, std::time::Duration::ZERO).await;
        return Ok(EXIT_TIMED_OUT);
    }
    let hold = match (cron.hold_at_least, ran.status, ran.fenced) {
        (Some(hold), Some(_), false) => hold,
        _ => std::time::Duration::ZERO,
    };
    cron_lock::release(guard, name, hold).await;
    use std::os::unix::process::ExitStatusExt;
    match ran.status {
        None if !still_held => {
            eprintln!(
                "leaderd: lost lock {name:?} (term {term}) before the command could start: \
                 the database did not take a renewal in time"
            );
            Ok(EXIT_LOCK_LOST)
        }
        _ if ran.fenced => {
            eprintln!(
                "leaderd: lost lock {name:?} (term {term}): the database did not take a renewal \
                 in time, so the command was stopped before the lease could lapse and another \
                 holder could start"
            );
            Ok(EXIT_LOCK_LOST)
        }
        Some(status) => Ok(match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => 128 + signal as u8,
            _ => 1,
        }),
        None => anyhow::bail!("could not start {program:?} (the reason is logged above)"),
    }
}

/// `status --local`: the exit status says what this node's status file says, as long as
/// the file is still valid (`valid_until` ahead: a frozen or dead daemon's file goes stale).
fn local_status(config: &Config, json: bool) -> ExitCode {
    let path = &config.status.path;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "leaderd: cannot read status file {}: {error}",
                path.display()
            );
            return ExitCode::from(EXIT_STATUS_UNKNOWN);
        }
    };
    let document: StatusDocument = match serde_json::from_str(&text) {
        Ok(document) => document,
        Err(error) => {
            eprintln!(
                "leaderd: status file {} is not a leaderd status document: {error}",
                path.display()
            );
            return ExitCode::from(EXIT_STATUS_UNKNOWN);
        }
    };
    let valid_until = humantime::parse_rfc3339(&document.valid_until).ok();
    let fresh = valid_until.is_some_and(|until| until > std::time::SystemTime::now());
    let role = document.role;
    if json {
        print!("{text}");
    } else {
        let role = role.as_str();
        let leader = document.leader.as_deref().unwrap_or("none");
        // As the document has it: `null` while no term is known.
        let term = document
            .term
            .map_or("null".to_owned(), |term| term.to_string());
        let stale = if fresh {
            ""
        } else {
            " (stale: valid_until has passed)"
        };
        let observer = if document.candidate { "" } else { ", observer" };
        let health = document.health.map_or(String::new(), |health| {
            format!(", health check {health:?}").to_lowercase()
        });
        println!("{role} (leader {leader}, term {term}{observer}{health}){stale}");
    }
    match role {
        Role::Leader if fresh => ExitCode::SUCCESS,
        Role::Follower if fresh => ExitCode::from(EXIT_FOLLOWER),
        _ => ExitCode::from(EXIT_STATUS_UNKNOWN),
    }
}
