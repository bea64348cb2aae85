//! Breaking a lock: `leaderd unlock NAME` releases a lock whose holder's process is gone
//! from this host (a SIGKILLed `leaderd lock`, or one that exited under
//! `--hold-at-least`), refuses a holder that may still run unless `--force`, and says
//! what it did; `leaderd locks` marks a holder of this host whose process is gone.

use super::*;

/// `leaderd ARGS…` on the setup's database, to completion.
fn run(setup: &Setup, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    leaderd()
        .args(args)
        .current_dir(&setup.db.dir)
        .env("LEADERD_DATABASE__URL", &setup.db.url)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The setup's lock as `leaderd locks --json` lists it, if held.
fn listed(setup: &Setup) -> Option<serde_json::Value> {
    let output = run(setup, &[], &["locks", "--json"]);
    assert!(output.status.success(), "{output:?}");
    let all: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    all.into_iter().find(|l| l["name"] == setup.name.as_str())
}

/// Whether `lock -n NAME` runs now (0) or finds the lock held (75).
fn try_lock(setup: &Setup) -> i32 {
    let output = run(setup, &[], &["lock", "-n", &setup.name, "true"]);
    output.status.code().unwrap()
}

/// A `leaderd lock` SIGKILLed with 30 s of lease left: `locks` marks its holder gone, a
/// new run is refused, `unlock` releases it at once and says so, and a new run takes it.
/// A second `unlock` finds nothing to do.
async fn unlock_breaks_the_lock_of_a_killed_holder(backend: Backend) {
    let setup = Setup::new(backend);
    let mut killed = setup.lock(&setup.db.url, &["--ttl", "30s"], &setup.job("60"));
    let started = wait_for_record(&setup.db.dir, "start").await;
    let running = listed(&setup).expect("held");
    assert_eq!(running["holder_process"], "running", "{running}");
    killed.start_kill().unwrap();
    killed.wait().await.unwrap();
    assert_gone(started.pid.unwrap()).await;

    let gone = listed(&setup).expect("still held by its lease");
    assert_eq!(gone["holder_process"], "gone", "{gone}");
    let table = text(&run(&setup, &[], &["locks"]).stdout);
    assert!(table.contains(" (gone)"), "{table}");
    assert!(table.contains("leaderd unlock NAME"), "{table}");
    assert_eq!(try_lock(&setup), HELD);

    let unlocked = run(&setup, &[], &["unlock", &setup.name]);
    assert_eq!(unlocked.status.code(), Some(0), "{unlocked:?}");
    let said = text(&unlocked.stdout);
    assert!(said.contains("released lock"), "{said}");
    assert!(said.contains("is gone from this host"), "{said}");
    assert!(listed(&setup).is_none());
    assert_eq!(try_lock(&setup), 0);
    let again = run(&setup, &[], &["unlock", &setup.name]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(text(&again.stdout).contains("not held"), "{again:?}");
}

/// `--hold-at-least 1h`: leaderd exits at once and the row holds the lock for the hour;
/// `unlock` cancels the hold (its process is gone), and the next run takes the lock.
async fn unlock_cancels_a_hold(backend: Backend) {
    let setup = Setup::new(backend);
    let held = run(
        &setup,
        &[],
        &["lock", "--hold-at-least", "1h", &setup.name, "true"],
    );
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    assert_eq!(try_lock(&setup), HELD);
    let unlocked = run(&setup, &[], &["unlock", &setup.name]);
    assert_eq!(unlocked.status.code(), Some(0), "{unlocked:?}");
    assert_eq!(try_lock(&setup), 0);
}

/// A holder that may still run is refused (7), the lock left held: one whose process runs
/// on this host, and one of another host (a hold written under another node id), which
/// this host cannot check. `--force` releases either; the running holder then stops its
/// command and exits 76 (lock lost), and the next run takes the lock.
async fn unlock_refuses_a_holder_that_may_run_unless_forced(backend: Backend) {
    let setup = Setup::new(backend);
    let mut running = setup.lock(&setup.db.url, &["--ttl", "3s"], &setup.job("60"));
    let started = wait_for_record(&setup.db.dir, "start").await;
    let refused = run(&setup, &[], &["unlock", &setup.name]);
    assert_eq!(refused.status.code(), Some(7), "{refused:?}");
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("still runs on this host"), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(try_lock(&setup), HELD);
    let forced = run(&setup, &[], &["unlock", "--force", &setup.name]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert!(text(&forced.stdout).contains("with --force"), "{forced:?}");
    assert_eq!(exit_code(&mut running, Duration::from_secs(10)).await, LOST);
    assert_gone(started.pid.unwrap()).await;

    let elsewhere = [("LEADERD_NODE__ID", "another-host")];
    let held = run(
        &setup,
        &elsewhere,
        &["lock", "--hold-at-least", "1h", &setup.name, "true"],
    );
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let refused = run(&setup, &[], &["unlock", &setup.name]);
    assert_eq!(refused.status.code(), Some(7), "{refused:?}");
    assert!(
        text(&refused.stderr).contains("another-host:"),
        "{refused:?}"
    );
    assert!(listed(&setup).unwrap()["holder_process"].is_null());
    assert_eq!(try_lock(&setup), HELD);
    let forced = run(&setup, &[], &["unlock", "--force", &setup.name]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert_eq!(try_lock(&setup), 0);
}

/// `resign --election lock:NAME` does not talk about `--force`: it points at `unlock`.
#[test]
fn resigning_a_lock_row_points_at_unlock() {
    let setup = Setup::new(Backend::Sqlite);
    let held = run(
        &setup,
        &[],
        &["lock", "--hold-at-least", "1h", &setup.name, "true"],
    );
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let row = format!("lock:{}", setup.name);
    for command in [&["resign"][..], &["handover", "--to", "x"]] {
        let output = run(
            &setup,
            &[],
            &[command, &["--election", row.as_str()]].concat(),
        );
        assert_eq!(output.status.code(), Some(2), "{command:?}: {output:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(&format!("leaderd unlock {}", setup.name)),
            "{stderr}"
        );
        assert!(!stderr.contains("`--force` resigns"), "{stderr}");
    }
}

backend_tests!(postgres = Backend::Postgres =>
    unlock_breaks_the_lock_of_a_killed_holder,
    unlock_cancels_a_hold,
    unlock_refuses_a_holder_that_may_run_unless_forced,
);
backend_tests!(mysql = Backend::Mysql =>
    unlock_breaks_the_lock_of_a_killed_holder,
    unlock_cancels_a_hold,
    unlock_refuses_a_holder_that_may_run_unless_forced,
);
backend_tests!(sqlite = Backend::Sqlite =>
    unlock_breaks_the_lock_of_a_killed_holder,
    unlock_cancels_a_hold,
    unlock_refuses_a_holder_that_may_run_unless_forced,
);
