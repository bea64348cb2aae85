//! PgBouncer in transaction mode in front of the shared PostgreSQL (a PgBouncer of the
//! test's own, on a free port, with fewer server connections than nodes so that they
//! share them): with `database.pooler = "transaction"` three real nodes migrate, elect
//! and hand over through it; without it, the failure is explained.
//!
//! Lines starting with `[measured]` report timings for the closing notes.

use crate::support as common;

use common::servers::PgBouncer;
use common::{
    Backend, Node, NodeSettings, Sampler, TestDb, agreed_leader, lease, wait_agreed,
    wait_new_leader,
};
use leaderd::store::{DatabaseUrl, Lease, LeaseStore, Pooler, ProcessToken, SqlStore, Timeouts};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

/// Server connections per database: one for the three nodes, so that whatever one node
/// leaves on it meets the others.
const POOL_SIZE: u32 = 1;

fn through(db: &TestDb, bouncer: &PgBouncer) -> String {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", bouncer.port).parse().unwrap();
    db.url_via(addr)
}

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_elect_and_hand_over_through_pgbouncer() {
    let db = TestDb::new(Backend::Postgres);
    let bouncer = PgBouncer::start(5432, "transaction", POOL_SIZE);
    let url = through(&db, &bouncer);
    let settings = NodeSettings::roomy();
    let pooled = [("LEADERD_DATABASE__POOLER", "transaction")];
    // All three migrate at once, through the pooler.
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|id| Node::start_with_env(&db, &settings, id, &url, &pooled))
        .collect();
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    sampler.watch(&all, Duration::from_secs(3)).await;
    assert_eq!(
        agreed_leader(&sampler.sample(&all)),
        Some((leader.clone(), term)),
        "a healthy leader keeps its term through the pooler"
    );

    let stopping = Instant::now();
    nodes
        .iter()
        .find(|n| n.id == leader)
        .unwrap()
        .signal(Signal::SIGTERM);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let (next, _) = wait_new_leader(&mut sampler, &others, term).await;
    eprintln!(
        "[measured] pgbouncer transaction mode: handover after SIGTERM {:?} (to {next})",
        stopping.elapsed()
    );
    sampler.watch(&others, Duration::from_secs(2)).await;
    // The old leader's last status file, which says when it stopped leading.
    let old = nodes.iter_mut().find(|n| n.id == leader).unwrap();
    assert_eq!(old.wait_exit(Duration::from_secs(5)).await, Some(0));
    let all: Vec<&Node> = nodes.iter().collect();
    sampler.sample(&all);
    sampler.check_terms();
    for node in &nodes {
        let log = node.log();
        assert!(
            !log.contains("prepared statement"),
            "{}: no prepared statement error through the pooler:\n{log}",
            node.id
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_pooler_without_the_setting_is_explained() {
    let db = TestDb::new(Backend::Postgres);
    let bouncer = PgBouncer::start(5432, "transaction", POOL_SIZE);
    let url = through(&db, &bouncer);
    // Migrated directly: the question here is the statements, not the migration lock.
    let migrated = common::leaderd()
        .arg("migrate")
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(migrated.status.success(), "{migrated:?}");
    let settings = NodeSettings::default();
    let unmigrated = [("LEADERD_DATABASE__MIGRATE", "false")];
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|id| Node::start_with_env(&db, &settings, id, &url, &unmigrated))
        .collect();
    let start = Instant::now();
    let explained = loop {
        if let Some(node) = nodes
            .iter()
            .find(|n| n.log().contains("set database.pooler = \"transaction\""))
        {
            break node.log();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no node explained the pooler: {}",
            nodes
                .iter()
                .map(Node::log)
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(explained.contains("pool_mode = transaction"), "{explained}");
}

/// Round trips of a read and a renewal, directly and through the pooler in transaction
/// mode (where each is BEGIN with SET LOCALs, prepare, execute, COMMIT).
#[tokio::test(flavor = "multi_thread")]
async fn measure_round_trips_through_pgbouncer() {
    let db = TestDb::new(Backend::Postgres);
    let bouncer = PgBouncer::start(5432, "transaction", POOL_SIZE);
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        query: Duration::from_secs(5),
    };
    let direct = DatabaseUrl::parse(&db.url).unwrap();
    let pooled = DatabaseUrl::parse(&through(&db, &bouncer))
        .unwrap()
        .with_pooler(Pooler::Transaction);
    for (what, url) in [("direct", direct), ("pgbouncer transaction", pooled)] {
        let mut store = SqlStore::new(url, timeouts, true);
        let name = common::unique("rt");
        let token = ProcessToken::random();
        store.ensure_row(&name).await.unwrap();
        let term = store
            .claim(&Lease {
                token,
                ..lease(&name, "me", Duration::from_secs(60), 0)
            })
            .await
            .unwrap()
            .expect("the free row is taken");
        let (mut reads, mut renews) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            let t = Instant::now();
            store.get(&name).await.unwrap();
            reads.push(t.elapsed());
            let t = Instant::now();
            assert!(
                store
                    .renew(&lease(&name, "me", Duration::from_secs(60), term))
                    .await
                    .unwrap()
            );
            renews.push(t.elapsed());
        }
        reads.sort();
        renews.sort();
        eprintln!(
            "[measured] {what}: read median {:?} p90 {:?}, renew median {:?} p90 {:?}",
            reads[100], reads[180], renews[100], renews[180]
        );
    }
}
