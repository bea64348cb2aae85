//! Migrations that converge whatever happened half-way: a migration applied but not
//! recorded (MySQL's DDL commits on its own, before the record) runs again harmlessly, and
//! a record that fails leaves the next run to finish the job. The Galera first start, with
//! nodes migrating at once on different members, is in `galera.rs`.

use crate::support as common;

use common::{Backend, Node, NodeSettings, Sampler, TestDb, wait_agreed};
use diesel_async::SimpleAsyncConnection;
use leaderd::store::{DatabaseUrl, DbConnection};
use std::time::Duration;

const TTL: Duration = Duration::from_millis(1200);

/// The newest migration's version, as diesel records it (its directory's date, digits only).
const NEWEST: &str = "20261126000000";

async fn connect(db: &TestDb) -> DbConnection {
    DbConnection::connect(&DatabaseUrl::parse(&db.url).unwrap(), TTL)
        .await
        .unwrap()
}

async fn execute(conn: &mut DbConnection, sql: &str) {
    match conn {
        DbConnection::Postgres(c) => c.batch_execute(sql).await,
        DbConnection::Mysql(c) => c.batch_execute(sql).await,
        DbConnection::Sqlite(c) => c.batch_execute(sql).await,
    }
    .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// Whether the newest migration's columns are there (a statement naming them runs).
async fn has_newest_columns(conn: &mut DbConnection) -> bool {
    let sql = "SELECT taken_at, taken_term FROM service_leader_lock WHERE 1 = 0";
    match conn {
        DbConnection::Postgres(c) => c.batch_execute(sql).await,
        DbConnection::Mysql(c) => c.batch_execute(sql).await,
        DbConnection::Sqlite(c) => c.batch_execute(sql).await,
    }
    .is_ok()
}

/// Starts three nodes on `db` and waits until they agree on a leader.
async fn three_nodes_elect(db: &TestDb) {
    let settings = NodeSettings::default();
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|id| Node::start(db, &settings, id, &db.url))
        .collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &refs).await;
    assert!(term >= 1, "{leader} leads term {term}");
    for node in &nodes {
        assert!(
            !node.log().contains("migrations failed"),
            "{}: {}",
            node.id,
            node.log()
        );
    }
}

/// The state a crash between a MySQL migration's DDL and its version record leaves, made
/// by deleting the records of every migration after the first: a node that starts on it
/// runs those migrations again, which find their columns there, and elects. (Before the
/// migrations could run again, every round failed on "Duplicate column name" forever.)
/// PostgreSQL runs each migration and its record in one transaction, so the state arises
/// there only by hand; its migrations converge from it as well.
async fn an_applied_but_unrecorded_migration_runs_again(backend: Backend) {
    let db = TestDb::new(backend);
    let mut conn = connect(&db).await.migrate().await.unwrap();
    execute(
        &mut conn,
        "DELETE FROM __diesel_schema_migrations WHERE version > '20261122000000'",
    )
    .await;
    three_nodes_elect(&db).await;
    let mut conn = connect(&db).await;
    assert!(has_newest_columns(&mut conn).await);
    // Recorded again: a second run applies nothing.
    connect(&db).await.migrate().await.unwrap();
}

/// A version record that fails after its migration ran (a crash, a lost connection, a
/// Galera member aborting it), made with a trigger that refuses the newest record. On
/// MySQL the migration's DDL has committed by then (half-applied); on PostgreSQL and
/// SQLite it is undone with the record. Either way the next run, once records go through
/// again, completes the schema and the nodes elect.
async fn a_failed_record_is_written_by_the_next_run(backend: Backend) {
    let db = TestDb::new(backend);
    let mut conn = connect(&db).await;
    let refuse = match backend {
        Backend::Postgres => format!(
            "CREATE TABLE __diesel_schema_migrations (
                 version VARCHAR(50) PRIMARY KEY NOT NULL,
                 run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
             CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.version = '{NEWEST}' THEN RAISE EXCEPTION 'lost before the record'; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_record BEFORE INSERT ON __diesel_schema_migrations
                 FOR EACH ROW EXECUTE FUNCTION refuse_record()"
        ),
        Backend::Mysql => format!(
            "CREATE TABLE __diesel_schema_migrations (
                 version VARCHAR(50) PRIMARY KEY NOT NULL,
                 run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
             CREATE TRIGGER refuse_record BEFORE INSERT ON __diesel_schema_migrations
                 FOR EACH ROW BEGIN
                     IF NEW.version = '{NEWEST}' THEN
                         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lost before the record';
                     END IF;
                 END"
        ),
        Backend::Sqlite => format!(
            "CREATE TABLE __diesel_schema_migrations (
                 version VARCHAR(50) PRIMARY KEY NOT NULL,
                 run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
             CREATE TRIGGER refuse_record BEFORE INSERT ON __diesel_schema_migrations
                 WHEN NEW.version = '{NEWEST}'
                 BEGIN SELECT RAISE(ABORT, 'lost before the record'); END"
        ),
    };
    execute(&mut conn, &refuse).await;
    let error = connect(&db).await.migrate().await.err().expect("refused");
    assert!(
        format!("{error:?}").contains("lost before the record"),
        "{error:?}"
    );
    // Half-applied on MySQL only.
    assert_eq!(
        has_newest_columns(&mut conn).await,
        backend == Backend::Mysql
    );
    let drop = match backend {
        Backend::Postgres => "DROP TRIGGER refuse_record ON __diesel_schema_migrations",
        _ => "DROP TRIGGER refuse_record",
    };
    execute(&mut conn, drop).await;
    three_nodes_elect(&db).await;
    assert!(has_newest_columns(&mut conn).await);
}

backend_tests!(postgres = Backend::Postgres => an_applied_but_unrecorded_migration_runs_again, a_failed_record_is_written_by_the_next_run);
backend_tests!(mysql = Backend::Mysql => an_applied_but_unrecorded_migration_runs_again, a_failed_record_is_written_by_the_next_run);
backend_tests!(sqlite = Backend::Sqlite => a_failed_record_is_written_by_the_next_run);
