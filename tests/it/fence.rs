//! The fence for leader work (docs/fencing.md) on the real PostgreSQL, MariaDB and SQLite:
//! what it refuses and the lock it holds, statement by statement (`store`); leader work
//! in processes of its own writing through it while nodes, work and connections are
//! broken, judged by commit order, with the fence and without (`jepsen`, its loop in
//! `worker`); the statement handed to hooks and `leaderd lock` (`handed_out`); the
//! examples of docs/fencing.md, each run (`docs`); and the fence across the members of a
//! Galera cluster (`galera`, run by `galera.rs` on its cluster).

use crate::support as common;

use common::{Backend, TestDb};
use diesel::result::QueryResult;
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, AsyncPgConnection};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use leaderd::store::{Fence, FenceError};

mod docs;
pub mod galera;
mod handed_out;
mod jepsen;
mod review;
mod store;
mod worker;

/// A connection of leader work's own, as a program would hold one.
#[allow(clippy::large_enum_variant)]
pub enum WorkConnection {
    Postgres(AsyncPgConnection),
    Mysql(AsyncMysqlConnection),
    Sqlite(SyncConnectionWrapper<diesel::SqliteConnection>),
}

impl WorkConnection {
    pub async fn open(backend: Backend, url: &str) -> QueryResult<WorkConnection> {
        let failed = |e: diesel::ConnectionError| {
            diesel::result::Error::QueryBuilderError(e.to_string().into())
        };
        Ok(match backend {
            Backend::Postgres => {
                WorkConnection::Postgres(AsyncPgConnection::establish(url).await.map_err(failed)?)
            }
            Backend::Mysql => {
                WorkConnection::Mysql(AsyncMysqlConnection::establish(url).await.map_err(failed)?)
            }
            Backend::Sqlite => {
                let path = url.strip_prefix("sqlite://").unwrap_or(url);
                let mut c = SyncConnectionWrapper::<diesel::SqliteConnection>::establish(path)
                    .await
                    .map_err(failed)?;
                c.batch_execute("PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL")
                    .await?;
                WorkConnection::Sqlite(c)
            }
        })
    }

    pub async fn exec(&mut self, sql: &str) -> QueryResult<()> {
        match self {
            WorkConnection::Postgres(c) => c.batch_execute(sql).await,
            WorkConnection::Mysql(c) => c.batch_execute(sql).await,
            WorkConnection::Sqlite(c) => c.batch_execute(sql).await,
        }
    }

    /// The fence through the library's diesel-async helper.
    pub async fn fence(&mut self, fence: &Fence) -> Result<(), FenceError> {
        match self {
            WorkConnection::Postgres(c) => fence.check(c).await,
            WorkConnection::Mysql(c) => fence.check(c).await,
            WorkConnection::Sqlite(c) => fence.check(c).await,
        }
    }

    /// One BIGINT of the first row `sql` returns, in a column named `n`.
    pub async fn number(&mut self, sql: &str) -> QueryResult<i64> {
        #[derive(diesel::QueryableByName)]
        struct Number {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let query = diesel::sql_query(sql);
        let row: Number = match self {
            WorkConnection::Postgres(c) => query.get_result(c).await?,
            WorkConnection::Mysql(c) => query.get_result(c).await?,
            WorkConnection::Sqlite(c) => query.get_result(c).await?,
        };
        Ok(row.n)
    }
}

/// A connection to `db` for leader work.
pub async fn work_connection(db: &TestDb) -> WorkConnection {
    WorkConnection::open(db.backend, &db.url).await.unwrap()
}

/// The table leader work writes in these tests: a row per transaction.
pub fn create_work_table(backend: Backend, table: &str) -> String {
    match backend {
        Backend::Postgres => format!(
            "CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, node TEXT NOT NULL, \
             term BIGINT NOT NULL, seq BIGINT NOT NULL)"
        ),
        Backend::Mysql => format!(
            "CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
             node VARCHAR(40) NOT NULL, term BIGINT NOT NULL, seq BIGINT NOT NULL) ENGINE = InnoDB"
        ),
        Backend::Sqlite => format!(
            "CREATE TABLE {table} (id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, \
             term INTEGER NOT NULL, seq INTEGER NOT NULL)"
        ),
    }
}

/// The store's own backend type for `backend`.
pub fn store_backend(backend: Backend) -> leaderd::store::Backend {
    match backend {
        Backend::Postgres => leaderd::store::Backend::Postgres,
        Backend::Mysql => leaderd::store::Backend::Mysql,
        Backend::Sqlite => leaderd::store::Backend::Sqlite,
    }
}
