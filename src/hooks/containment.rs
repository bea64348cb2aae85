//! Keeping everything a fenced hook starts within the guard's reach.
//!
//! A process group is no container: GNU `timeout`, `setsid`, `sudo` with a pty, job-control
//! shells and daemonizing programs all leave it. So the guard holds a fenced hook two ways:
//!
//! * **cgroup**: where leaderd has a cgroup v2 of its own to delegate (systemd
//!   `Delegate=yes`, a writable cgroup in a container), each fenced hook runs in a child
//!   cgroup `leaderd-hook-<guard pid>` of it, and `cgroup.kill` ends everything in it at
//!   once, whatever it forked; no process can leave a cgroup it cannot write to.
//! * **subreaper**: always, and the only way elsewhere: the guard is a child subreaper, so
//!   whatever a hook orphans (a double fork, `setsid -f`) is reparented to the guard rather
//!   than to init. The guard finds its descendants by their parent links in /proc, stops
//!   them all (SIGSTOP) and kills them (SIGKILL), round after round until none is left, so
//!   a process forking in a loop cannot stay ahead.
//!
//! This file resolves the mode and holds the cgroup; the subreaper's sweep is in
//! `super::subreaper`, and [`sweep`] does both. leaderd decides the mode once at start
//! ([`Containment::resolve`]) and tells each guard the cgroup to create the hook's cgroup
//! in (`--cgroup-parent`).

use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::info;

use super::subreaper;

/// `hooks.containment`: how leader-scoped hooks are contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainmentMode {
    /// A cgroup of its own per hook where leaderd can delegate one, else the subreaper.
    #[default]
    Auto,
    /// A cgroup of its own per hook; leaderd refuses to start without one.
    Cgroup,
    /// The guard's subreaper sweep only.
    Subreaper,
}

impl ContainmentMode {
    pub const CHOICES: &str = "\"auto\", \"cgroup\" or \"subreaper\"";

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "auto" => Some(ContainmentMode::Auto),
            "cgroup" => Some(ContainmentMode::Cgroup),
            "subreaper" => Some(ContainmentMode::Subreaper),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContainmentMode::Auto => "auto",
            ContainmentMode::Cgroup => "cgroup",
            ContainmentMode::Subreaper => "subreaper",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ContainmentError {
    #[error(
        "hooks.containment = \"cgroup\", but leaderd has no cgroup v2 to give its hooks: \
         {reason}; run it with a delegated cgroup (systemd: Delegate=yes) or set \
         hooks.containment to \"auto\" or \"subreaper\""
    )]
    CgroupUnavailable { reason: String },
}

/// The mode in force, as resolved at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// Fenced hooks get a cgroup under `parent` (leaderd's own cgroup directory).
    Cgroup {
        parent: PathBuf,
    },
    Subreaper,
}

impl Containment {
    /// Decides the mode for `mode`: "cgroup" fails if leaderd's cgroup cannot be delegated
    /// to hooks, "auto" falls back to the subreaper then (the reason is returned with it).
    pub fn resolve(
        mode: ContainmentMode,
    ) -> Result<(Containment, Option<String>), ContainmentError> {
        if mode == ContainmentMode::Subreaper {
            return Ok((Containment::Subreaper, None));
        }
        match delegated_cgroup() {
            Ok(parent) => Ok((Containment::Cgroup { parent }, None)),
            Err(reason) if mode == ContainmentMode::Auto => {
                Ok((Containment::Subreaper, Some(reason)))
            }
            Err(reason) => Err(ContainmentError::CgroupUnavailable { reason }),
        }
    }

    /// Where the guard creates hook cgroups, in cgroup mode.
    pub fn cgroup_parent(&self) -> Option<&Path> {
        match self {
            Containment::Cgroup { parent } => Some(parent),
            Containment::Subreaper => None,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Containment::Cgroup { .. } => "cgroup",
            Containment::Subreaper => "subreaper",
        }
    }
}

