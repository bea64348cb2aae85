//! leaderd on a three-member MariaDB Galera cluster (`galera-4`, started by the test on
//! loopback ports), one node per member: first starts on a fresh database (every node
//! migrates at once: the migration lock is per member), wake-ups off (a follower holds one
//! connection, no side lock), SIGTERM handovers by polling, a SIGKILLed leader, and the
//! leader's member killed and restarted. Never two valid leaders, no term held by two
//! nodes, terms in order. Then the fence for leader work across members (`fence::galera`).

use crate::support as common;

use common::mariadb::{GALERA_PROVIDER, Mariadb, low_port};
use common::{
    Backend, Node, NodeSettings, Sampler, TestDb, agreed_leader, unique, wait_agreed,
    wait_new_leader,
};
use nix::sys::signal::Signal;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Three members, up and in one primary component.
fn start_cluster(root: &std::path::Path) -> Vec<Mariadb> {
    let mut ports = BTreeSet::new();
    while ports.len() < 9 {
        ports.insert(low_port());
    }
    let ports: Vec<u16> = ports.into_iter().collect();
    let group: Vec<u16> = ports[0..3].to_vec();
    let mut members: Vec<Mariadb> = (0..3)
        .map(|i| Mariadb::galera_member(root, i, &group, (group[i], ports[3 + i], ports[6 + i])))
        .collect();
    members[0].start(&["--wsrep-new-cluster"]);
    members[1].start(&[]);
    members[2].start(&[]);
    wait_cluster_size(&members[0], 3, Duration::from_secs(60));
    members
}

