//! Checks of what the configuration points at, made by `run` before it joins and by
//! `check-config`: a node that cannot write its status file, or whose hook cannot start,
//! would lead anyway and fail later (withholding its release at stop, say). Better not to
//! start.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::Config;

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "status.path = {path:?}: cannot write a file in its directory {dir:?} ({reason}); \
         create the directory and let leaderd's user write to it, or set status.path"
    )]
    StatusDirectory {
        path: PathBuf,
        dir: PathBuf,
        reason: String,
    },
    #[error(
        "status.path = {path:?} is a directory; status.path names the file leaderd writes \
         (e.g. {})",
        path.join("leaderd.status.json").display()
    )]
    StatusIsDirectory { path: PathBuf },
    #[error("{key}: cannot run {program:?}: {reason}")]
    HookProgram {
        /// The hook's key, e.g. `hooks.on_elected`.
        key: &'static str,
        program: String,
        reason: String,
    },
}

impl PreflightError {
    /// sysexits.h: EX_CANTCREAT (73) for the status file, EX_CONFIG (78) for a hook (as
    /// `cli::EXIT_CANT_CREATE` and `cli::EXIT_CONFIG`; no import, so no cycle).
    pub fn exit_code(&self) -> u8 {
        match self {
            PreflightError::StatusDirectory { .. } | PreflightError::StatusIsDirectory { .. } => 73,
            PreflightError::HookProgram { .. } => 78,
        }
    }
}

impl Config {
    /// That the status file's directory takes a new file (the writer replaces the file by
    /// a rename), and that every hook's program exists and may be executed.
    pub fn preflight(&self) -> Result<(), PreflightError> {
        check_status_directory(&self.status.path)?;
        let h = &self.hooks;
        let hooks = [
            (
                "hooks.on_elected",
                h.on_elected.as_ref().map(|c| (&c.argv, &c.env)),
            ),
            (
                "hooks.on_demoted",
                h.on_demoted.as_ref().map(|c| (&c.argv, &c.env)),
            ),
            (
                "hooks.on_leader_change",
                h.on_leader_change.as_ref().map(|c| (&c.argv, &c.env)),
            ),
            (
                "hooks.while_leader",
                h.while_leader.as_ref().map(|c| (&c.argv, &c.env)),
            ),
            (
                "hooks.leader_command",
                h.leader_command.as_ref().map(|c| (&c.argv, &c.env)),
            ),
            (
                "election.health_check",
                self.election
                    .health_check
                    .as_ref()
                    .map(|c| (&c.argv, &c.env)),
            ),
        ];
        for (key, command) in hooks {
            if let Some((argv, env)) = command {
                check_program(key, &argv[0], env)?;
            }
        }
        Ok(())
    }
}

fn check_status_directory(path: &Path) -> Result<(), PreflightError> {
    // A directory there: the writer's rename onto it fails while the node leads, and the
    // release, which waits for the file, is withheld at stop.
    if path.is_dir() {
        return Err(PreflightError::StatusIsDirectory {
            path: path.to_owned(),
        });
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let fail = |reason: String| PreflightError::StatusDirectory {
        path: path.to_owned(),
        dir: dir.clone(),
        reason,
    };
    match std::fs::metadata(&dir) {
        Err(error) => return Err(fail(error.to_string())),
        Ok(m) if !m.is_dir() => return Err(fail("not a directory".into())),
        Ok(_) => {}
    }
    // Trying is the only test that holds for root, read-only mounts and ACLs alike.
    let probe = dir.join(format!(".leaderd-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|error| fail(error.to_string()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// As execvp(3) finds it: a name with a slash is a path, any other is looked up in `PATH`
/// (the hook's own `env.PATH` if it sets one).
fn check_program(
    key: &'static str,
    program: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), PreflightError> {
    let fail = |reason: String| PreflightError::HookProgram {
        key,
        program: program.to_owned(),
        reason,
    };
    if program.contains('/') {
        return executable(Path::new(program)).map_err(fail);
    }
    let path: OsString = match env.get("PATH") {
        Some(path) => path.into(),
        None => std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
    };
    let mut last = None;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if !candidate.exists() {
            continue;
        }
        match executable(&candidate) {
            Ok(()) => return Ok(()),
            Err(reason) => last = Some(format!("{}: {reason}", candidate.display())),
        }
    }
    Err(fail(last.unwrap_or_else(|| {
        format!(
            "not found in PATH ({}); give the full path",
            path.to_string_lossy()
        )
    })))
}

fn executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(path).map_err(|error| error.to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".into());
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err("not executable (chmod +x it)".into());
    }
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK)
        .map_err(|errno| format!("not executable by this user ({errno})"))
}
