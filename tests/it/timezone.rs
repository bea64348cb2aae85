//! MySQL lease times are DATETIME(6) compared with NOW(6), which follows the session's
//! time zone: every connection that writes or compares them must run in UTC whatever the
//! server's zone. Nodes here run on a MariaDB of the test's own whose global zone is
//! +01:00 (the shared server is left alone).

use crate::support as common;

use common::mariadb::Mariadb;
use common::{Backend, Node, NodeSettings, Sampler, TestDb, leaderd, wait_agreed, wait_new_leader};
use nix::sys::signal::Signal;
use std::time::Duration;

/// Renewals (the row's lease start is UTC), reads (no follower claims a live lease: the
/// term holds), `leaderd status` (it sees the leader live), and a release followed by a
/// claim (a SIGTERM handover), all on a server an hour east of UTC. A connection left in
/// the server's zone would write or read the lease an hour off.
#[tokio::test(flavor = "multi_thread")]
async fn leases_are_compared_in_utc_whatever_the_servers_zone() {
    let server = Mariadb::single(&["--default-time-zone=+01:00"]);
    assert_eq!(server.sql("SELECT @@GLOBAL.time_zone"), "+01:00");
    let scratch = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::roomy();
    let url = server.url();
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|id| Node::start(&scratch, &settings, id, &url))
        .collect();
    let mut sampler = Sampler::new();
    let all: Vec<&Node> = nodes.iter().collect();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;

    // The lease start, against the server's UTC clock (zone-free), in microseconds.
    let behind = server.sql(&format!(
        "SELECT TIMESTAMPDIFF(MICROSECOND, `timestamp`, UTC_TIMESTAMP(6))
         FROM test.service_leader_lock WHERE name = '{}'",
        settings.election
    ));
    let behind: i64 = behind.parse().unwrap();
    assert!(
        (0..3_000_000).contains(&behind),
        "the lease started {behind} µs before the server's UTC time"
    );

    sampler.watch(&all, Duration::from_secs(3)).await;
    let statuses = sampler.sample(&all);
    assert_eq!(
        common::agreed_leader(&statuses),
        Some((leader.clone(), term)),
        "the same leader and term after 3 s"
    );

    let output = leaderd()
        .args(["status", "--json"])
        .env("LEADERD_DATABASE__URL", &url)
        .env("LEADERD_ELECTION__NAME", &settings.election)
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(status["leader"], leader.as_str(), "{status}");

    let index = nodes.iter().position(|n| n.id == leader).unwrap();
    nodes[index].signal(Signal::SIGTERM);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let (_, next) = wait_new_leader(&mut sampler, &others, term).await;
    assert!(next > term);
    assert_eq!(
        nodes[index].wait_exit(Duration::from_secs(5)).await,
        Some(0)
    );
    // Its last word (stepped down), then every term in order.
    sampler.sample(&nodes.iter().collect::<Vec<_>>());
    sampler.check_terms();
}
