//! The subreaper half of containment, and the only one where leaderd has no cgroup to
//! give: the guard is a child subreaper, so whatever a hook orphans is reparented to the
//! guard rather than to init, and the guard finds all of it by parent links in /proc.

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Makes this process a child subreaper: orphans among its descendants become its
/// children, not init's, and stay within reach of [`kill_descendants`].
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// One live process, from /proc/PID/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Proc {
    pid: i32,
    ppid: i32,
    group: i32,
    /// Start time since boot, in clock ticks: with the pid, names the process even if the
    /// pid is reused.
    started: u64,
}

/// Parses /proc/PID/stat text; `None` for zombies (and dead tasks): they run nothing, and
/// reaping is their parent's business.
fn parse_stat(pid: i32, stat: &str) -> Option<Proc> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split(' ').collect();
    if matches!(*fields.first()?, "Z" | "X" | "x") {
        return None;
    }
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
}

/// Every live process below `root`, by parent links in /proc.
fn descendants(root: Pid) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // gone meanwhile
        };
        if let Some(process) = parse_stat(pid, &stat) {
            children.entry(process.ppid).or_default().push(process);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root.as_raw()];
    while let Some(parent) = next.pop() {
        for child in children.remove(&parent).unwrap_or_default() {
            next.push(child.pid);
            found.push(child);
        }
    }
    found
}

/// Reaps every child that has exited, without waiting.
pub fn reap_exited() {
    while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// How long a sweep goes on killing processes that do not die (uninterruptible sleep).
const SWEEP_GIVE_UP: Duration = Duration::from_secs(5);

/// Kills every descendant of this process by /proc, freezing all it finds before killing,
/// round after round until none is left. Called through [`super::containment::sweep`],
/// which runs one sweep at a time.
pub fn kill_descendants() {
    let me = Pid::this();
    let give_up = Instant::now() + SWEEP_GIVE_UP;
    // Processes of another user (sudo): only a cgroup can end those.
    let mut forbidden: HashSet<i32> = HashSet::new();
    loop {
        reap_exited();
        // Freeze first: a stopped process forks no more, so the set can be completed.
        let mut frozen: HashSet<i32> = HashSet::new();
        loop {
            let new: Vec<Proc> = descendants(me)
                .into_iter()
                .filter(|p| !frozen.contains(&p.pid) && !forbidden.contains(&p.pid))
                .collect();
            if new.is_empty() {
                break;
            }
            for process in new {
                match kill(Pid::from_raw(process.pid), Signal::SIGSTOP) {
                    Err(Errno::EPERM) => {
                        eprintln!(
                            "leaderd hook-guard: not allowed to kill process {} (another \
                             user's); only hooks.containment = \"cgroup\" can",
                            process.pid
                        );
                        forbidden.insert(process.pid);
                    }
                    _ => {
                        frozen.insert(process.pid);
                    }
                }
            }
        }
        if frozen.is_empty() {
            break;
        }
        for &pid in &frozen {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if Instant::now() >= give_up {
            eprintln!(
                "leaderd hook-guard: processes {frozen:?} do not die of SIGKILL \
                 (uninterruptible sleep?); giving up on them"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Passes SIGTERM on to the descendants outside process group `group` (which got it from
/// leaderd directly), each at most once: `sent` remembers who had it.
pub fn forward_term(group: Pid, sent: &mut HashSet<(i32, u64)>) {
    for process in descendants(Pid::this()) {
        if process.group != group.as_raw() && sent.insert((process.pid, process.started)) {
            match kill(Pid::from_raw(process.pid), Signal::SIGTERM) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(error) => {
                    eprintln!(
                        "leaderd hook-guard: cannot pass SIGTERM to {}: {error}",
                        process.pid
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_and_zombies_are_left_out() {
        let stat = "4242 (a (weird) name) S 4200 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        assert_eq!(
            parse_stat(4242, stat),
            Some(Proc {
                pid: 4242,
                ppid: 4200,
                group: 4242,
                started: 98765
            })
        );
        let zombie = "4243 (sh) Z 4200 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98766 0 0";
        assert_eq!(parse_stat(4243, zombie), None);
    }
}
