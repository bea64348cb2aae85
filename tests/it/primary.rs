//! A PostgreSQL primary that moves: three real nodes on a multi-host URL with
//! `target_session_attrs=read-write`, in front of a primary of the test's own and a
//! streaming standby made with `pg_basebackup -R`. The primary goes away (or turns
//! read-only) and the standby is promoted; the nodes must follow it to a leader again,
//! and never show two valid leaders (status files, sampled throughout).
//!
//! Lines starting with `[measured]` report timings for the closing notes; the assertions
//! only check generous bounds.

use crate::support as common;

use common::servers::{PgInstance, psql};
use common::{Node, NodeSettings, Sampler, StatusFile, TestDb, agreed_leader, wait_agreed};
use std::time::{Duration, Instant, SystemTime};

/// How long the nodes may take to agree on a leader on the promoted standby, on a loaded
/// machine: ttl + interval plus a reconnection, and a lot of slack.
const RECOVERY_LIMIT: Duration = Duration::from_secs(20);

struct Setup {
    primary: PgInstance,
    standby: PgInstance,
    /// Scratch directory for the nodes (its SQLite URL is unused).
    scratch: TestDb,
    nodes: Vec<Node>,
    sampler: Sampler,
}

impl Setup {
    async fn start() -> Setup {
        let primary = PgInstance::primary();
        let standby = PgInstance::standby_of(&primary);
        let url = format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            primary.port, standby.port
        );
        let scratch = TestDb::new(common::Backend::Sqlite);
        let settings = NodeSettings::roomy();
        let nodes: Vec<Node> = ["a", "b", "c"]
            .iter()
            .map(|id| Node::start(&scratch, &settings, id, &url))
            .collect();
        let mut sampler = Sampler::new();
        let all: Vec<&Node> = nodes.iter().collect();
        wait_agreed(&mut sampler, &all).await;
        // The row, and a few renewals, are on the standby too.
        standby.wait_caught_up(&primary);
        Setup {
            primary,
            standby,
            scratch,
            nodes,
            sampler,
        }
    }

    /// Samples until the nodes agree on a leader that renewed after `after`; returns how
    /// long that took.
    async fn leader_again(&mut self, after: SystemTime) -> (String, i64, Duration) {
        let all: Vec<&Node> = self.nodes.iter().collect();
        let (statuses, took) = self
            .sampler
            .until(&all, RECOVERY_LIMIT, "a leader on the new primary", |s| {
                agreed_leader(s).is_some()
                    && s.iter()
                        .flatten()
                        .any(|s: &StatusFile| s.is_leader() && s.updated_at > after)
            })
            .await;
        let (leader, term) = agreed_leader(&statuses).unwrap();
        (leader, term, took)
    }

    /// Waits until the lease row on the promoted standby was written after `after` (a
    /// renewal or claim there); returns when, measured from `since`.
    fn written_on_new_primary(&self, after: SystemTime, since: Instant) -> Duration {
        let after = after
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let query = format!(
            "SELECT coalesce(max(extract(epoch FROM \"timestamp\")) > {after}, false) \
             FROM service_leader_lock"
        );
        while psql(self.standby.port, &query) != "t" {
            assert!(
                since.elapsed() < RECOVERY_LIMIT,
                "no write on the new primary"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        since.elapsed()
    }
}

/// The primary crashes; ttl + interval later (a failover manager's reaction) the standby is
/// promoted. Replication is asynchronous, so the standby may lack the last renewal: a
/// promotion sooner than one ttl after it could let a follower take over while the leader
/// still believes it leads (docs/scaling-and-databases.md), which this test stays clear of.
#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_standby_gets_a_leader_again() {
    let mut setup = Setup::start().await;
    let stopped = Instant::now();
    setup.primary.stop("immediate");
    let all: Vec<&Node> = setup.nodes.iter().collect();
    let settings = NodeSettings::roomy();
    setup
        .sampler
        .watch(&all, settings.ttl + settings.interval)
        .await;
    let promoting = Instant::now();
    let promoted_at = SystemTime::now();
    setup.standby.promote();
    let promote_took = promoting.elapsed();
    let written = setup.written_on_new_primary(promoted_at, promoting);
    let (leader, term, _) = setup.leader_again(promoted_at).await;
    eprintln!(
        "[measured] failover: first lease write on the new primary {written:?} after \
         `pg_ctl promote` was called (which took {promote_took:?}); leader {leader} \
         (term {term}) agreed {:?} after it, {:?} after the primary stopped",
        promoting.elapsed(),
        stopped.elapsed(),
    );
    let all: Vec<&Node> = setup.nodes.iter().collect();
    setup.sampler.watch(&all, Duration::from_secs(2)).await;
    setup.sampler.check_terms();
    drop(setup.scratch);
}

/// A switchover: the old primary is made read-only while it still runs (connections on it
/// now fail with "cannot execute UPDATE in a read-only transaction"), the standby catches
/// up and is promoted, and the old primary stays first in the URL. The nodes must drop their
/// connections to it and find the new primary.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_old_primary_is_left_for_the_new_one() {
    let mut setup = Setup::start().await;
    let switched_at = SystemTime::now();
    let switching = Instant::now();
    psql(
        setup.primary.port,
        "ALTER SYSTEM SET default_transaction_read_only = on",
    );
    psql(setup.primary.port, "SELECT pg_reload_conf()");
    setup.standby.wait_caught_up(&setup.primary);
    setup.standby.promote();
    let promoted = switching.elapsed();
    let written = setup.written_on_new_primary(switched_at, switching);
    let (leader, term, _) = setup.leader_again(switched_at).await;
    eprintln!(
        "[measured] switchover: old primary read-only, standby caught up and promoted in \
         {promoted:?}; first lease write on the new primary {written:?} after the old one \
         turned read-only; leader {leader} (term {term})"
    );
    let all: Vec<&Node> = setup.nodes.iter().collect();
    setup.sampler.watch(&all, Duration::from_secs(2)).await;
    // Every node's connections now go to the new primary, none to the old one: its
    // election connection at once (the members connection is opened for each record
    // every 10 s and closed after, so it may or may not be there).
    let sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leaderd'";
    let start = Instant::now();
    loop {
        let (on_new, on_old) = (
            psql(setup.standby.port, sessions),
            psql(setup.primary.port, sessions),
        );
        if on_new.parse::<u32>().is_ok_and(|n| n >= 3) && on_old == "0" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(25),
            "each node's election connection belongs on the new primary: {on_new} there, \
             {on_old} on the read-only old one"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    setup.sampler.check_terms();
    // The LISTEN connections, which nothing breaks, leave at their next check (every
    // 30 s), so releases wake the followers again.
    let listeners = "SELECT count(*) FROM pg_stat_activity \
                     WHERE application_name = 'leaderd listener'";
    let start = Instant::now();
    while psql(setup.standby.port, listeners) != "3" || psql(setup.primary.port, listeners) != "0" {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the listeners did not move to the new primary"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
