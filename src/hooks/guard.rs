//! The guard between leaderd and every hook it runs.
//!
//! leaderd starts `leaderd hook-guard <daemon pid> -- ARGV…` as the leader of a new process
//! group; the guard runs ARGV in that group and exits with its status. Its one job is the
//! case leaderd cannot handle itself: when leaderd dies (even by SIGKILL), the kernel sends
//! the guard SIGUSR1 (PR_SET_PDEATHSIG) and the guard kills everything the hook started,
//! grandchildren included, so no leader-only work outlives the daemon whose lease it ran
//! under.
//!
//! "Everything" is more than the process group, which `timeout`, `setsid` and daemonizing
//! programs leave: the guard is a child subreaper, and for fenced hooks it may hold a
//! cgroup too (see [`super::containment`]). Its kill is a sweep of all that, after which it
//! kills itself with SIGKILL, as leaderd expects of a hook it had killed. leaderd therefore
//! never SIGKILLs the group while the guard lives (that would kill the guard before its
//! sweep): it sends the guard SIGUSR2 instead. A SIGTERM to the group is passed on to the
//! hook's processes outside it, once each.
//!
//! For leader-scoped hooks (`--fence-until=NS`) the guard also enforces the lease on its
//! own: it starts nothing once NS (CLOCK_BOOTTIME nanoseconds) has passed, leaderd writes
//! each newer kill deadline to a pipe on the guard's fence descriptor (one per line), and
//! the guard kills the hook when the latest deadline passes, when the pipe closes, or when
//! the hook's main process exits (whatever it left behind goes with it). The
//! fence descriptor is 3, and the program gets the guard's stdin, stdout and stderr as
//! they are; or, for hooks whose stdin is /dev/null anyway, it is stdin (`--fence-fd=0`),
//! which leaderd can set up without running code in the forked child, so it starts the
//! guard with posix_spawn instead of fork (milliseconds on a busy or virtual host).
//!
//! A guard started ahead of leadership (`--await-command`) reads its hook from stdin when
//! leadership begins, and has forked the hook's process ahead, into the hook's cgroup
//! (see `super::stub`): starting the hook then costs one exec.
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

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getppid};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::OnceLock;

use super::containment::{self, HookCgroup};
use super::stub::{AwaitedCommand, Stub, cannot_run_status};
use super::subreaper;

pub const SUBCOMMAND: &str = "hook-guard";

/// What `ps` and `pgrep` see of a guard: argv[0] (the guards are started through
/// /proc/self/exe, which would otherwise show), and the process name the guard gives
/// itself (the kernel names it "exe" after that path), so `pgrep leaderd` finds the
/// guards with the daemon.
pub const ARGV0: &str = "leaderd";
pub const PROCESS_NAME: &std::ffi::CStr = c"leaderd-guard";
/// The guard's descriptor for the fence pipe, unless it is stdin.
pub const FENCE_FD: i32 = 3;
/// What leaderd sends the guard to have the hook killed, everything it started included.
pub const KILL_SIGNAL: Signal = Signal::SIGUSR2;

/// The fenced hook's cgroup, once created (cgroup mode): whoever kills needs it.
static HOOK_CGROUP: OnceLock<HookCgroup> = OnceLock::new();

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

