//! The guard between leaderd and every hook it runs.
//!
//! leaderd starts `leaderd hook-guard <daemon pid> -- ARGV…` as the leader of a new process
//! group; the guard runs ARGV in that group and exits with its status. Its one job is the
//! case leaderd cannot handle itself: when leaderd dies (even by SIGKILL), the kernel sends
//! the guard SIGUSR1 (PR_SET_PDEATHSIG) and the guard kills the whole group, grandchildren
//! included, so no leader-only work outlives the daemon whose lease it ran under.
//!
//! For leader-scoped hooks (`--fence-until=NS`) the guard also enforces the lease on its
//! own: it starts nothing once NS (CLOCK_BOOTTIME nanoseconds) has passed, leaderd writes
//! each newer kill deadline to a pipe on the guard's fence descriptor (one per line), and
//! the guard kills the group when the latest deadline passes, or when the pipe closes. The
//! fence descriptor is 3, and the program gets the guard's stdin, stdout and stderr as
//! they are; or, for hooks whose stdin is /dev/null anyway, it is stdin (`--fence-fd=0`),
//! which leaderd can set up without running code in the forked child, so it starts the
//! guard with posix_spawn instead of fork (milliseconds on a busy or virtual host).
//!
//! PR_SET_PDEATHSIG fires when the *thread* that started the guard ends, not only the
//! process. leaderd starts hooks from tokio worker threads, which live as long as the
//! daemon's runtime; the fence pipe closing covers the process dying in any case. The
//! deadline holds even while leaderd itself is frozen (SIGSTOP, a paused VM), when its own
//! timers cannot fire, and across a suspend of the host: deadlines are CLOCK_BOOTTIME,
//! which (unlike CLOCK_MONOTONIC) counts the time the host was asleep, as the database's
//! clock did.
//!
//! A program whose stdin is a terminal (`leaderd lock` run by hand) gets the terminal's
//! foreground: the guard's group is a background group otherwise, and the program would be
//! stopped the moment it read from the terminal. The terminal goes back to leaderd after.

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{getpgrp, getppid};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;

pub const SUBCOMMAND: &str = "hook-guard";
/// The guard's descriptor for the fence pipe, unless it is stdin.
pub const FENCE_FD: i32 = 3;

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

/// A leader-scoped hook's first kill deadline and where newer ones come from.
pub struct Fence {
    /// CLOCK_BOOTTIME nanoseconds.
    pub until: u64,
    /// [`FENCE_FD`], or 0: stdin, and the program gets /dev/null.
    pub fd: i32,
}

/// How the guard learns what to run.
pub enum Start {
    /// From its command line, with the fence (if any) from `--fence-until`.
    Now {
        argv: Vec<String>,
        fence: Option<Fence>,
    },
    /// From the first line of its stdin ([`AwaitedCommand`]), always fenced, on stdin.
    Await,
}

pub fn run(daemon_pid: i32, start: Start) -> ExitCode {
    let group = getpgrp();
    if let Err(error) = nix::sys::prctl::set_pdeathsig(Signal::SIGUSR1) {
        eprintln!("leaderd hook-guard: cannot watch the daemon: {error}");
        return ExitCode::from(126);
    }
    // The daemon may have died before the line above took effect.
    if getppid().as_raw() != daemon_pid {
        let _ = killpg(group, Signal::SIGKILL);
        return ExitCode::from(126);
    }
    // Handled, not ignored: the program started below gets default dispositions back on
    // exec. Signals the daemon sends to the group reach that program directly; the guard
    // stays until it has exited.
    let mut signals =
        match signal_hook::iterator::Signals::new([SIGUSR1, SIGTERM, SIGINT, SIGHUP, SIGQUIT]) {
            Ok(signals) => signals,
            Err(error) => {
                eprintln!("leaderd hook-guard: cannot handle signals: {error}");
                return ExitCode::from(126);
            }
        };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if signal == SIGUSR1 {
                let _ = killpg(group, Signal::SIGKILL);
            }
        }
    });
    let (argv, env, fence) = match start {
        Start::Now { argv, fence: None } => (argv, Vec::new(), None),
        Start::Now {
            argv,
            fence: Some(Fence { until, fd }),
        } => match fence_pipe(fd) {
            Ok(pipe) => (argv, Vec::new(), Some((until, fd, pipe))),
            Err(why) => {
                eprintln!("leaderd hook-guard: {why}");
                let _ = killpg(group, Signal::SIGKILL);
                return ExitCode::from(126);
            }
        },
        Start::Await => {
            let mut pipe = match fence_pipe(0) {
                Ok(pipe) => pipe,
                Err(why) => {
                    eprintln!("leaderd hook-guard: {why}");
                    return ExitCode::from(126);
                }
            };
            let mut line = String::new();
            match std::io::BufRead::read_line(&mut pipe, &mut line) {
                // leaderd let it go unused (it stopped, or runs no such hook any more).
                Ok(0) => return ExitCode::SUCCESS,
                Ok(_) => match serde_json::from_str::<AwaitedCommand>(&line) {
                    Ok(c) => (c.argv, c.env, Some((c.fence_until, 0, pipe))),
                    Err(error) => {
                        eprintln!("leaderd hook-guard: not a command: {error}");
                        return ExitCode::from(126);
                    }
                },
                Err(error) => {
                    eprintln!("leaderd hook-guard: cannot read the command: {error}");
                    return ExitCode::from(126);
                }
            }
        }
    };
    let Some((program, args)) = argv.split_first() else {
        eprintln!("leaderd hook-guard: nothing to run");
        return ExitCode::from(126);
    };
    let mut command = std::process::Command::new(program);
    command.args(args).envs(env);
    if let Some((until, fd, pipe)) = fence {
        if fd == 0 {
            command.stdin(std::process::Stdio::null());
        }
        if boottime_ns() >= until {
            eprintln!("leaderd hook-guard: the lease ended before the hook could start");
            return ExitCode::from(125);
        }
        watch_fence(group, until, pipe);
    }
    let terminal = take_terminal(group);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("leaderd hook-guard: cannot run {program:?}: {error}");
            return ExitCode::from(127);
        }
    };
    let waited = child.wait();
    if terminal {
        give_terminal_back(daemon_pid);
    }
    match waited {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(code as u8),
            (None, Some(signal)) => {
                // Die the same way, so leaderd sees the signal and not a made-up code.
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                ExitCode::from(128 + signal as u8)
            }
            _ => ExitCode::FAILURE,
        },
        Err(_) => ExitCode::FAILURE,
    }
}

