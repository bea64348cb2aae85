//! One hook process: started through the guard in a process group of its own, its output
//! forwarded to the log, signalled as a group.

use futures_util::StreamExt;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::AsyncRead;
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, LinesCodec};
use tracing::{info, warn};

use super::guard;

/// Longer lines are cut; a hook cannot make leaderd buffer without bound.
const MAX_LINE: usize = 8 * 1024;
/// Lines per second and stream forwarded to the log; the rest are counted and dropped, so a
/// flooding hook costs little CPU.
const MAX_LINES_PER_SECOND: u32 = 200;

#[derive(Debug, thiserror::Error)]
#[error("cannot start hook {hook} ({program:?}): {source}")]
pub struct SpawnError {
    pub hook: &'static str,
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

pub struct HookProcess {
    /// The guard's stdin, for fence deadlines (fenced hooks only).
    fence: Option<tokio::process::ChildStdin>,
    child: tokio::process::Child,
    group: Pid,
    pub started: Instant,
}

impl HookProcess {
    pub fn spawn(
        hook: &'static str,
        argv: &[String],
        env: &[(String, String)],
        fenced: bool,
    ) -> Result<HookProcess, SpawnError> {
        let error = |source| SpawnError {
            hook,
            program: argv.first().cloned().unwrap_or_default(),
            source,
        };
        // The running binary itself, even if the file was replaced since it started.
        let mut command = tokio::process::Command::new("/proc/self/exe");
        command
            .arg(guard::SUBCOMMAND)
            .arg(std::process::id().to_string())
            .args(fenced.then_some("--fence"))
            .arg("--")
            .args(argv)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(if fenced {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = command.spawn().map_err(error)?;
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
            fence: child.stdin.take(),
            child,
            group: Pid::from_raw(pid as i32),
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
        let ahead = kill_at.saturating_duration_since(Instant::now());
        let line = format!("{}\n", guard::monotonic_ns() + ahead.as_nanos() as u64);
        // A guard that stopped reading has exited along with its hook.
        if fence.write_all(line.as_bytes()).await.is_err() {
            self.fence = None;
        }
    }

    /// Waits for the hook's main process (cancel-safe).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Signals every process of the hook's group, grandchildren included.
    pub fn signal(&self, signal: Signal) {
        // ESRCH: the group is already gone.
        let _ = killpg(self.group, signal);
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

async fn forward(hook: &'static str, stream: &'static str, output: impl AsyncRead + Unpin) {
    let mut lines = FramedRead::new(output, LinesCodec::new_with_max_length(MAX_LINE));
    let mut window = Instant::now();
    let (mut logged, mut dropped) = (0u32, 0u64);
    while let Some(line) = lines.next().await {
        if window.elapsed() >= Duration::from_secs(1) {
            if dropped > 0 {
                warn!(hook, stream, dropped, "hook output too fast; lines dropped");
            }
            window = Instant::now();
            (logged, dropped) = (0, 0);
        }
        match line {
            Ok(line) if logged < MAX_LINES_PER_SECOND => {
                logged += 1;
                info!(hook, stream, "{line}");
            }
            Ok(_) => dropped += 1,
            // An over-long line: the codec skips to the next newline.
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => dropped += 1,
            Err(_) => break,
        }
    }
    if dropped > 0 {
        warn!(hook, stream, dropped, "hook output too fast; lines dropped");
    }
}