/// Runs the hook described by `start`; fenced hooks get a cgroup of their own under
/// `cgroup_parent` if given (cgroup mode).
pub fn run(daemon_pid: i32, start: Start, cgroup_parent: Option<PathBuf>) -> ExitCode {
    // Only what `ps` shows: a failure changes nothing else.
    let _ = nix::sys::prctl::set_name(PROCESS_NAME);
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
    if let Err(error) = subreaper::become_subreaper() {
        eprintln!("leaderd hook-guard: cannot become a subreaper: {error}");
        return ExitCode::from(126);
    }
    // An awaited hook gets its cgroup and its stub now, ahead of leadership; forking needs
    // this process single-threaded, so nothing above starts a thread.
    let stub = match start {
        Start::Await => prepare_stub(cgroup_parent.as_deref()),
        Start::Now { .. } => None,
    };
    // Handled, not ignored: the program started below gets default dispositions back on
    // exec. Signals the daemon sends to the group reach that program directly; the guard
    // stays until it has exited.
    let signals = match GuardSignals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("leaderd hook-guard: cannot handle signals: {error}");
            return ExitCode::from(126);
        }
    };
    std::thread::spawn(move || signals.serve(group));
    let mut awaited_line = String::new();
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
                    return unused(stub, 126);
                }
            };
            match std::io::BufRead::read_line(&mut pipe, &mut awaited_line) {
                // leaderd let it go unused (it stopped, or runs no such hook any more).
                Ok(0) => return unused(stub, 0),
                Ok(_) => match serde_json::from_str::<AwaitedCommand>(&awaited_line) {
                    Ok(c) => (c.argv, c.env, Some((c.fence_until, 0, pipe))),
                    Err(error) => {
                        eprintln!("leaderd hook-guard: not a command: {error}");
                        return unused(stub, 126);
                    }
                },
                Err(error) => {
                    eprintln!("leaderd hook-guard: cannot read the command: {error}");
                    return unused(stub, 126);
                }
            }
        }
    };
    let Some((program, args)) = argv.split_first() else {
        eprintln!("leaderd hook-guard: nothing to run");
        return unused(stub, 126);
    };
    let mut command = std::process::Command::new(program);
    command.args(args).envs(env);
    let fenced = fence.is_some();
    if let Some((until, fd, pipe)) = fence {
        if fd == 0 {
            command.stdin(std::process::Stdio::null());
        }
        if boottime_ns() >= until {
            eprintln!("leaderd hook-guard: the lease ended before the hook could start");
            return unused(stub, 125);
        }
        // An awaited hook's cgroup exists already (see `prepare_stub`).
        if let Some(parent) = cgroup_parent.filter(|_| HOOK_CGROUP.get().is_none()) {
            create_hook_cgroup(&parent);
        }
        if let Some(cgroup) = HOOK_CGROUP.get() {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure only writes to descriptors (async-signal-safe).
            unsafe { command.pre_exec(cgroup.join_in_child()) };
        }
        watch_fence(until, pipe);
    }
    let terminal = take_terminal(group);
    // The stub execs the command; should it be gone, the hook starts the usual way (and
    // joins the cgroup in pre_exec).
    let started = stub.and_then(|stub| stub.start(&awaited_line).ok());
    let main = match started {
        Some(pid) => pid,
        None => match command.spawn() {
            Ok(child) => Pid::from_raw(child.id() as i32),
            Err(error) => {
                eprintln!("leaderd hook-guard: cannot run {program:?}: {error}");
                if let Some(cgroup) = HOOK_CGROUP.get() {
                    cgroup.remove();
                }
                return ExitCode::from(cannot_run_status(&error));
            }
        },
    };
    let status = wait_reaping(main);
    if terminal {
        give_terminal_back(daemon_pid);
    }
    if fenced {
        // Leader work ends with its main process: nothing it left behind goes on.
        containment::sweep(HOOK_CGROUP.get());
    }
    match status {
        WaitStatus::Exited(_, code) => ExitCode::from(code as u8),
        WaitStatus::Signaled(_, signal, _) => {
            // Die the same way, so leaderd sees the signal and not a made-up code.
            die_of(signal);
            ExitCode::from(128 + signal as u8)
        }
        _ => ExitCode::FAILURE,
    }
}

/// The guard's signal handlers: installed on the calling thread, so that none of these
/// signals can end the guard once this returns, and served on another (tokio's handlers,
/// on a runtime of their own without threads).
struct GuardSignals {
    runtime: tokio::runtime::Runtime,
    arrivals: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl GuardSignals {
    fn install() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let arrivals = {
            let _inside = runtime.enter();
            [
                Signal::SIGUSR1,
                Signal::SIGUSR2,
                Signal::SIGTERM,
                Signal::SIGINT,
                Signal::SIGHUP,
                Signal::SIGQUIT,
            ]
            .into_iter()
            .map(|signal| {
                let kind = tokio::signal::unix::SignalKind::from_raw(signal as i32);
                tokio::signal::unix::signal(kind).map(|arrivals| (signal, arrivals))
            })
            .collect::<std::io::Result<Vec<_>>>()?
        };
        Ok(GuardSignals { runtime, arrivals })
    }

