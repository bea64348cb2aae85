//! The systemd notify protocol (`Type=notify`), as a consumer of the election: READY=1
//! once the first round has completed, STATUS= on every change of role, leader or term,
//! WATCHDOG=1 for completed rounds only (a stuck election loop stops the pings and systemd
//! restarts the unit), and STOPPING=1 / RELOADING=1 from the edge of the program. Without
//! `NOTIFY_SOCKET` every call is a no-op. And the unit's stop timeout, which the stop
//! sequence must fit in.

use sd_notify::NotifyState;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::election::{Role, Status};

fn notify(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(states) {
        warn!(%error, "cannot notify systemd");
    }
}

/// One line for `systemctl status`.
pub fn status_line(status: &Status) -> String {
    let term = status.term.map_or("none".to_owned(), |t| t.to_string());
    let line = match (status.role, &status.leader, &status.error) {
        (Role::Leader, _, _) => format!("leader (term {term})"),
        (Role::Follower, Some(leader), _) => format!("follower of {leader} (term {term})"),
        (Role::Follower, None, _) => format!("follower, no leader (term {term})"),
        (Role::Unknown, _, Some(error)) => format!("unknown: {error}"),
        (Role::Unknown, _, None) => "unknown".to_owned(),
    };
    match status.paused {
        true => format!("{line}, paused"),
        false => line,
    }
}

/// Follows `rounds` (the number of completed rounds) and `status`; see the module comment.
pub fn spawn_notifier(
    mut status: watch::Receiver<Status>,
    mut rounds: watch::Receiver<u64>,
) -> JoinHandle<()> {
    // Pings at most this often; systemd wants one per half WatchdogSec.
    let ping_every = sd_notify::watchdog_enabled().map(|limit| limit / 4);
    tokio::spawn(async move {
        if rounds.wait_for(|&completed| completed > 0).await.is_err() {
            return;
        }
        let mut line = status_line(&status.borrow_and_update());
        notify(&[NotifyState::Ready, NotifyState::Status(&line)]);
        debug!(status = %line, "told systemd we are ready");
        let mut last_ping = tokio::time::Instant::now();
        loop {
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = status_line(&status.borrow_and_update());
                    if now != line {
                        line = now;
                        notify(&[NotifyState::Status(&line)]);
                    }
                }
                changed = rounds.changed(), if ping_every.is_some() => {
                    if changed.is_err() {
                        return;
                    }
                    rounds.borrow_and_update();
                    if last_ping.elapsed() >= ping_every.unwrap_or(Duration::ZERO) {
                        notify(&[NotifyState::Watchdog]);
                        last_ping = tokio::time::Instant::now();
                    }
                }
            }
        }
    })
}

pub fn stopping() {
    notify(&[NotifyState::Stopping, NotifyState::Status("stepping down")]);
}

/// Brackets a configuration reload (for `Type=notify-reload` as well as `ExecReload`).
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(_) => notify(&[NotifyState::Reloading]),
    }
}

pub fn reloaded(status: &Status) {
    notify(&[
        NotifyState::Ready,
        NotifyState::Status(&status_line(status)),
    ]);
}

/// systemd's stop timeout for the unit this process runs in (`TimeoutStopSec`), as
/// `systemctl show` gives it; `None` outside a unit (no `INVOCATION_ID`), for a unit
/// without one (`infinity`), or when it cannot be told.
pub async fn unit_stop_timeout() -> Option<Duration> {
    std::env::var_os("INVOCATION_ID")?;
    let cgroups = tokio::fs::read_to_string("/proc/self/cgroup").await.ok()?;
    let (unit, user) = unit_of(&cgroups)?;
    let mut systemctl = tokio::process::Command::new("systemctl");
    if user {
        systemctl.arg("--user");
    }
    systemctl
        .args(["show", "--property=TimeoutStopUSec", "--value", &unit])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(5), systemctl.output())
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    debug!(unit, timeout = %text.trim(), "the unit's stop timeout");
    humantime::parse_duration(text.trim()).ok()
}

/// The service unit a `/proc/self/cgroup` names (the unified hierarchy's line, or
/// systemd's own on a hybrid host), and whether it is a user's.
fn unit_of(cgroups: &str) -> Option<(String, bool)> {
    cgroups
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .find_map(|path| {
            let unit = path.rsplit('/').find(|part| part.ends_with(".service"))?;
            Some((unit.to_owned(), path.contains("/user@")))
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_unit_is_read_from_the_cgroup() {
        let system = "0::/system.slice/leaderd.service\n";
        assert_eq!(
            super::unit_of(system),
            Some(("leaderd.service".into(), false))
        );
        let hybrid = "9:name=systemd:/system.slice/x.service\n0::/system.slice/x.service/sub\n";
        assert_eq!(super::unit_of(hybrid), Some(("x.service".into(), false)));
        let user = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/y.service\n";
        assert_eq!(super::unit_of(user), Some(("y.service".into(), true)));
        assert_eq!(super::unit_of("0::/\n"), None);
    }
}
