//! One hook process: started through the guard in a process group of its own, its output
//! forwarded to the log, signalled as a group, and killed through the guard.

use command_fds::{CommandFdExt, FdMapping};
use futures_util::StreamExt;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::AsyncRead;
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, LinesCodec};
use tracing::{info, warn};

use super::containment::{self, Containment, HookCgroup};
use super::{guard, stub};

/// Longer lines are cut; a hook cannot make leaderd buffer without bound.
const MAX_LINE: usize = 8 * 1024;
/// Lines per second and stream forwarded to the log. Past that, leaderd stops reading until
/// the second is over: the hook blocks on its full pipe instead of costing leaderd CPU.
const MAX_LINES_PER_SECOND: u32 = 200;

#[derive(Debug, thiserror::Error)]
#[error("cannot start hook {hook} ({program:?}): {source}")]
pub struct SpawnError {
    pub hook: &'static str,
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

/// Where a process's standard streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// stdin from /dev/null, stdout and stderr line by line into the log (hooks).
    Logged,
    /// leaderd's own stdin, stdout and stderr (`leaderd lock`'s command).
    Inherited,
}

pub struct HookProcess {
    /// The write end of the guard's fence pipe (fenced processes only).
    fence: Option<tokio::net::unix::pipe::Sender>,
    child: tokio::process::Child,
    /// The guard's pid, which is also its process group's id.
    group: Pid,
    /// Where the guard makes the hook's cgroup (cgroup mode, fenced hooks).
    cgroup_parent: Option<PathBuf>,
    pub started: Instant,
}

/// `--cgroup-parent` for a guard, in cgroup mode.
fn cgroup_arg(containment: &Containment) -> Option<std::ffi::OsString> {
    let parent = containment.cgroup_parent()?;
    let mut arg = std::ffi::OsString::from("--cgroup-parent=");
    arg.push(parent);
    Some(arg)
}

/// Keeps leaderd's own configuration variables (`LEADERD_<SECTION>__<KEY>`, the database
/// URL and its password among them) from the guard, and so from the program it runs: a
/// hook gets the event variables and its own `env`, not leaderd's secrets. Called on every
/// guard leaderd starts, the warm ones included (they read their program's `env` from
/// leaderd later, and pass on only that).
fn without_config_variables(command: &mut tokio::process::Command) {
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(crate::env_names::is_config_variable)
        {
            command.env_remove(name);
        }
    }
}

