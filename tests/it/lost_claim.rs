//! A claim the database acknowledged and then lost: a PostgreSQL primary with an
//! asynchronous standby that replicates through the test's proxy. The proxy stalls, a
//! new term is claimed on the primary alone, the primary crashes, the proxy drops what it
//! held (so the standby never gets the claim), and the standby is promoted at once, as a
//! script would. The nodes, on a multi-host URL, carry on against the new primary.
//!
//! The term of the lost claim must never be issued again: the next claim takes
//! `GREATEST(term + 1, database clock in µs)`, and the lost term came from the same
//! clock, earlier. Two leaders for a moment cannot be ruled out on a database that
//! forgets what it acknowledged (docs/scaling-and-databases.md); the test records that
//! overlap (`[measured]`) rather than asserting it away.

use crate::support as common;

use common::proxy::{Mode, Proxy};
use common::servers::{PgInstance, psql};
use common::{Node, NodeSettings, StatusFile, TestDb};
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

/// How long the nodes may take to find a leader on the promoted standby, on a loaded
/// machine: the old lease's ttl, a reconnection, and a lot of slack.
const RECOVERY_LIMIT: Duration = Duration::from_secs(25);

/// Every leadership the status files showed, by (node, term).
#[derive(Default)]
struct Leaderships(BTreeMap<(String, i64), Leadership>);

#[derive(Clone, Copy)]
struct Leadership {
    since: SystemTime,
    /// The latest `valid_until` it claimed.
    valid_until: SystemTime,
    /// When its file first said something else (another term, or not leading).
    ended: Option<SystemTime>,
}

impl Leadership {
    /// The last instant a reader of the file could take it as leading.
    fn end(&self) -> SystemTime {
        self.ended
            .map_or(self.valid_until, |e| e.min(self.valid_until))
    }
}

impl Leaderships {
    fn sample(&mut self, nodes: &[&Node]) -> Vec<Option<StatusFile>> {
        let statuses: Vec<_> = nodes.iter().map(|n| n.status()).collect();
        for status in statuses.iter().flatten() {
            let term = status.term.filter(|_| status.is_leader());
            for ((node, t), open) in &mut self.0 {
                if *node == status.node_id && Some(*t) != term && open.ended.is_none() {
                    open.ended = Some(status.updated_at);
                }
            }
            if let Some(term) = term {
                let seen = self
                    .0
                    .entry((status.node_id.clone(), term))
                    .or_insert(Leadership {
                        since: status.since,
                        valid_until: status.valid_until,
                        ended: None,
                    });
                seen.valid_until = seen.valid_until.max(status.valid_until);
            }
        }
        statuses
    }

    /// Samples every few milliseconds until some node leads in a term `condition`
    /// accepts; returns that node and term.
    async fn until_leader(
        &mut self,
        nodes: &[&Node],
        what: &str,
        condition: impl Fn(&StatusFile) -> bool,
    ) -> (String, i64) {
        let start = Instant::now();
        loop {
            let statuses = self.sample(nodes);
            let leading = statuses
                .iter()
                .flatten()
                .find(|s| s.is_leader() && s.valid_until > SystemTime::now() && condition(s));
            if let Some(s) = leading {
                return (s.node_id.clone(), s.term.unwrap());
            }
            if start.elapsed() > RECOVERY_LIMIT {
                for node in nodes {
                    eprintln!("--- {} log:\n{}", node.id, node.log());
                }
                panic!("{what}: not within {RECOVERY_LIMIT:?}; statuses: {statuses:#?}");
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_claim_is_never_issued_again() {
    let primary = PgInstance::primary();
    let replication = Proxy::start(([127, 0, 0, 1], primary.port).into()).await;
    let mut standby = PgInstance::standby_via(replication.addr.port());
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
    let mut seen = Leaderships::default();
    let all: Vec<&Node> = nodes.iter().collect();
    let (first, first_term) = seen.until_leader(&all, "a first leader", |_| true).await;
    standby.wait_caught_up(&primary);

    // From here the standby gets nothing. The leader steps down; another node claims the
    // next term on the primary alone, and the primary acknowledges it.
    replication.set(Mode::Stall);
    let leader_index = nodes.iter().position(|n| n.id == first).unwrap();
    nodes[leader_index].signal(Signal::SIGTERM);
    let (lost_leader, lost_term) = seen
        .until_leader(&all, "a claim on the primary alone", |s| {
            s.term > Some(first_term)
        })
        .await;
    let lost_at = Instant::now();

    // The primary crashes with the claim unsent, and the standby is promoted at once.
    primary_crashes(primary, &replication);
    let promoted_at = SystemTime::now();
    standby.promote();
    let promoted_after = lost_at.elapsed();
    let row_term = psql(
        standby.port,
        &format!(
            "SELECT term FROM service_leader_lock WHERE name = '{}'",
            settings.election
        ),
    );
    assert_eq!(
        row_term.parse::<i64>().unwrap(),
        first_term,
        "the promoted standby must lack the claim of term {lost_term}, or the test proves nothing"
    );

    // The nodes that still run find a leader on the new primary, in a term above the lost
    // one, however soon after it the promotion came.
    let running: Vec<&Node> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader_index)
        .map(|(_, n)| n)
        .collect();
    let (next_leader, next_term) = seen
        .until_leader(&running, "a leader on the promoted standby", |s| {
            s.since > promoted_at
        })
        .await;
    assert!(
        next_term > lost_term,
        "the lost claim's term {lost_term} (by {lost_leader}) was followed by term \
         {next_term} (by {next_leader}): a term below or equal to a lost one can repeat it"
    );
    // Watch a little longer: no term is ever led by two nodes.
    let watch_end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_end {
        seen.sample(&running);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let mut holders: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for (node, term) in seen.0.keys() {
        holders.entry(*term).or_default().push(node);
    }
    for (term, nodes) in &holders {
        assert_eq!(nodes.len(), 1, "term {term} was led by {nodes:?}");
    }

    // The overlap a lost claim allows: the lost leader's file may say it leads after the
    // next leader, on another node, has started (on one node the new term replaces it).
    let lost = seen.0[&(lost_leader.clone(), lost_term)];
    let next = seen.0[&(next_leader.clone(), next_term)];
    let overlap = if lost_leader == next_leader {
        Duration::ZERO
    } else {
        lost.end().duration_since(next.since).unwrap_or_default()
    };
    eprintln!(
        "[measured] lost claim: term {lost_term} by {lost_leader} lost; standby promoted \
         {promoted_after:?} after the claim; next term {next_term} by {next_leader}, {} µs \
         above; two leaders by their status files for {overlap:?}",
        next_term - lost_term
    );
    standby.stop("fast");
    drop(nodes);
    drop(scratch);
}

/// The primary stops as in a crash, and the replication proxy closes while it still
/// holds what the primary sent: SIGCONT-ing it first would flush that WAL to the standby.
fn primary_crashes(mut primary: PgInstance, replication: &Proxy) {
    primary.stop("immediate");
    replication.set(Mode::Drop);
}
