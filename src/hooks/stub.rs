//! The process a pre-started guard forks ahead for its hook, so that starting the hook when
//! leadership begins costs one `exec` and nothing else.
//!
//! Measured on a 2-core virtual host (kernel 6.18): forking the hook from the guard and
//! moving it into its cgroup at that moment took 14–17 ms from the role change to the
//! hook's first instruction. Almost all of it was the move: the first write to a cgroup's
//! `cgroup.procs` after a quiet spell waits for an RCU grace period (~15 ms; later moves
//! take 0.1 ms), and handovers are seconds apart. The stub is forked and moved while the
//! node still follows; when the guard hands it the command, it only execs.
//!
//! The stub is the guard's child, in the guard's process group and (cgroup mode) in the
//! hook's cgroup, so every kill the guard makes reaches it, exec'd or not. It dies with
//! the guard (PR_SET_PDEATHSIG), exits quietly when the guard lets it go unused (its
//! command pipe closes), and holds no descriptor of the guard's but its command pipe,
//! which is close-on-exec.

use nix::sys::signal::Signal;
use nix::unistd::{ForkResult, Pid, fork, getppid};
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;

use super::containment::HookCgroup;

/// What a guard started ahead of time (`--await-command`) reads as the first line of its
/// stdin, as JSON; fence deadlines follow on the same pipe.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct AwaitedCommand {
    pub argv: Vec<String>,
    /// Set for the program on top of the guard's own environment.
    pub env: Vec<(String, String)>,
    /// The first kill deadline, CLOCK_BOOTTIME nanoseconds.
    pub fence_until: u64,
}

/// The guard's end of a stub.
pub struct Stub {
    pid: Pid,
    commands: std::io::PipeWriter,
}

impl Stub {
    /// Forks the stub; in cgroup mode it moves itself into `cgroup` before it waits.
    ///
    /// # Safety
    ///
    /// The calling process must be single-threaded: the child goes on to allocate, parse
    /// and exec, which a fork of a multi-threaded process may not.
    pub unsafe fn fork(cgroup: Option<&HookCgroup>) -> std::io::Result<Stub> {
        // Both ends are close-on-exec: neither the hook nor any other program gets them.
        let (reader, commands) = std::io::pipe()?;
        let guard = Pid::this();
        // SAFETY: single-threaded, as the caller promises.
        match unsafe { fork() }? {
            ForkResult::Child => {
                drop(commands);
                let join = cgroup.map(HookCgroup::join_in_child);
                wait_and_exec(guard, reader, join)
            }
            ForkResult::Parent { child } => {
                drop(reader);
                Ok(Stub {
                    pid: child,
                    commands,
                })
            }
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Hands the stub `line` (an [`AwaitedCommand`] as JSON, newline-terminated), which it
    /// execs. An error means the stub is gone (the hook can be started the usual way).
    pub fn start(mut self, line: &str) -> std::io::Result<Pid> {
        self.commands.write_all(line.as_bytes())?;
        Ok(self.pid)
    }
}

/// The stub's life: dies with the guard, joins the hook's cgroup, waits for its command
/// and becomes it.
fn wait_and_exec(
    guard: Pid,
    commands: std::io::PipeReader,
    join: Option<impl FnMut() -> std::io::Result<()>>,
) -> ! {
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || getppid() != guard {
        std::process::exit(126);
    }
    if let Some(mut join) = join {
        // Tells stderr itself if the move fails; the subreaper holds the hook then.
        let _ = join();
    }
    let mut line = String::new();
    match std::io::BufReader::new(commands).read_line(&mut line) {
        // Let go unused.
        Ok(0) | Err(_) => std::process::exit(0),
        Ok(_) => {}
    }
    let command: AwaitedCommand = match serde_json::from_str(&line) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("leaderd hook-guard: not a command: {error}");
            std::process::exit(126);
        }
    };
    let Some((program, args)) = command.argv.split_first() else {
        eprintln!("leaderd hook-guard: nothing to run");
        std::process::exit(126);
    };
    // What the guard's spawn gives a fenced hook: its environment with the hook's on top,
    // /dev/null on stdin. exec also resets the signal mask and SIGPIPE, as spawn does.
    let error = std::process::Command::new(program)
        .args(args)
        .envs(command.env)
        .stdin(std::process::Stdio::null())
        .exec();
    eprintln!("leaderd hook-guard: cannot run {program:?}: {error}");
    std::process::exit(cannot_run_status(&error).into());
}

/// The status of a command that could not be run, as shells and flock(1) give it: 127
/// if it was not found, 126 if it was found but could not be executed (no execute
/// permission, a directory, not an executable format).
pub(super) fn cannot_run_status(error: &std::io::Error) -> u8 {
    match error.kind() {
        std::io::ErrorKind::NotFound => 127,
        _ => 126,
    }
}
