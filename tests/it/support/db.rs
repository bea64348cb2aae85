//! A database of its own per test on each backend (dropped after it), and the macro that
//! instantiates a test once per backend.

/// Instantiates `async fn test(backend: Backend)` functions as tests in a module named
/// after the backend: `backend_tests!(postgres = Backend::Postgres => test_a, test_b);`.
/// Further groups, after a `;`, pass another argument to their tests: `backend_tests!(
/// postgres = TestDb::new(Backend::Postgres) => test_c; Backend::Postgres => test_d);`.
macro_rules! backend_tests {
    ($module:ident = $($argument:expr => $($test:ident),* $(,)?);+) => {
        mod $module {
            use super::*;
            $($(
                #[tokio::test(flavor = "multi_thread")]
                async fn $test() {
                    super::$test($argument).await
                }
            )*)+
        }
    };
}

/// Each test written once, run on every backend as `postgres::TEST`, `mysql::TEST` and
/// `sqlite::TEST`. The tests after `servers:` need a database server (a connection to
/// stall, a clock to skew) and run on PostgreSQL and MySQL/MariaDB only.
macro_rules! every_backend {
    ($($test:ident),* $(,)? $(; servers: $($server_test:ident),* $(,)?)?) => {
        backend_tests!(postgres = Backend::Postgres =>
            $($test,)* $($($server_test,)*)?);
        backend_tests!(mysql = Backend::Mysql =>
            $($test,)* $($($server_test,)*)?);
        backend_tests!(sqlite = Backend::Sqlite => $($test,)*);
    };
}

use super::unique;
use diesel_async::{
    AsyncConnection, AsyncMysqlConnection, AsyncPgConnection, SimpleAsyncConnection,
};
use std::path::PathBuf;

pub const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const MYSQL_ADMIN: &str = "mysql://root@127.0.0.1:3306/test";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Mysql,
    Sqlite,
}

/// Runs `future` to completion on a runtime of its own (usable from `Drop`).
fn block_on<F: std::future::Future + Send + 'static>(future: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    })
    .join()
    .unwrap()
}

/// A database created for one test and dropped after it, plus a scratch directory.
pub struct TestDb {
    pub backend: Backend,
    /// The URL nodes use (directly, not through a proxy).
    pub url: String,
    pub dir: PathBuf,
    name: String,
}

impl TestDb {
    pub fn new(backend: Backend) -> TestDb {
        let name = unique("leaderd");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let url = match backend {
            Backend::Postgres => {
                let statement = format!("CREATE DATABASE {name}");
                block_on(async move {
                    let mut c = AsyncPgConnection::establish(POSTGRES_ADMIN).await.unwrap();
                    c.batch_execute(&statement).await.unwrap();
                });
                format!("postgres://postgres@127.0.0.1:5432/{name}")
            }
            Backend::Mysql => {
                let statement = format!("CREATE DATABASE {name}");
                block_on(async move {
                    let mut c = AsyncMysqlConnection::establish(MYSQL_ADMIN).await.unwrap();
                    c.batch_execute(&statement).await.unwrap();
                });
                format!("mysql://root@127.0.0.1:3306/{name}")
            }
            Backend::Sqlite => format!("sqlite://{}", dir.join("leaderd.sqlite3").display()),
        };
        TestDb {
            backend,
            url,
            dir,
            name,
        }
    }

    /// The URL with its host and port replaced by `addr` (for a proxy).
    pub fn url_via(&self, addr: std::net::SocketAddr) -> String {
        let port = match self.backend {
            Backend::Postgres => "127.0.0.1:5432",
            Backend::Mysql => "127.0.0.1:3306",
            Backend::Sqlite => panic!("SQLite has no connection to proxy"),
        };
        let url = self.url.replace(port, &addr.to_string());
        match self.backend {
            // mysql_async otherwise switches to the server's Unix socket on a local host,
            // around the proxy.
            Backend::Mysql => format!("{url}?prefer_socket=false"),
            _ => url,
        }
    }

    /// The upstream address a proxy forwards to.
    pub fn server_addr(&self) -> std::net::SocketAddr {
        match self.backend {
            Backend::Postgres => "127.0.0.1:5432".parse().unwrap(),
            Backend::Mysql => "127.0.0.1:3306".parse().unwrap(),
            Backend::Sqlite => panic!("SQLite has no server"),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let statement = format!("DROP DATABASE IF EXISTS {}", self.name);
        match self.backend {
            Backend::Postgres => block_on(async move {
                let mut c = AsyncPgConnection::establish(POSTGRES_ADMIN).await.unwrap();
                c.batch_execute(&format!("{statement} WITH (FORCE)"))
                    .await
                    .unwrap();
            }),
            Backend::Mysql => block_on(async move {
                let mut c = AsyncMysqlConnection::establish(MYSQL_ADMIN).await.unwrap();
                c.batch_execute(&statement).await.unwrap();
            }),
            Backend::Sqlite => {}
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("test files kept in {}", self.dir.display());
        }
    }
}
