//! The steps `main` takes before a command runs: what needs no configuration (the hook
//! guard, the man page and completions), loading the configuration, the log, the
//! preflight checks, `check-config`'s answer, and the runtime the rest runs on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::{Cli, Command, visible_command};
use super::exit::EXIT_USAGE;
use super::{man, needs};
use crate::config::{Config, PreflightError};
use crate::hooks;
use crate::logging::{self, LogFormat, LogLevel, LogWriter};

/// Answers the commands that need no configuration: the hook guard (a child of the
/// daemon) and the generated man page and completions. `None` for every other command.
pub(super) fn without_configuration(cli: &Cli) -> Option<ExitCode> {
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
        return Some(hooks::guard::run(*daemon_pid, start, cgroup_parent.clone()));
    }
    // The Debian package's completions and man page (scripts/package.sh): no configuration.
    let text = match &cli.command {
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(*shell, &mut visible_command(), "leaderd", &mut text);
            Ok(text)
        }
        Command::Man => man::render(visible_command()),
        _ => return None,
    };
    if cli.config.is_some() || cli.log_format.is_some() || cli.database.is_some() {
        eprintln!(
            "leaderd: --config, --database and --log-format mean nothing to `man` and \
             `completions`, which print the same text whatever the configuration"
        );
        return Some(ExitCode::from(EXIT_USAGE));
    }
    use std::io::Write;
    Some(
        match text.and_then(|text| std::io::stdout().write_all(&text)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("leaderd: cannot write to stdout: {error}");
                ExitCode::FAILURE
            }
        },
    )
}

/// The configuration: `--config`, else the default file if it exists, else none (the
/// defaults and the variables); then `--election` and `--database`, and whether the
/// command may use the database it names. Also the file read, for `check-config` and
/// reloads.
pub(super) fn load(cli: &Cli) -> Result<(Config, Option<PathBuf>), String> {
    let id = match &cli.command {
        Command::Run { id } => id.as_deref(),
        _ => None,
    };
    let file = cli.config.clone().or_else(crate::config::default_file);
    let mut config = Config::load(file.as_deref(), id)
        .and_then(|config| match cli.command.election() {
            Some(name) => config.with_election(name),
            None => Ok(config),
        })
        .and_then(|config| match &cli.database {
            Some(url) => config.with_database(url),
            None => Ok(config),
        })
        .map_err(|error| error.to_string())?;
    let (usage, name) = cli.command.database_use();
    needs::database(&mut config, usage, name)?;
    Ok((config, file))
}

/// Starts the log at the command's level and reports what loading the configuration
/// noticed.
pub(super) fn logging(cli: &Cli, config: &Config, format: LogFormat) -> (LogLevel, LogWriter) {
    let level = match &cli.command {
        Command::Lock { args } => args.log_level().unwrap_or(&config.log.level),
        Command::Run { .. } => &config.log.level,
        _ => one_shot_level(&config.log.level),
    };
    let (log, writer) = logging::init(format, level);
    for fallback in &config.env_fallbacks {
        match fallback.from_hook {
            true => tracing::debug!(variable = fallback.variable, "{fallback}"),
            false => tracing::warn!(variable = fallback.variable, "{fallback}"),
        }
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    if !config.unknown_variables.is_empty() {
        tracing::warn!(
            "ignoring environment variables {}: leaderd reads LEADERD_<SECTION>__<KEY> \
             (two underscores) and sets the hook variables, and these are neither",
            config.unknown_variables.join(", ")
        );
    }
    (log, writer)
}

/// What the configuration points at (the status file's directory, the hooks), for the
/// commands that use it: `run` and `check-config`.
pub(super) fn preflight(command: &Command, config: &Config) -> Result<(), PreflightError> {
    match command {
        Command::CheckConfig | Command::Run { .. } => config.preflight(),
        _ => Ok(()),
    }
}

/// `check-config`'s answer: where the configuration came from, then all of it.
pub(super) fn print_config(config: &Config, file: Option<&Path>) {
    match file {
        Some(file) => println!("# read {}", file.display()),
        None => println!(
            "# no configuration file (no --config, and {} does not exist)",
            crate::config::default_path().display()
        ),
    }
    if config.database.source == crate::config::UrlSource::Default {
        println!(
            "# no database named: `leaderd run` uses the embedded default below, and \
             the other commands refuse to run without one"
        );
    }
    print!("{}", config.to_toml_redacted());
}

/// Runs `command` to its end on a runtime of its own, reporting the log writer's drops.
pub(super) fn on_runtime(
    writer: &LogWriter,
    command: impl Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    // The SQLite driver and the migration harness block in place: multi-threaded runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    let result = runtime.block_on(async {
        writer.spawn_reporter();
        command.await
    });
    // Database work still finishing in the background must not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}

/// The log level of a command that answers and exits (all but `run` and `lock`): the
/// daemon's INFO lines (which wake-ups it uses, say) mean nothing to whoever reads its
/// answer, so `info`, the default, becomes `warn`; a level asked for on purpose (`debug`,
/// a directive) stays.
fn one_shot_level(configured: &str) -> &str {
    match configured.trim().eq_ignore_ascii_case("info") {
        true => "warn",
        false => configured,
    }
}
