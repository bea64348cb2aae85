//! The fence on a MariaDB Galera cluster (run by `galera.rs` on its cluster). A lock holds
//! on one member only, so there the fence also writes the election's row of
//! `leaderd_fence`, which every new term writes too (a trigger `leaderd migrate` creates on
//! Galera members): certification orders a fenced transaction and the next claim, on
//! whichever members they run, and aborts the later one when they overlap. Without the
//! trigger the fence refuses there.

use super::{WorkConnection, create_work_table};
use crate::support::mariadb::Mariadb;
use crate::support::{Backend, leaderd, lease, unique};
use leaderd::store::{
    DatabaseUrl, DbConnection, Fence, FenceError, LeaseStore, SqlStore, Timeouts,
};
use std::time::Duration;

fn store(url: &str) -> SqlStore {
    SqlStore::new(
        DatabaseUrl::parse(url).unwrap(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: Duration::from_secs(5),
        },
        true,
    )
}

/// Three members: a fenced transaction on member 0, the election's statements on 1 and 2.
pub async fn fence_across_members(members: &[Mariadb]) {
    members[0].sql("CREATE DATABASE fence");
    let url = |i: usize| members[i].url().replace("/test?", "/fence?");
    // A node's own migrations leave the trigger out: the fence refuses, saying why.
    let migrated = DbConnection::connect(
        &DatabaseUrl::parse(&url(0)).unwrap(),
        Duration::from_secs(5),
    )
    .await
    .unwrap()
    .migrate()
    .await;
    drop(migrated.unwrap());
    let name = unique("galera_fence");
    let mut old = store(&url(1));
    old.ensure_row(&name).await.unwrap();
    let start = old.get(&name).await.unwrap().unwrap().term;
    assert!(
        old.claim(&lease(&name, "a", Duration::from_secs(60), start))
            .await
            .unwrap()
            .is_some()
    );
    let term = old.get(&name).await.unwrap().unwrap().term;
    let mut work = WorkConnection::open(Backend::Mysql, &url(0)).await.unwrap();
    match work.fence(&Fence::new(&name, term)).await {
        Err(FenceError::NotInstalled { reason, .. }) => {
            assert!(reason.contains("no trigger leaderd_fence_term"), "{reason}")
        }
        other => panic!("the fence ran on Galera without its trigger: {other:?}"),
    }
    // `leaderd migrate` creates it (DDL in total order reaches every member).
    let migrate = leaderd()
        .arg("migrate")
        .env("LEADERD_DATABASE__URL", url(0))
        .env("LEADERD_LOG__LEVEL", "warn")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&migrate.stdout);
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(
        said.contains("created the trigger leaderd_fence_term"),
        "{said}"
    );
    for member in members {
        let triggers = member.sql(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS \
             WHERE TRIGGER_SCHEMA = 'fence' AND TRIGGER_NAME = 'leaderd_fence_term'",
        );
        assert_eq!(triggers, "1", "the fence's trigger on every member");
    }
    let table = unique("work");
    members[0].sql(&format!(
        "USE fence; {}",
        create_work_table(Backend::Mysql, &table)
    ));
    let insert = |node: &str, term: i64| {
        format!("INSERT INTO {table} (node, term, seq) VALUES ('{node}', {term}, 0)")
    };

    // A fenced transaction open on member 0 when the next term starts on member 2 (a
    // handover): it does not commit.
    let mut work = WorkConnection::open(Backend::Mysql, &url(0)).await.unwrap();
    work.exec("BEGIN").await.unwrap();
    work.exec(&insert("first", term)).await.unwrap();
    work.fence(&Fence::new(&name, term)).await.unwrap();
    assert!(
        old.release(&lease(&name, "a", Duration::from_secs(60), term))
            .await
            .unwrap()
    );
    let mut next = store(&url(2));
    assert!(
        next.claim(&lease(&name, "b", Duration::from_secs(60), term))
            .await
            .unwrap()
            .is_some()
    );
    let next_term = next.get(&name).await.unwrap().unwrap().term;
    let committed = work.exec("COMMIT").await;
    assert!(
        committed.is_err(),
        "a write fenced in term {term} committed after term {next_term} began"
    );

    // A claim open on member 2 when a fenced transaction commits on member 0: both write
    // the fence's row, so certification lets the first through and aborts the other. The
    // work reads after member 0 has applied the new term (otherwise its fence refuses a
    // term that member has not seen yet: it fails closed).
    let mut work = WorkConnection::open(Backend::Mysql, &url(0)).await.unwrap();
    work.exec("SET SESSION wsrep_sync_wait = 1").await.unwrap();
    work.exec("BEGIN").await.unwrap();
    work.exec(&insert("second", next_term)).await.unwrap();
    work.fence(&Fence::new(&name, next_term)).await.unwrap();
    let mut claim = WorkConnection::open(Backend::Mysql, &url(2)).await.unwrap();
    claim.exec("BEGIN").await.unwrap();
    claim
        .exec(&format!(
            "UPDATE service_leader_lock SET term = term + 1, container_id = 'c' WHERE name = '{name}'"
        ))
        .await
        .unwrap();
    work.exec("COMMIT").await.unwrap();
    let claimed = claim.exec("COMMIT").await;
    assert!(
        claimed.is_err(),
        "a claim certified after a fenced commit it overlapped"
    );

    let mut check = WorkConnection::open(Backend::Mysql, &url(1)).await.unwrap();
    check.exec("SET SESSION wsrep_sync_wait = 1").await.unwrap();
    let rows = |node: &str| format!("SELECT COUNT(*) AS n FROM {table} WHERE node = '{node}'");
    assert_eq!(check.number(&rows("first")).await.unwrap(), 0);
    assert_eq!(check.number(&rows("second")).await.unwrap(), 1);
    let held = check
        .number(&format!(
            "SELECT term AS n FROM service_leader_lock WHERE name = '{name}'"
        ))
        .await
        .unwrap();
    assert_eq!(held, next_term, "the overlapping claim did not take effect");
}
