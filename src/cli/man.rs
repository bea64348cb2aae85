//! `leaderd man`: one page that covers every subcommand (no `leaderd-lock(1)` pages to
//! point at), with the EXIT STATUS, ENVIRONMENT and FILES sections a man page has. The
//! head (name, synopsis, global options) is clap_mangen's; the rest is written here.

use std::io::Write;

/// Text for a roff line: backslashes and dashes escaped, a leading `.` or `'` defused.
fn text(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    match escaped.starts_with(['.', '\'']) {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
}

/// Paragraphs of `about`, blank-line separated.
fn paragraphs(out: &mut Vec<u8>, about: &str) -> std::io::Result<()> {
    for (i, paragraph) in about.split("\n\n").enumerate() {
        if i > 0 {
            writeln!(out, ".PP")?;
        }
        for line in paragraph.lines() {
            writeln!(out, "{}", text(line.trim()))?;
        }
    }
    Ok(())
}

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Success; for status --local, this node leads."),
    (
        "1",
        "status --local: this node follows; any command: an error of another kind.",
    ),
    (
        "2",
        "A usage error (a bad flag, duration or lock name; resign or handover of a lock's row); handover: the node named cannot take over.",
    ),
    (
        "3",
        "status --local: no valid status (unknown role, a stale or missing status file).",
    ),
    ("4", "resign, handover: there was no leader."),
    ("5", "resign, handover: nobody took over within --wait."),
    ("6", "resign, handover: the election is paused."),
    (
        "7",
        "resign: no other live, healthy candidate could take over (see --force); unlock: the holder may still run (see --force).",
    ),
    (
        "8",
        "resign, handover, pause, resume: the answer to the command was lost; it may or may not have been carried out (the message says how to repeat it harmlessly).",
    ),
    (
        "67",
        "status, resign, handover, pause, resume, watch, wait: the election has no row and no member (EX_NOUSER; --new accepts one no node has joined yet).",
    ),
    (
        "69",
        "The database cannot be reached or used (EX_UNAVAILABLE); the message gives the cause.",
    ),
    (
        "73",
        "run, check-config: the status file's directory does not exist or takes no file; lock: the --metrics-file directory does not exist (EX_CANTCREAT).",
    ),
    (
        "75",
        "lock: another holder has the lock (or -E N); wait: the condition did not hold within --timeout (EX_TEMPFAIL).",
    ),
    (
        "76",
        "lock: the lock was lost while COMMAND ran, and COMMAND was stopped.",
    ),
    (
        "78",
        "A bad configuration (EX_CONFIG): an invalid or unknown key, a database URL the driver would refuse, a LEADERD_* variable close to a configuration variable, a hook whose program is missing or not executable, no database named for a command other than run.",
    ),
    (
        "124",
        "lock: COMMAND ran past --hold-at-most and was stopped.",
    ),
    (
        "126, 127",
        "lock: COMMAND cannot be executed (126), or was not found (127), as in shells and flock(1).",
    ),
    (
        "128+N",
        "lock: COMMAND was killed by signal N, or leaderd was interrupted by it while waiting.",
    ),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "LEADERD_<SECTION>__<KEY>",
        "Sets a configuration key over the file, with two underscores between section and key: LEADERD_DATABASE__URL, LEADERD_ELECTION__TTL. A LEADERD_* variable close to one of them (LEADERD_DATABASE_URL) is an error; other unknown LEADERD_* names draw a warning. Hooks never see these variables.",
    ),
    (
        "LEADERD_DEFAULT_CONFIG",
        "The file read when no --config is given, if it exists (default /etc/leaderd/leaderd.toml; empty: none).",
    ),
    (
        "LEADERD_NODE_ID, LEADERD_ELECTION",
        "Set by leaderd for its hooks; read in place of node.id and election.name when those are set nowhere else.",
    ),
    (
        "LEADERD_EVENT, LEADERD_ROLE, LEADERD_LEADER, LEADERD_PREVIOUS_LEADER, LEADERD_TERM",
        "Set by leaderd for its hooks (and LEADERD_LOCK, LEADERD_TERM, LEADERD_HOLDER for lock's COMMAND).",
    ),
    (
        "LEADERD_FENCE",
        "Set for leader work (on_elected, while_leader, leader_command, lock's COMMAND): the statement to run last in each of its transactions, so that none commits once a later term has begun (docs/fencing.md); empty for other hooks.",
    ),
    (
        "CREDENTIALS_DIRECTORY",
        "systemd credentials: database-url and database-password are read from it when the configuration names no URL or password file.",
    ),
    (
        "POD_NAME, POD_NAMESPACE",
        "The Kubernetes downward API: defaults for kubernetes.pod_name and kubernetes.namespace.",
    ),
    (
        "RUST_LOG",
        "A tracing filter that overrides log.level, e.g. leaderd=debug.",
    ),
    (
        "JOURNAL_STREAM, NOTIFY_SOCKET",
        "Set by systemd: leaderd reports readiness and status to it.",
    ),
];