fn wait_cluster_size(member: &Mariadb, size: usize, limit: Duration) {
    let give_up = Instant::now() + limit;
    loop {
        let seen = member
            .try_sql("SHOW STATUS LIKE 'wsrep_cluster_size'")
            .unwrap_or_default();
        if seen.split_whitespace().nth(1) == Some(&size.to_string()) {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "cluster size {seen:?}, not {size}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A member's URL for database `name`.
fn url(member: &Mariadb, name: &str) -> String {
    member.url().replace("/test?", &format!("/{name}?"))
}

/// The median of some durations.
fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_on_three_galera_members() {
    assert!(
        std::path::Path::new(GALERA_PROVIDER).exists(),
        "galera-4 is installed (scripts/test.sh installs it)"
    );
    let started = Instant::now();
    let root = std::env::temp_dir().join(unique("leaderd_galera"));
    std::fs::create_dir_all(&root).unwrap();
    let mut members = start_cluster(&root);
    let cluster_up = started.elapsed();
    let scratch = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::default();

    // First starts: three nodes at once, one per member, on a database nothing has
    // migrated. Each must elect; none may stay stuck on a half-applied migration.
    let mut first_starts = Vec::new();
    for round in 0..5 {
        let name = format!("first{round}");
        members[0].sql(&format!("CREATE DATABASE {name}"));
        let settings = NodeSettings {
            election: unique("first"),
            ..NodeSettings::default()
        };
        let begun = Instant::now();
        let nodes: Vec<Node> = (0..3)
            .map(|i| {
                Node::start(
                    &scratch,
                    &settings,
                    &format!("f{round}{i}"),
                    &url(&members[i], &name),
                )
            })
            .collect();
        let all: Vec<&Node> = nodes.iter().collect();
        let mut sampler = Sampler::new();
        wait_agreed(&mut sampler, &all).await;
        first_starts.push(begun.elapsed());
        let versions = members[(round + 1) % 3].sql(&format!(
            "SELECT COUNT(*) FROM {name}.__diesel_schema_migrations"
        ));
        let migrations =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/mysql"))
                .unwrap()
                .count();
        assert_eq!(
            versions,
            migrations.to_string(),
            "every migration recorded once"
        );
    }

    // The election the rest of the test runs.
    members[0].sql("CREATE DATABASE test");
    let urls: Vec<String> = members.iter().map(|m| url(m, "test")).collect();
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(&scratch, &settings, &format!("n{i}"), &urls[i]))
        .collect();
    let mut sampler = Sampler::new();
    let (_, mut term) = wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;
    for node in &nodes {
        let log = node
            .wait_log(
                "wake-ups off: the server is a Galera member",
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(log.matches("wake-ups off").count(), 1, "{log}");
    }

    // No side lock: each node holds its election's connection alone between its member
    // records, and the cluster sees about one statement per node per round.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let questions = |m: &Mariadb| -> u64 {
        m.sql("SHOW GLOBAL STATUS LIKE 'Questions'")
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    let before: u64 = members.iter().map(questions).sum();
    let window = Instant::now();
    // Samples (of about 50) in which a node held more than one connection: a member
    // record's lasts milliseconds, a side lock's would last all along.
    let mut more = [0; 3];
    let mut samples = 0;
    while window.elapsed() < Duration::from_secs(5) {
        for (i, node) in nodes.iter().enumerate() {
            let addr = format!("127.0.0.1:{}", members[i].port).parse().unwrap();
            more[i] += usize::from(node.connections_to(addr) > 1);
        }
        samples += 1;
        sampler.sample(&nodes.iter().collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after: u64 = members.iter().map(questions).sum();
    let per_second = (after - before).saturating_sub(6) as f64 / window.elapsed().as_secs_f64();
    eprintln!("[measured] galera: {per_second:.1} statements/s for 3 idle nodes (interval 1 s)");
    assert!(
        more.iter().all(|&n| n * 4 < samples),
        "samples with a second connection, per node: {more:?} of {samples} (a side lock \
         would hold one all along)"
    );
    // Each node renews or reads once a second, and records itself in the members table
    // every 2 s on a connection opened for that record (its session settings, the upsert):
    // 16.8 a second for three nodes, measured; a busy loop would be hundreds.
    assert!(per_second < 25.0, "{per_second} statements/s");

    // SIGTERM handovers: polled, so within about one interval.
    let mut handovers = Vec::new();
    for _ in 0..4 {
        let all: Vec<&Node> = nodes.iter().collect();
        let (leader, now) = wait_agreed(&mut sampler, &all).await;
        let index = nodes.iter().position(|n| n.id == leader).unwrap();
        let stopped = Instant::now();
        nodes[index].signal(Signal::SIGTERM);
        let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
        (_, term) = wait_new_leader(&mut sampler, &others, now).await;
        handovers.push(stopped.elapsed());
        assert_eq!(
            nodes[index].wait_exit(Duration::from_secs(5)).await,
            Some(0)
        );
        sampler.sample(&nodes.iter().collect::<Vec<_>>());
        nodes[index] = Node::start(&scratch, &settings, &leader, &urls[index]);
    }
    let handover_p50 = median(handovers.clone());
    assert!(
        handover_p50 < settings.interval + Duration::from_millis(700),
        "{handovers:?}"
    );

    // A SIGKILLed leader: the lease lapses, a follower polls and claims.
    let (leader, now) = wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;
    let index = nodes.iter().position(|n| n.id == leader).unwrap();
    let killed = Instant::now();
    nodes[index].signal(Signal::SIGKILL);
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    wait_new_leader(&mut sampler, &others, now).await;
    let kill_gap = killed.elapsed();
    nodes[index].wait_exit(Duration::from_secs(5)).await;
    nodes[index] = Node::start(&scratch, &settings, &leader, &urls[index]);

    // The leader's member killed (kill -9) and restarted: the cluster stalls for about
    // evs.suspect_timeout, a node on a surviving member leads, and the restarted member's
    // node follows again.
    let (leader, now) = wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;
    let index = nodes.iter().position(|n| n.id == leader).unwrap();
    let member_killed = Instant::now();
    members[index].kill();
    let others: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let (_, after_kill) = sampler
        .until(
            &others,
            Duration::from_secs(30),
            "a leader on a surviving member",
            |s| agreed_leader(s).is_some_and(|(_, t)| t > now),
        )
        .await;
    let member_gap = member_killed.elapsed();
    let _ = after_kill;
    let position = members[index].recover_position();
    members[index].start(&[&format!("--wsrep-start-position={position}")]);
    wait_cluster_size(&members[(index + 1) % 3], 3, Duration::from_secs(60));
    let (_, last) = wait_agreed(&mut sampler, &nodes.iter().collect::<Vec<_>>()).await;
    assert!(last > now && last >= term);

    sampler.check_terms();
    let mut holders: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    for l in &sampler.leaderships {
        holders.entry(l.term).or_default().insert(&l.node_id);
    }
    assert!(
        holders.values().all(|ids| ids.len() == 1),
        "a term held by two nodes: {holders:?}"
    );
    eprintln!(
        "[measured] galera: cluster up in {cluster_up:?}; first starts (3 nodes, fresh \
         database) {first_starts:?}; SIGTERM handovers {handovers:?} (p50 {handover_p50:?}); \
         SIGKILLed leader replaced after {kill_gap:?}; leader's member killed: new leader \
         after {member_gap:?}; whole test {:?}",
        started.elapsed()
    );
    // The fence for leader work, across members (on this cluster rather than one more).
    crate::fence::galera::fence_across_members(&members).await;
    drop(nodes);
    drop(members);
    let _ = std::fs::remove_dir_all(&root);
}
