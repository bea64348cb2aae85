//! Each backend's [`Flavour`], the part of the model that differs by backend, against the
//! real database: where the clock is read behind a row lock, how finely times are kept,
//! and where a renewal starts the lease after the clock stepped back. Also the hold, which
//! ends a lease its time after the statement's clock reading, rounded up to the
//! millisecond, on every backend.

use super::*;
use leaderd::store::memory::{Flavour, Table};

fn flavour(backend: Backend) -> Flavour {
    match backend {
        Backend::Postgres => Flavour::POSTGRES,
        Backend::Mysql => Flavour::MYSQL,
        Backend::Sqlite => Flavour::SQLITE,
    }
}

fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A renewal that waited behind another write of the row while the lease lapsed sees it
/// as its flavour's clock point says: lapsed, where the clock is read after the wait
/// (PostgreSQL re-runs it on the row the other write left; SQLite reads `'now'` once it
/// holds the write lock), or live, where the clock is the statement's start (MySQL).
async fn a_renewal_behind_a_row_lock_reads_the_clock_where_the_flavour_says(backend: Backend) {
    let db = TestDb::new(backend);
    let mut a = store_at(&db.url, Duration::from_secs(10));
    a.connect().await.unwrap();
    let name = "locked";
    let short = Duration::from_secs(1);
    a.ensure_row(name).await.unwrap();
    let start = Instant::now();
    let t1 = a.claim(&lease(name, "a", short, 0)).await.unwrap().unwrap();

    let url = DatabaseUrl::parse(&db.url).unwrap();
    let mut other = DbConnection::connect(&url, Duration::from_secs(10))
        .await
        .unwrap();
    let begin = match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        _ => "BEGIN",
    };
    let write = "UPDATE service_leader_lock SET lease_ms = lease_ms WHERE name = 'locked'";
    execute_raw(&mut other, &[begin, write]).await;
    let arrived = start.elapsed();
    let renewal = tokio::spawn(async move { a.renew(&lease(name, "a", short, t1)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!renewal.is_finished(), "the renewal waits for the row lock");
    assert!(start.elapsed() < short, "sent while the lease was live");
    tokio::time::sleep((short * 2).saturating_sub(start.elapsed())).await;
    let executed = start.elapsed();
    execute_raw(&mut other, &["COMMIT"]).await;
    let renewed = renewal.await.unwrap().unwrap();

    let flavour = flavour(backend);
    let mut model = Table::with_flavour(flavour);
    let at = tokio::time::Instant::now();
    model.ensure_row(name, at);
    let m1 = model.claim(at, &lease(name, "a", short, 0)).unwrap();
    let clock = flavour.clock_reading(at + arrived, at + executed);
    let modelled = model.renew(clock, &lease(name, "a", short, m1), Default::default());
    assert_eq!(
        renewed, modelled,
        "{backend:?}: the database renewed: {renewed}; its flavour {flavour:?} says {modelled}"
    );
}

/// When the lease of `name` started, in microseconds since 1970: exactly the stored
/// milliseconds on SQLite (its text), where the float of `lease_start_us` errs by a few.
async fn start_us(conn: &mut DbConnection, name: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    let DbConnection::Sqlite(c) = conn else {
        return lease_start_us(conn, name).await;
    };
    let sql = format!(
        r#"SELECT CAST(ROUND((julianday("timestamp") - 2440587.5) * 86400000.0) AS INTEGER) * 1000
                  AS us
           FROM service_leader_lock WHERE name = '{name}'"#
    );
    let row: Micros = diesel::sql_query(sql).get_result(c).await.unwrap();
    row.us
}

/// How finely the database keeps the times a statement writes: whole milliseconds where
/// the flavour's precision says so (SQLite), microseconds elsewhere; the model cuts its
/// clock readings alike.
async fn stored_times_keep_the_flavours_precision(backend: Backend) {
    let db = TestDb::new(backend);
    let mut conn = migrated(&db).await;
    let name = "precision";
    conn.ensure_row(name).await.unwrap();
    let mut term = 0;
    let mut sub_ms = Vec::new();
    for _ in 0..20 {
        term = conn
            .claim(&lease(name, "a", Duration::ZERO, term))
            .await
            .unwrap()
            .unwrap();
        sub_ms.push(match backend {
            // Its text, to the digit.
            Backend::Sqlite => stored_fraction(&mut conn, name).await,
            _ => lease_start_us(&mut conn, name).await.rem_euclid(1000),
        });
    }
    let whole_ms = sub_ms.iter().all(|us| *us == 0);

    let flavour = flavour(backend);
    let mut model = Table::with_flavour(flavour);
    let at = tokio::time::Instant::now();
    // A clock with a part of a millisecond, as the model reads it.
    model.set_clock(at, 1_700_000_000_000_437);
    let read = model.clock_us(at);
    assert_eq!(
        whole_ms,
        read % 1000 == 0,
        "{backend:?}: parts of a millisecond {sub_ms:?}; the flavour {flavour:?} reads {read}"
    );
}

/// SQLite: the digits of the stored lease start past the milliseconds, as microseconds
/// (`SS.SSS` keeps none).
async fn stored_fraction(conn: &mut DbConnection, name: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Text {
        #[diesel(sql_type = diesel::sql_types::Text)]
        text: String,
    }
    let DbConnection::Sqlite(c) = conn else {
        unreachable!()
    };
    let sql =
        format!(r#"SELECT "timestamp" AS text FROM service_leader_lock WHERE name = '{name}'"#);
    let stored: Text = diesel::sql_query(sql).get_result(c).await.unwrap();
    let fraction = stored.text.rsplit('.').next().unwrap_or_default();
    let micros = format!("{fraction:0<6}");
    micros[3..6].parse().unwrap_or(-1)
}

/// A renewal after the database clock stepped back behind the lease's start: the start
/// stays where it was under MySQL's `GREATEST`, and moves back to the clock reading
/// elsewhere, as the flavour's renewal rule says.
async fn a_renewal_after_the_clock_stepped_back_starts_where_the_flavour_says(backend: Backend) {
    let db = TestDb::new(backend);
    let mut s = store(&db);
    s.connect().await.unwrap();
    let name = "stepped";
    let long = Duration::from_secs(10);
    s.ensure_row(name).await.unwrap();
    let mut operator = migrated(&db).await;
    let t1 = s.claim(&lease(name, "a", long, 0)).await.unwrap().unwrap();
    by_hand::move_times(&mut operator, backend, None, 2_000_000).await;
    let renewed = Instant::now();
    assert!(s.renew(&lease(name, "a", long, t1)).await.unwrap());
    // Forward again, by more: the age now tells where the renewal started the lease.
    by_hand::move_times(&mut operator, backend, None, -3_000_000).await;
    let age = s.get(name).await.unwrap().unwrap().age;
    let since = renewed.elapsed();

    let flavour = flavour(backend);
    let mut model = Table::with_flavour(flavour);
    let at = tokio::time::Instant::now();
    model.ensure_row(name, at);
    let m1 = model.claim(at, &lease(name, "a", long, 0)).unwrap();
    model.move_times(true, Duration::from_secs(2));
    assert!(model.renew(at, &lease(name, "a", long, m1), Default::default()));
    model.move_times(false, Duration::from_secs(3));
    let modelled = model.lease_row(name, at + since).unwrap().age;
    assert!(
        age.abs_diff(modelled) < Duration::from_millis(300),
        "{backend:?}: age {age:?} after the renewal; the flavour {flavour:?} says {modelled:?}"
    );
}

/// `leaderd lock --hold-at-least`: the lease ends `left` after the statement's clock
/// reading, rounded up to the millisecond (on SQLite, whose readings are whole
/// milliseconds, up to a millisecond later: its float difference, cut, and one more).
async fn a_hold_ends_the_lease_its_time_after_the_clock_reading(backend: Backend) {
    let db = TestDb::new(backend);
    let mut conn = migrated(&db).await;
    let name = "lock:held";
    conn.ensure_row(name).await.unwrap();
    let t1 = conn
        .claim(&lease(name, "a", Duration::from_secs(60), 0))
        .await
        .unwrap()
        .unwrap();
    let left = Duration::from_secs(30);
    for _ in 0..10 {
        let sent = unix_us();
        assert!(
            conn.hold(&lease(name, "a", TTL, t1), left).await.unwrap(),
            "live"
        );
        let answered = unix_us();
        let lease_ms = conn.get(name).await.unwrap().unwrap().lease.as_millis() as i64;
        let end = start_us(&mut conn, name).await + lease_ms * 1000;
        let reading = end - left.as_micros() as i64;
        // The database and this host share a clock.
        let ok = match backend {
            Backend::Sqlite => {
                reading % 1000 == 0 && sent - sent % 1000 <= reading && reading <= answered + 1000
            }
            _ => sent <= reading && reading < answered + 1000,
        };
        assert!(
            ok,
            "{backend:?}: the hold ends the lease {left:?} after {reading} µs; \
             sent at {sent}, answered at {answered}"
        );
    }
}

/// `leaderd pause` wakes the nodes that LISTEN on PostgreSQL from within its statement.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_pause_wakes_the_nodes() {
    let db = TestDb::new(Backend::Postgres);
    let mut operator = store(&db);
    operator.connect().await.unwrap();
    let waiter = store(&db);
    let mut woken = waiter.release_notifications("paused").unwrap();
    // The listener wakes once when it starts.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    while woken.try_recv().is_ok() {}
    operator
        .pause("paused", Duration::from_secs(60))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), woken.recv())
        .await
        .expect("the pause is notified");
}

backend_tests!(postgres = Backend::Postgres => a_renewal_behind_a_row_lock_reads_the_clock_where_the_flavour_says, stored_times_keep_the_flavours_precision, a_renewal_after_the_clock_stepped_back_starts_where_the_flavour_says, a_hold_ends_the_lease_its_time_after_the_clock_reading);
backend_tests!(mysql = Backend::Mysql => a_renewal_behind_a_row_lock_reads_the_clock_where_the_flavour_says, stored_times_keep_the_flavours_precision, a_renewal_after_the_clock_stepped_back_starts_where_the_flavour_says, a_hold_ends_the_lease_its_time_after_the_clock_reading);
backend_tests!(sqlite = Backend::Sqlite => a_renewal_behind_a_row_lock_reads_the_clock_where_the_flavour_says, stored_times_keep_the_flavours_precision, a_renewal_after_the_clock_stepped_back_starts_where_the_flavour_says, a_hold_ends_the_lease_its_time_after_the_clock_reading);