const FILES: &[(&str, &str)] = &[
    (
        "/etc/leaderd/leaderd.toml",
        "The configuration, read by every command when no --config is given and it exists. check-config says which file it read.",
    ),
    (
        "/etc/leaderd/credentials/",
        "The package's root-only directory for the database-url and database-password credentials the systemd unit loads.",
    ),
    (
        "/run/leaderd/status.json",
        "The status file of the packaged configuration (status.path; default leaderd.status.json in the working directory): this node's role, leader and term, read by status --local and wait.",
    ),
    (
        "/var/lib/leaderd/",
        "The unit's working directory, where the default SQLite database lives.",
    ),
    (
        "/usr/share/doc/leaderd/",
        "The manual: README.md, configuration and example, operations, hooks and locks, protocol.",
    ),
];

fn list(out: &mut Vec<u8>, title: &str, items: &[(&str, &str)]) -> std::io::Result<()> {
    writeln!(out, ".SH {title}")?;
    for (term, meaning) in items {
        writeln!(out, ".TP\n\\fB{}\\fR\n{}", text(term), text(meaning))?;
    }
    Ok(())
}

/// The page for `command` (the visible command line: no hidden subcommands).
pub(super) fn render(command: clap::Command) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    writeln!(
        out,
        ".PP\nThe options below come before or after the command. The configuration is a TOML \
         file (\\-\\-config, else /etc/leaderd/leaderd.toml if it exists) with \
         LEADERD_<SECTION>__<KEY> variables over it; every key is described in \
         /usr/share/doc/leaderd/leaderd.toml.example."
    )?;
    man.render_options_section(&mut out)?;
    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands() {
        let name = sub.get_name();
        let mut sub = sub.clone().bin_name(format!("leaderd {name}"));
        let usage = sub.render_usage().to_string();
        let usage = usage.trim_start_matches("Usage:").trim();
        writeln!(out, ".SS {}", text(usage))?;
        let about = sub
            .get_long_about()
            .or(sub.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        paragraphs(&mut out, &about)?;
        let has_options = sub
            .get_arguments()
            .any(|a| !a.is_hide_set() && a.get_id() != "help");
        if has_options {
            let mut options = Vec::new();
            clap_mangen::Man::new(sub.clone()).render_options_section(&mut options)?;
            let options = String::from_utf8_lossy(&options).replace(".SH OPTIONS\n", "");
            writeln!(out, ".RS")?;
            out.extend_from_slice(options.as_bytes());
            writeln!(out, ".RE")?;
        }
    }
    list(&mut out, "EXIT STATUS", EXIT_STATUS)?;
    list(&mut out, "ENVIRONMENT", ENVIRONMENT)?;
    list(&mut out, "FILES", FILES)?;
    writeln!(
        out,
        ".SH SEE ALSO\n\\fBflock\\fR(1), \\fBsystemd.exec\\fR(5), \\fBsysexits.h\\fR; \
         /usr/share/doc/leaderd/README.md"
    )?;
    man.render_version_section(&mut out)?;
    Ok(out)
}