/// The fence pipe on descriptor `fd` (0 or [`FENCE_FD`]), made close-on-exec: the program
/// must not hold it, only the guard watches it.
fn fence_pipe(fd: i32) -> Result<std::io::BufReader<std::fs::File>, String> {
    if fd != 0 && fd != FENCE_FD {
        return Err(format!("the fence descriptor is 0 or {FENCE_FD}, not {fd}"));
    }
    // SAFETY: leaderd opens the fence descriptor for every fenced guard (a pipe), and
    // nothing else in this process owns it (stdin is not read anywhere else).
    let pipe = unsafe { OwnedFd::from_raw_fd(fd) };
    fcntl(&pipe, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|error| format!("no fence pipe on descriptor {fd}: {error}"))?;
    Ok(std::io::BufReader::new(std::fs::File::from(pipe)))
}

/// Makes `group` the foreground of the terminal on stdin, if there is one; returns
/// whether it did.
fn take_terminal(group: nix::unistd::Pid) -> bool {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return false;
    }
    // A background group changing the foreground gets SIGTTOU unless it blocks it; the
    // program started below gets an empty signal mask back.
    let mut ttou = nix::sys::signal::SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let _ = ttou.thread_block();
    nix::unistd::tcsetpgrp(&stdin, group).is_ok()
}

fn give_terminal_back(daemon_pid: i32) {
    if let Ok(daemon_group) = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(daemon_pid))) {
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), daemon_group);
    }
}

/// How long the fence watcher sleeps at most between looks at the clock: a condition
/// variable's timeout runs on CLOCK_MONOTONIC, which stands still while the host sleeps.
const FENCE_LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Kills the group when the latest deadline read from `pipe` passes, or the pipe closes.
fn watch_fence(group: nix::unistd::Pid, first: u64, pipe: impl std::io::BufRead + Send + 'static) {
    use std::sync::{Arc, Condvar, Mutex};
    let deadline: Arc<(Mutex<Option<u64>>, Condvar)> =
        Arc::new((Mutex::new(Some(first)), Condvar::new()));
    let reader = Arc::clone(&deadline);
    std::thread::spawn(move || {
        for line in pipe.lines() {
            let Ok(Ok(ns)) = line.map(|l| l.trim().parse::<u64>()) else {
                break;
            };
            *reader.0.lock().unwrap() = Some(ns);
            reader.1.notify_all();
        }
        // leaderd is gone (or spoke nonsense): nothing may go on running.
        *reader.0.lock().unwrap() = Some(0);
        reader.1.notify_all();
    });
    std::thread::spawn(move || {
        let (lock, changed) = &*deadline;
        let mut current = lock.lock().unwrap();
        loop {
            match *current {
                None => current = changed.wait(current).unwrap(),
                Some(ns) => {
                    let now = boottime_ns();
                    if now >= ns {
                        let _ = killpg(group, Signal::SIGKILL);
                        return;
                    }
                    let wait = std::time::Duration::from_nanos(ns - now).min(FENCE_LOOK_EVERY);
                    current = changed.wait_timeout(current, wait).unwrap().0;
                }
            }
        }
    });
}

/// CLOCK_BOOTTIME in nanoseconds: the same clock in every process of the host, and one
/// that goes on while the host is suspended.
pub fn boottime_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .expect("CLOCK_BOOTTIME is available");
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}