/// Decides how fenced hooks are held (`hooks.containment`), and says so in the log: once,
/// at start.
pub fn resolve_containment(mode: ContainmentMode) -> Result<Containment, ContainmentError> {
    let (containment, no_cgroup) = Containment::resolve(mode)?;
    match (&containment, no_cgroup) {
        (Containment::Cgroup { parent }, _) => info!(
            containment = containment.as_str(),
            cgroup = %parent.display(),
            "hook containment: cgroup (each leader-scoped hook in a cgroup of its own, ended \
             with cgroup.kill; the guard's subreaper sweep besides)"
        ),
        (Containment::Subreaper, Some(reason)) => info!(
            containment = containment.as_str(),
            "hook containment: subreaper (the guard sweeps the hook's descendants; no \
             cgroup: {reason})"
        ),
        (Containment::Subreaper, None) => info!(
            containment = containment.as_str(),
            "hook containment: subreaper (the guard sweeps the hook's descendants; \
             hooks.containment = \"subreaper\")"
        ),
    }
    Ok(containment)
}

/// The directory of leaderd's own cgroup v2, if hooks can get child cgroups there that
/// `cgroup.kill` can end; otherwise why not.
fn delegated_cgroup() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup ({e})"))?;
    let own = own_cgroup(&cgroups).ok_or("no cgroup v2 in /proc/self/cgroup (no 0:: line)")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo ({e})"))?;
    let dir = cgroup_dir(&mounts, own)
        .ok_or_else(|| format!("cgroup {own} is not under any cgroup2 mount"))?;
    // The one way to know that hooks can get a cgroup here: make one. The root cgroup has
    // no cgroup.kill of its own, but its children do.
    let probe = dir.join(format!("leaderd-probe-{}", std::process::id()));
    std::fs::create_dir(&probe)
        .map_err(|e| format!("cannot create a cgroup in {} ({e})", dir.display()))?;
    let killable = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if !killable {
        return Err(format!(
            "cgroups in {} have no cgroup.kill (Linux 5.14 or later has it)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The cgroup v2 path in `/proc/self/cgroup` text (the `0::PATH` line).
fn own_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|line| line.strip_prefix("0::"))
}

/// The directory of cgroup `path` under a cgroup2 mount listed in `mountinfo` text.
fn cgroup_dir(mountinfo: &str, path: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split(' ').next() != Some("cgroup2") {
            return None;
        }
        let fields: Vec<&str> = mount.split(' ').collect();
        let (root, point) = (fields.get(3)?, fields.get(4)?);
        let below = match *root {
            "/" => path.strip_prefix('/')?,
            root => match path.strip_prefix(root)? {
                "" => "",
                rest => rest.strip_prefix('/')?,
            },
        };
        let dir = Path::new(point);
        Some(match below {
            "" => dir.to_owned(),
            below => dir.join(below),
        })
    })
}

/// The cgroup of one fenced hook: `<parent>/leaderd-hook-<guard pid>`.
pub struct HookCgroup {
    pub dir: PathBuf,
    /// Its cgroup.procs, opened ahead so that the forked child only has to write to it.
    procs: std::fs::File,
}

impl HookCgroup {
    pub fn path(parent: &Path, guard: Pid) -> PathBuf {
        parent.join(format!("leaderd-hook-{guard}"))
    }

    /// Creates the cgroup for this guard's hook.
    pub fn create(parent: &Path) -> std::io::Result<HookCgroup> {
        let dir = Self::path(parent, Pid::this());
        std::fs::create_dir(&dir)?;
        match std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
        {
            Ok(procs) => Ok(HookCgroup { dir, procs }),
            Err(error) => {
                let _ = std::fs::remove_dir(&dir);
                Err(error)
            }
        }
    }

    /// For a `pre_exec`: moves the calling (forked) process into the cgroup, so that the
    /// guard itself stays outside. Only async-signal-safe calls: a failure is told on
    /// stderr, and the hook runs on, held by the subreaper alone.
    pub fn join_in_child(&self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        use std::os::fd::{AsRawFd, BorrowedFd};
        let procs = self.procs.as_raw_fd();
        let dir = self.dir.as_os_str().as_encoded_bytes().to_vec();
        move || {
            // SAFETY: the descriptor belongs to the HookCgroup, which outlives the spawn.
            let procs = unsafe { BorrowedFd::borrow_raw(procs) };
            if let Err(errno) = nix::unistd::write(procs, b"0") {
                let stderr = std::io::stderr();
                for part in [
                    b"leaderd hook-guard: cannot move the hook into cgroup ".as_slice(),
                    &dir,
                    b" (",
                    errno.desc().as_bytes(),
                    b"); holding it as a subreaper only\n",
                ] {
                    let _ = nix::unistd::write(&stderr, part);
                }
            }
            Ok(())
        }
    }

