//! Leader work that leaves the guard's process group (`timeout`, `setsid -f`, a daemonizing
//! double fork), beating into a file, and the checks that it ended with its fence: the
//! beats stop, and no process that carries its marker is left.

/// Instantiates `async fn check(escape: Escape, ending: Ending, mode: &str)` as one test
/// per way of escaping the process group and per ending: `escape_tests!(check, "cgroup",
/// "subreaper")` runs half of them in the first containment mode, half in the second, so
/// that each mode sees every escape and every ending.
#[allow(unused_macros)]
macro_rules! escape_tests {
    ($check:ident, $one:literal, $other:literal) => {
        escape_tests!(@each $check:
            escape_by_timeout_ends_when_leaderd_is_killed: Timeout, DaemonKilled, $one;
            escape_by_timeout_ends_when_the_lease_is_lost: Timeout, LeaseLost, $other;
            escape_by_setsid_ends_when_leaderd_is_killed: Setsid, DaemonKilled, $other;
            escape_by_setsid_ends_when_the_lease_is_lost: Setsid, LeaseLost, $one;
            escape_by_daemonizing_ends_when_leaderd_is_killed: Daemonize, DaemonKilled, $one;
            escape_by_daemonizing_ends_when_the_lease_is_lost: Daemonize, LeaseLost, $other;
        );
    };
    (@each $check:ident: $($name:ident: $escape:ident, $ending:ident, $mode:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            use crate::support::escape::{Ending, Escape};
            $check(Escape::$escape, Ending::$ending, $mode).await
        }
    )*};
}

use super::{now_ns, unique};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the heartbeat loop leaves the process group the guard runs it in.
#[derive(Debug, Clone, Copy)]
pub enum Escape {
    /// GNU `timeout` (without --foreground) puts itself and the loop in a group of its own.
    Timeout,
    /// `setsid -f`: the loop in a new session, its parent gone.
    Setsid,
    /// A daemon's double fork: setsid, fork, and the parent exits; the loop is an orphan.
    Daemonize,
    /// `setsid -f`, and the main process exits 0.3 s later, leaving the loop behind.
    LeftBehind,
}

/// How the leadership (or the lock) the work ran under ends.
#[derive(Debug, Clone, Copy)]
pub enum Ending {
    /// leaderd is SIGKILLed.
    DaemonKilled,
    /// The database link stalls while leaderd lives: the fence fires.
    LeaseLost,
}

/// The environment variable every process of the escaping work carries.
pub const MARK: &str = "ESCAPE_MARK";

/// A heartbeat file and the marker of the processes that write it.
pub struct Heartbeat {
    pub path: PathBuf,
    pub marker: String,
}

/// One process carrying the marker: its session, cgroup v2 path and command line.
#[derive(Debug)]
pub struct Marked {
    /// Its session: a loop started through `setsid` leads one, and its children share it.
    pub session: i32,
    pub cgroup: String,
    /// The command line, arguments joined by spaces.
    pub cmdline: String,
}

impl Heartbeat {
    pub fn new(dir: &Path) -> Heartbeat {
        Heartbeat {
            path: dir.join("heartbeat"),
            marker: unique("escape"),
        }
    }

    /// The command: the loop escaping as `escape` says, while the main process stays (so
    /// that what ends the work is the fence, not its main process exiting), except for
    /// [`Escape::LeftBehind`].
    pub fn argv(&self, escape: Escape) -> Vec<String> {
        // Deaf to SIGTERM: what stops it is the kill at the fence.
        let beat = format!(
            "trap : TERM; while :; do date +%s%N >> {}; sleep 0.01; done",
            self.path.display()
        );
        let shell = |script: String| vec!["sh".to_owned(), "-c".to_owned(), script];
        match escape {
            Escape::Timeout => ["timeout", "1h", "sh", "-c", &beat]
                .map(str::to_owned)
                .to_vec(),
            Escape::Setsid => shell(format!("setsid -f sh -c '{beat}'; exec sleep 3600")),
            // In the background of a shell without job control the child is no group
            // leader, so setsid(1) calls setsid() itself, and its shell exits at once.
            Escape::Daemonize => shell(format!(
                "setsid sh -c 'sh -c \"{beat}\" &' & exec sleep 3600"
            )),
            Escape::LeftBehind => shell(format!("setsid -f sh -c '{beat}'; sleep 0.3")),
        }
    }