    /// Loss of the daemon (SIGUSR1, the parent-death signal) or a kill request (SIGUSR2)
    /// kills the hook; SIGTERM is passed on to what the hook left outside its group.
    fn serve(mut self, group: Pid) {
        let mut termed = std::collections::HashSet::new();
        let arrivals = &mut self.arrivals;
        self.runtime.block_on(async {
            loop {
                let signal = std::future::poll_fn(|cx| {
                    for (signal, arrivals) in arrivals.iter_mut() {
                        if arrivals.poll_recv(cx).is_ready() {
                            return std::task::Poll::Ready(*signal);
                        }
                    }
                    std::task::Poll::Pending
                })
                .await;
                match signal {
                    Signal::SIGUSR1 | Signal::SIGUSR2 => kill_hook_and_die(),
                    Signal::SIGTERM => subreaper::forward_term(group, &mut termed),
                    _ => {}
                }
            }
        })
    }
}

/// Ends this process by `signal`, as its default action does (for a signal whose default
/// is to be ignored, this returns).
fn die_of(signal: Signal) {
    // SAFETY: the default disposition installs no handler.
    let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) };
    let _ = nix::sys::signal::raise(signal);
}

/// Creates the hook's cgroup under `parent` as [`HOOK_CGROUP`]; without one the hook is
/// held by the subreaper alone.
fn create_hook_cgroup(parent: &std::path::Path) {
    match HookCgroup::create(parent) {
        Ok(cgroup) => {
            let _ = HOOK_CGROUP.set(cgroup);
        }
        Err(error) => eprintln!(
            "leaderd hook-guard: cannot create a cgroup for the hook in {} ({error}); \
             holding it as a subreaper only",
            parent.display()
        ),
    }
}

/// Creates the awaited hook's cgroup (cgroup mode) and forks its stub into it. Without a
/// stub the hook is started the usual way when asked, which costs a fork and, in cgroup
/// mode, a move into the cgroup at that moment.
fn prepare_stub(cgroup_parent: Option<&std::path::Path>) -> Option<Stub> {
    if let Some(parent) = cgroup_parent {
        create_hook_cgroup(parent);
    }
    // SAFETY: `run` calls this before it starts any thread.
    match unsafe { Stub::fork(HOOK_CGROUP.get()) } {
        Ok(stub) => Some(stub),
        Err(error) => {
            eprintln!(
                "leaderd hook-guard: cannot fork the hook ahead ({error}); will start it when asked"
            );
            None
        }
    }
}

/// Ends a guard whose hook never starts, with `code`: its stub exits (its command pipe
/// closes) and is reaped, and the hook's cgroup goes.
fn unused(stub: Option<Stub>, code: u8) -> ExitCode {
    if let Some(stub) = stub {
        let pid = stub.pid();
        drop(stub);
        let _ = waitpid(pid, None);
    }
    if let Some(cgroup) = HOOK_CGROUP.get() {
        cgroup.remove();
    }
    ExitCode::from(code)
}

/// Waits for `main` to end, reaping every orphan of the hook that ends meanwhile (they are
/// this subreaper's children now).
fn wait_reaping(main: Pid) -> WaitStatus {
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                if pid == main =>
            {
                return status;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            // Reaped by a sweep, which ends in this process's death.
            Err(_) => loop {
                std::thread::park();
            },
        }
    }
}

/// Kills everything the hook started, then this guard itself with SIGKILL: leaderd sees
/// its hook "killed by signal 9", as it would have without the guard.
fn kill_hook_and_die() -> ! {
    containment::sweep(HOOK_CGROUP.get());
    let _ = kill(Pid::this(), Signal::SIGKILL);
    loop {
        std::thread::park();
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

/// Kills the hook when the latest deadline read from `pipe` passes, or the pipe closes.
fn watch_fence(first: u64, pipe: impl std::io::BufRead + Send + 'static) {
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
                        kill_hook_and_die();
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
    crate::election::boottime().as_nanos() as u64
}