    /// Kills everything in the cgroup, at once: a process forking meanwhile cannot escape.
    pub fn kill(&self) {
        if let Err(error) = kill_cgroup(&self.dir) {
            eprintln!(
                "leaderd hook-guard: cannot write {}/cgroup.kill: {error}",
                self.dir.display()
            );
        }
    }

    /// Removes the cgroup once empty (waits for the kernel to see it so). One already gone
    /// (an earlier sweep's, or the system's) is removed as well as can be.
    pub fn remove(&self) {
        if wait_unpopulated(&self.dir, CGROUP_EMPTY_WITHIN) {
            let removed = match std::fs::remove_dir(&self.dir) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                removed => removed,
            };
            if let Err(error) = removed {
                eprintln!(
                    "leaderd hook-guard: cannot remove cgroup {}: {error}",
                    self.dir.display()
                );
            }
        } else {
            eprintln!(
                "leaderd hook-guard: cgroup {} still has processes after cgroup.kill \
                 (uninterruptible sleep?); left in place",
                self.dir.display()
            );
        }
    }
}

/// How long killed processes get to leave their cgroup (and the guard's tree).
const CGROUP_EMPTY_WITHIN: Duration = Duration::from_secs(5);

/// Writes `cgroup.kill` of `dir`, if the cgroup exists (leaderd does, when a guard died
/// before it could).
pub fn kill_cgroup(dir: &Path) -> std::io::Result<()> {
    match std::fs::write(dir.join("cgroup.kill"), b"1") {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        written => written,
    }
}

/// Waits until `cgroup.events` of `dir` says `populated 0` (or the cgroup is gone),
/// reaping whatever exits meanwhile; false if it is still populated at `within`.
fn wait_unpopulated(dir: &Path, within: Duration) -> bool {
    let give_up = Instant::now() + within;
    loop {
        match std::fs::read_to_string(dir.join("cgroup.events")) {
            Ok(events) if events.lines().any(|l| l == "populated 0") => return true,
            Err(_) => return true,
            Ok(_) if Instant::now() >= give_up => return false,
            Ok(_) => {
                subreaper::reap_exited();
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Serializes sweeps: the fence watcher, the signal handler and the main thread may all
/// start one.
static SWEEPING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Kills every descendant of this process: the hook's cgroup at once (if any), then by
/// /proc ([`subreaper::kill_descendants`]).
pub fn sweep(cgroup: Option<&HookCgroup>) {
    let _one_at_a_time = SWEEPING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(cgroup) = cgroup {
        cgroup.kill();
    }
    subreaper::kill_descendants();
    if let Some(cgroup) = cgroup {
        cgroup.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroup_is_the_v2_line() {
        let text = "12:pids:/system.slice\n1:name=systemd:/system.slice/x\n0::/system.slice/leaderd.service\n";
        assert_eq!(own_cgroup(text), Some("/system.slice/leaderd.service"));
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn the_cgroup_dir_is_found_under_the_cgroup2_mount() {
        let unified = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw\n\
                       35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                       41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_dir(unified, "/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            cgroup_dir(unified, "/system.slice/leaderd.service"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/leaderd.service"
            ))
        );
        // A container's view: the mount's root is the container's own cgroup.
        let container = "900 800 0:30 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_dir(container, "/kubepods/pod1/app"),
            Some(PathBuf::from("/sys/fs/cgroup/app"))
        );
        assert_eq!(cgroup_dir(container, "/elsewhere"), None);
        assert_eq!(cgroup_dir(container, "/kubepods/pod10"), None);
        assert_eq!(
            cgroup_dir("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n", "/"),
            None
        );
    }

    #[test]
    fn modes_parse() {
        for mode in [
            ContainmentMode::Auto,
            ContainmentMode::Cgroup,
            ContainmentMode::Subreaper,
        ] {
            assert_eq!(ContainmentMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(ContainmentMode::parse("cgroups"), None);
    }
}
