//! MySQL's side lock: `GET_LOCK` on a side connection of its own.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;

use super::side_lock::{SideLock, WAIT};
use crate::store::DatabaseUrl;
use crate::store::dialect::{
    MYSQL_WAKE_GIVE_BACK, MYSQL_WAKE_TAKE, MYSQL_WSREP_ON, Param, Statement,
};

#[derive(QueryableByName)]
struct WsrepOn {
    #[diesel(sql_type = Nullable<BigInt>)]
    wsrep_on: Option<i64>,
}

#[derive(QueryableByName)]
struct Taken {
    #[diesel(sql_type = Nullable<BigInt>)]
    taken: Option<i64>,
}

/// `GET_LOCK` on a side connection of its own.
pub(super) struct MysqlLock {
    pub(super) url: Arc<DatabaseUrl>,
    pub(super) connect_timeout: Duration,
    pub(super) name: String,
    pub(super) conn: Option<AsyncMysqlConnection>,
}

impl MysqlLock {
    async fn connection(&mut self) -> Result<&mut AsyncMysqlConnection, String> {
        if self.conn.is_none() {
            let mut conn = match timeout(
                self.connect_timeout,
                crate::store::tls::connect_mysql(&self.url),
            )
            .await
            {
                Ok(Ok(conn)) => conn,
                Ok(Err(error)) => return Err(format!("cannot connect: {error}")),
                Err(_) => return Err("connecting timed out".to_owned()),
            };
            // A server-wide statement limit would cut the waits short (MySQL has no such
            // setting, and bounds no GET_LOCK).
            let _ = conn
                .batch_execute("SET SESSION max_statement_time = 0")
                .await;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    async fn get_lock(&mut self, wait: Duration) -> Result<bool, String> {
        let bound = wait + self.connect_timeout;
        let name = self.name.clone();
        let conn = self.connection().await?;
        let statement = Statement::new(
            MYSQL_WAKE_TAKE,
            vec![Param::Text(&name), Param::BigInt(wait.as_secs() as i64)],
        );
        let answer: Result<Vec<Taken>, _> = match timeout(bound, statement.load(conn)).await {
            Ok(answer) => answer,
            Err(_) => {
                self.conn = None;
                return Err("GET_LOCK did not answer".to_owned());
            }
        };
        match answer.as_deref() {
            Ok([Taken { taken: Some(1) }]) => Ok(true),
            Ok(_) => Ok(false),
            Err(error) => {
                self.conn = None;
                Err(format!("GET_LOCK failed: {error}"))
            }
        }
    }
}

impl SideLock for MysqlLock {
    async fn try_take(&mut self) -> Result<bool, String> {
        self.get_lock(Duration::ZERO).await
    }

    async fn take(&mut self) -> Result<bool, String> {
        self.get_lock(WAIT).await
    }

    async fn give_back(&mut self) -> Result<(), String> {
        let bound = self.connect_timeout;
        let name = self.name.clone();
        let conn = self.connection().await?;
        let statement = Statement::new(MYSQL_WAKE_GIVE_BACK, vec![Param::Text(&name)]);
        match timeout(bound, statement.execute(conn)).await {
            Ok(Ok(_)) => Ok(()),
            _ => {
                self.conn = None;
                Err("RELEASE_LOCK failed".to_owned())
            }
        }
    }

    async fn ping(&mut self) -> Result<(), String> {
        let bound = self.connect_timeout;
        let conn = self.connection().await?;
        match timeout(bound, conn.batch_execute("SELECT 1")).await {
            Ok(Ok(())) => Ok(()),
            _ => Err("the side connection stopped answering".to_owned()),
        }
    }

    fn reset(&mut self) {
        self.conn = None;
    }

    /// A Galera member (`wsrep_on`): `GET_LOCK` is the member's own, not the cluster's.
    /// A server without the variable (MySQL) is not one.
    async fn unshared(&mut self) -> Result<Option<String>, String> {
        let bound = self.connect_timeout;
        let conn = self.connection().await?;
        let read = diesel::sql_query(MYSQL_WSREP_ON).load::<WsrepOn>(conn);
        match timeout(bound, read).await {
            Ok(Ok(rows)) if <[WsrepOn]>::first(&rows).and_then(|r| r.wsrep_on) == Some(1) => {
                Ok(Some(
                    "the server is a Galera member (wsrep_on), whose GET_LOCK holds on that \
                 member only"
                        .to_owned(),
                ))
            }
            Ok(_) => Ok(None),
            Err(_) => {
                self.conn = None;
                Err("the side connection stopped answering".to_owned())
            }
        }
    }

    fn kind(&self) -> &'static str {
        "GET_LOCK on a side connection"
    }
}