impl HookProcess {
    pub fn spawn(
        hook: &'static str,
        argv: &[String],
        env: &[(String, String)],
        fence: Option<Instant>,
        io: Io,
        containment: &Containment,
    ) -> Result<HookProcess, SpawnError> {
        let error = |source| SpawnError {
            hook,
            program: argv.first().cloned().unwrap_or_default(),
            source,
        };
        // The running binary itself, even if the file was replaced since it started.
        let mut command = tokio::process::Command::new("/proc/self/exe");
        command
            .arg0(guard::ARGV0)
            .arg(guard::SUBCOMMAND)
            .arg(std::process::id().to_string())
            .args(fence.map(|kill| format!("--fence-until={}", boottime_at(kill))))
            .args(fence.and_then(|_| cgroup_arg(containment)));
        without_config_variables(&mut command);
        command
            .envs(env.iter().map(|(k, v)| (k, v)))
            .process_group(0);
        let (fence_reader, fence_writer) = match fence {
            Some(_) => {
                let (reader, writer) = std::io::pipe().map_err(error)?;
                let writer =
                    tokio::net::unix::pipe::Sender::from_owned_fd(writer.into()).map_err(error)?;
                (Some(reader), Some(writer))
            }
            None => (None, None),
        };
        match io {
            // Fence deadlines on the guard's stdin: no descriptor to move in the child, so
            // the guard starts through posix_spawn rather than a fork of this process.
            Io::Logged => {
                let stdin = match fence_reader {
                    Some(reader) => {
                        command.arg("--fence-fd=0");
                        Stdio::from(reader)
                    }
                    None => Stdio::null(),
                };
                command
                    .stdin(stdin)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
            }
            // Fence deadlines on descriptor 3, leaving stdin to the program.
            Io::Inherited => {
                if let Some(reader) = fence_reader {
                    command
                        .fd_mappings(vec![FdMapping {
                            parent_fd: reader.into(),
                            child_fd: guard::FENCE_FD,
                        }])
                        .map_err(|e| error(std::io::Error::other(e)))?;
                }
                command
                    .stdin(Stdio::inherit())
                    .stdout(Stdio::inherit())
                    .stderr(Stdio::inherit())
            }
        };
        command.arg("--").args(argv);
        let mut child = command.spawn().map_err(error)?;
        // The read end now lives only in the guard: its closing is the guard's signal that
        // leaderd is gone.
        drop(command);
        let pid = child
            .id()
            .ok_or_else(|| error(std::io::Error::other("exited at once")))?;
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(forward(hook, "stdout", stdout));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward(hook, "stderr", stderr));
        }
        Ok(HookProcess {
            fence: fence_writer,
            child,
            group: Pid::from_raw(pid as i32),
            cgroup_parent: fence.and(containment.cgroup_parent().map(Path::to_owned)),
            started: Instant::now(),
        })
    }

    /// Tells the guard the instant by which it must kill the group if it hears nothing
    /// newer (fenced hooks only).
    pub async fn send_fence(&mut self, kill_at: Instant) {
        use tokio::io::AsyncWriteExt;
        let Some(fence) = self.fence.as_mut() else {
            return;
        };
        let line = format!("{}\n", boottime_at(kill_at));
        // A guard that stopped reading has exited along with its hook.
        if fence.write_all(line.as_bytes()).await.is_err() {
            self.fence = None;
        }
    }

    /// Waits for the hook's main process (cancel-safe).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Signals every process of the hook's group, grandchildren included (the guard
    /// passes SIGTERM on to those that left the group).
    pub fn signal(&self, signal: Signal) {
        // ESRCH: the group is already gone.
        let _ = killpg(self.group, signal);
    }

    /// Kills the hook and everything it started, in its group or not. The guard does it
    /// and then dies by SIGKILL itself: a SIGKILL to the group would kill the guard first.
    pub fn kill(&self) {
        // Some until the guard has been reaped: its pid cannot have been reused.
        if let Some(guard) = self.child.id() {
            let _ = kill(Pid::from_raw(guard as i32), guard::KILL_SIGNAL);
            return;
        }
        // The guard is gone (it swept as its hook ended, or was killed itself): whatever
        // is left in its group or cgroup.
        let _ = killpg(self.group, Signal::SIGKILL);
        if let Some(parent) = &self.cgroup_parent {
            let cgroup = HookCgroup::path(parent, self.group);
            if let Err(error) = containment::kill_cgroup(&cgroup) {
                warn!(cgroup = %cgroup.display(), %error, "cannot kill what is left of a hook");
            }
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// How long a closed warm guard gets to exit before it is killed.
const KILL_GRACE_WARM: std::time::Duration = std::time::Duration::from_secs(1);

/// A guard started ahead of time, waiting on its stdin for the hook it is to run: a fenced
/// hook started through it does not wait for leaderd's own binary to start (a few
/// milliseconds on a virtual host) at the moment leadership begins. Dropping it closes
/// the pipe, and the guard exits; it dies with leaderd like any guard.
pub struct WarmGuard {
    fence: tokio::net::unix::pipe::Sender,
    child: tokio::process::Child,
    cgroup_parent: Option<PathBuf>,
}

impl WarmGuard {
    pub fn start(containment: &Containment) -> Result<WarmGuard, SpawnError> {
        let error = |source| SpawnError {
            hook: "(any fenced hook)",
            program: "leaderd hook-guard".to_owned(),
            source,
        };
        let (reader, writer) = std::io::pipe().map_err(error)?;
        let fence = tokio::net::unix::pipe::Sender::from_owned_fd(writer.into()).map_err(error)?;
        let mut command = tokio::process::Command::new("/proc/self/exe");
        command
            .arg0(guard::ARGV0)
            .arg(guard::SUBCOMMAND)
            .arg(std::process::id().to_string())
            .arg("--await-command")
            .args(cgroup_arg(containment));
        without_config_variables(&mut command);
        command
            .process_group(0)
            .stdin(Stdio::from(reader))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().map_err(error)?;
        Ok(WarmGuard {
            fence,
            child,
            cgroup_parent: containment.cgroup_parent().map(Path::to_owned),
        })
    }

    /// Closes its pipe and waits (briefly) for the guard to exit, so that a stopping
    /// leaderd leaves no process behind; one that does not exit in time is killed.
    pub async fn close(self) {
        let WarmGuard {
            fence, mut child, ..
        } = self;
        drop(fence);
        if tokio::time::timeout(KILL_GRACE_WARM, child.wait())
            .await
            .is_err()
        {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Runs `argv` through this guard, fenced by `fence`. An error means the guard is gone
    /// (start the hook the usual way).
    pub async fn run(
        mut self,
        hook: &'static str,
        argv: &[String],
        env: &[(String, String)],
        fence: Instant,
    ) -> Result<HookProcess, SpawnError> {
        use tokio::io::AsyncWriteExt;
        let error = |source| SpawnError {
            hook,
            program: argv.first().cloned().unwrap_or_default(),
            source,
        };
        let command = stub::AwaitedCommand {
            argv: argv.to_vec(),
            env: env.to_vec(),
            fence_until: boottime_at(fence),
        };
        let mut line = serde_json::to_vec(&command).map_err(|e| error(e.into()))?;
        line.push(b'\n');
        self.fence.write_all(&line).await.map_err(error)?;
        let pid = self
            .child
            .id()
            .ok_or_else(|| error(std::io::Error::other("the guard exited")))?;
        if let Some(stdout) = self.child.stdout.take() {
            tokio::spawn(forward(hook, "stdout", stdout));
        }
        if let Some(stderr) = self.child.stderr.take() {
            tokio::spawn(forward(hook, "stderr", stderr));
        }
        Ok(HookProcess {
            fence: Some(self.fence),
            child: self.child,
            group: Pid::from_raw(pid as i32),
            cgroup_parent: self.cgroup_parent,
            started: Instant::now(),
        })
    }
}

/// A tokio instant as CLOCK_BOOTTIME nanoseconds, the clock the guard reads.
fn boottime_at(instant: Instant) -> u64 {
    let ahead = instant.saturating_duration_since(Instant::now());
    guard::boottime_ns() + ahead.as_nanos() as u64
}

async fn forward(hook: &'static str, stream: &'static str, output: impl AsyncRead + Unpin) {
    let mut lines = FramedRead::new(output, LinesCodec::new_with_max_length(MAX_LINE));
    let mut window = Instant::now();
    let (mut logged, mut throttled) = (0u32, false);
    while let Some(line) = lines.next().await {
        if window.elapsed() >= Duration::from_secs(1) {
            window = Instant::now();
            logged = 0;
        }
        match line {
            Ok(line) => info!(hook, stream, "{line}"),
            // An over-long line: the codec skips to the next newline.
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                warn!(
                    hook,
                    stream,
                    max = MAX_LINE,
                    "hook output line too long; skipped"
                )
            }
            Err(_) => break,
        }
        logged += 1;
        if logged >= MAX_LINES_PER_SECOND {
            if !throttled {
                warn!(
                    hook,
                    stream,
                    "hook output too fast; throttled to {MAX_LINES_PER_SECOND} lines a second"
                );
                throttled = true;
            }
            tokio::time::sleep_until(window + Duration::from_secs(1)).await;
        }
    }
}