    /// A `[hooks.HOOK]` table running [`Heartbeat::argv`] with the marker set.
    pub fn hook_table(&self, hook: &str, escape: Escape) -> String {
        format!(
            "[hooks.{hook}]\ncommand = {}\nenv = {{ {MARK} = \"{}\" }}\n",
            serde_json::to_string(&self.argv(escape)).unwrap(),
            self.marker
        )
    }

    /// The heartbeat loops of [`Escape::LeftBehind`] running now: their sessions, since
    /// each loop leads one (`setsid -f`). A loop's child between fork and exec has the
    /// loop's command line and session, and stays in that session once a kill has taken
    /// the loop before it: counted by parent, a loop seen alive and then its orphaned
    /// child seen in the same scan made two.
    pub fn loops(&self) -> usize {
        self.processes()
            .into_iter()
            .filter(|p| p.cmdline.starts_with("sh -c trap : TERM; while"))
            .map(|p| p.session)
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    pub fn beats(&self) -> Vec<u128> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// Waits until the loop has beaten a few times.
    pub async fn wait_beating(&self, limit: Duration) {
        let started = std::time::Instant::now();
        while self.beats().len() < 5 {
            assert!(started.elapsed() < limit, "no heartbeat within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Live processes whose environment holds the marker.
    pub fn processes(&self) -> Vec<Marked> {
        let wanted = format!("{MARK}={}", self.marker);
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
                if fields[0] == "Z" {
                    return None;
                }
                let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                environ
                    .split(|b| *b == 0)
                    .any(|var| var == wanted.as_bytes())
                    .then(|| Marked {
                        session: fields[3].parse().unwrap_or_default(),
                        cmdline: std::fs::read(format!("/proc/{pid}/cmdline"))
                            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                            .unwrap_or_default(),
                        cgroup: std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                            .unwrap_or_default()
                            .lines()
                            .find_map(|l| l.strip_prefix("0::"))
                            .unwrap_or_default()
                            .to_owned(),
                    })
            })
            .collect()
    }

    /// Checks that the work runs as `mode` ("cgroup" or "subreaper") says: in a hook
    /// cgroup of its own or not; returns those cgroups.
    pub fn check_held(&self, mode: &str) -> Vec<String> {
        let marked = self.processes();
        let cgroups: Vec<String> = marked
            .iter()
            .filter(|p| p.cgroup.contains("/leaderd-hook-"))
            .map(|p| p.cgroup.clone())
            .collect();
        match mode {
            "cgroup" => assert!(!cgroups.is_empty(), "not in a hook cgroup: {marked:?}"),
            _ => assert!(cgroups.is_empty(), "in a cgroup in {mode} mode: {marked:?}"),
        }
        cgroups
    }

    /// Asserts that the work ended with the fault at `fault_at` (wall clock ns), under a
    /// lease that ended by `lease_end`: no beat later than 1 s after that, none in the
    /// following second, no marked process left, and `cgroups` removed.
    pub async fn assert_ended(
        &self,
        what: &str,
        fault_at: u128,
        lease_end: u128,
        cgroups: &[String],
    ) {
        let wait = (lease_end + 200_000_000).saturating_sub(now_ns());
        tokio::time::sleep(Duration::from_nanos(wait as u64)).await;
        let count = self.beats().len();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let beats = self.beats();
        let last = *beats.iter().max().expect("it beat");
        let after = beats.iter().filter(|&&at| at > fault_at).count();
        let ms = |from: u128| (last as f64 - from as f64) / 1e6;
        eprintln!(
            "[measured] {what}: last heartbeat {:.1} ms after the fault and {:.1} ms after \
             the lease's end; {after} beats after the fault",
            ms(fault_at),
            ms(lease_end)
        );
        assert!(
            last < lease_end + 1_000_000_000,
            "{what}: beat {:.0} ms after the lease's end",
            ms(lease_end)
        );
        assert_eq!(beats.len(), count, "{what}: still beating");
        let left = self.processes();
        assert!(
            left.is_empty(),
            "{what}: processes outlived the fence: {left:?}"
        );
        let mount = cgroup2_mount();
        for cgroup in cgroups {
            let dir = format!("{mount}{cgroup}");
            assert!(!Path::new(&dir).exists(), "{what}: {dir} left behind");
        }
    }
}

/// Where the cgroup2 hierarchy is mounted.
pub fn cgroup2_mount() -> String {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split(' ').nth(4))
        .expect("a cgroup2 mount")
        .to_owned()
}
