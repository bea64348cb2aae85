//! Claims are durable whatever the server's settings: on PostgreSQL a claim and a
//! reacquire commit with `synchronous_commit` on even where the database turns it off; on
//! MariaDB a node warns once, naming them, about settings that let a commit be lost.

use crate::support as common;

use common::mariadb::Mariadb;
use common::{Backend, Node, NodeSettings, Sampler, TestDb, lease, wait_agreed};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use leaderd::store::{DatabaseUrl, LeaseStore, SqlStore, Timeouts};
use std::time::Duration;

const TTL: Duration = Duration::from_millis(1200);

#[derive(QueryableByName, Debug, PartialEq)]
struct Noted {
    #[diesel(sql_type = BigInt)]
    term: i64,
    #[diesel(sql_type = Nullable<Text>)]
    holder: Option<String>,
    #[diesel(sql_type = Text)]
    setting: String,
}

/// A database whose `synchronous_commit` is off for every session: the claim and the
/// reacquire still commit with it on, read at commit time by a deferred trigger inside
/// their own transactions; a renewal keeps the database's setting (off), and a release
/// turns it off itself. The role's and the server's settings work the same way.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_claims_commit_synchronously_where_the_database_says_off() {
    let db = TestDb::new(Backend::Postgres);
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let mut admin = AsyncPgConnection::establish(&db.url).await.unwrap();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .await
        .unwrap();
    let mut store = SqlStore::new(
        DatabaseUrl::parse(&db.url).unwrap(),
        Timeouts {
            connect: Duration::from_secs(2),
            query: TTL,
        },
        true,
    );
    store.ensure_row("e").await.unwrap();
    // Read at commit: a deferred constraint trigger runs inside the transaction, after
    // the statement, as the commit begins.
    admin
        .batch_execute(
            "CREATE TABLE noted (term BIGINT, holder TEXT, setting TEXT, at SERIAL);
             CREATE FUNCTION note_setting() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO noted (term, holder, setting)
                     VALUES (NEW.term, NEW.container_id, current_setting('synchronous_commit'));
                 RETURN NULL;
             END $$;
             CREATE CONSTRAINT TRIGGER note_setting AFTER UPDATE ON service_leader_lock
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION note_setting();",
        )
        .await
        .unwrap();
    // One process: its reacquire marks the term with the claim's token.
    let a = lease("e", "a", TTL, 0);
    let t1 = store.claim(&a).await.unwrap().unwrap();
    assert!(store.renew(&a.in_term(t1)).await.unwrap());
    let t2 = store.reacquire(&a.in_term(t1)).await.unwrap().unwrap();
    assert!(store.release(&a.in_term(t2)).await.unwrap());
    let noted: Vec<Noted> =
        diesel::sql_query("SELECT term, holder, setting FROM noted ORDER BY at")
            .load(&mut admin)
            .await
            .unwrap();
    let noted: Vec<(i64, Option<&str>, &str)> = noted
        .iter()
        .map(|n| (n.term, n.holder.as_deref(), n.setting.as_str()))
        .collect();
    assert_eq!(
        noted,
        [
            (t1, Some("a"), "on"),  // the claim
            (t1, Some("a"), "off"), // the renewal: the database's setting
            (t2, Some("a"), "on"),  // the reacquire
            (t2, None, "off"),      // the release
        ]
    );
}

/// A MariaDB that may lose acknowledged commits in a crash (redo log flushed about once a
/// second, binary log on and not synced): a node warns once, naming both settings, and
/// still elects. A node on the shared server (both safe) does not warn.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_settings_that_can_lose_a_claim_are_warned_about_once() {
    let server = Mariadb::single(&[
        "--innodb-flush-log-at-trx-commit=2",
        "--log-bin",
        "--sync-binlog=0",
        "--server-id=1",
    ]);
    let scratch = TestDb::new(Backend::Sqlite);
    let settings = NodeSettings::default();
    let lax = Node::start(&scratch, &settings, "lax", &server.url());
    let mut sampler = Sampler::new();
    wait_agreed(&mut sampler, &[&lax]).await;
    let log = lax
        .wait_log(
            "innodb_flush_log_at_trx_commit = 2",
            Duration::from_secs(10),
        )
        .await;
    assert!(log.contains("sync_binlog = 0"), "{log}");
    // Once per process (a lost connection reads the settings no more).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = lax.log();
    assert_eq!(
        log.matches("innodb_flush_log_at_trx_commit = 2").count(),
        1,
        "{log}"
    );

    let db = TestDb::new(Backend::Mysql);
    let safe = Node::start(&db, &settings, "safe", &db.url);
    let mut sampler = Sampler::new();
    wait_agreed(&mut sampler, &[&safe]).await;
    assert!(!safe.log().contains("innodb_flush_log_at_trx_commit"));
}
