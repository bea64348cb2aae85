//! The MySQL server settings a claim's durability depends on, read once per process.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::{debug, warn};

use super::super::dialect::MYSQL_DURABILITY;

#[derive(QueryableByName)]
struct MysqlDurability {
    #[diesel(sql_type = Nullable<BigInt>)]
    flush_log: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    sync_binlog: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    log_bin: Option<i64>,
}

/// Whether this process has read the MySQL server's durability settings yet.
static MYSQL_DURABILITY_READ: AtomicBool = AtomicBool::new(false);

/// Reads, on the first MySQL connection of the process, the server settings a claim's
/// durability depends on, and warns once, naming them, when a commit acknowledged to a
/// node can be lost in a crash: `innodb_flush_log_at_trx_commit` other than 1 (the redo
/// log is written or flushed only about once a second), or `sync_binlog` other than 1
/// with the binary log on (a replica or a Galera member can get a transaction the crashed
/// server lost, or the reverse). Unlike PostgreSQL's `synchronous_commit`, neither can be
/// set for one transaction: they are the server's. A lost claim can hand the same term
/// out twice.
pub(super) async fn check_mysql_durability(conn: &mut AsyncMysqlConnection) {
    if MYSQL_DURABILITY_READ.swap(true, Ordering::Relaxed) {
        return;
    }
    let read: Result<Vec<MysqlDurability>, _> =
        diesel::sql_query(MYSQL_DURABILITY).load(conn).await;
    let Ok(Some(settings)) = read.map(|rows| rows.into_iter().next()) else {
        debug!("could not read innodb_flush_log_at_trx_commit and sync_binlog");
        return;
    };
    let mut lax = Vec::new();
    if settings.flush_log != Some(1) {
        lax.push(format!(
            "innodb_flush_log_at_trx_commit = {}",
            settings.flush_log.map_or("?".into(), |v| v.to_string())
        ));
    }
    if settings.log_bin == Some(1) && settings.sync_binlog != Some(1) {
        lax.push(format!(
            "sync_binlog = {} (the binary log is on)",
            settings.sync_binlog.map_or("?".into(), |v| v.to_string())
        ));
    }
    if !lax.is_empty() {
        warn!(
            settings = %lax.join(", "),
            "the MySQL server may lose a commit it acknowledged if it crashes: a claim lost \
             that way can hand the same term out twice; set innodb_flush_log_at_trx_commit = 1 \
             and sync_binlog = 1 on the server"
        );
    }
}
