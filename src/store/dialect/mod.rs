//! The statements of the lease protocol, the operator commands, the members table and
//! `leaderd locks`, for each backend (`postgres.rs`, `mysql.rs`, `sqlite.rs`), in one
//! place: what `memory/table.rs` models statement by statement. Also here: MySQL's wake-up
//! lock and the server variables leaderd reads, and the fence leader work runs
//! (`fence.rs`). The rest is session plumbing, kept beside the code it serves because it
//! means nothing apart from it: the session limits and PRAGMAs set on connecting
//! (`connection/mod.rs`), the migration locks (`connection/migrate.rs`), BEGIN/COMMIT
//! around a statement through a transaction pooler (`pooler.rs`, `connection/mod.rs`),
//! LISTEN and the listener's ping (`notify.rs`), and the wake-up lock
//! connection's session setting and ping (`wakeup.rs`).
//!
//! The protocol is optimistic concurrency on one row per election (seed 002): `term` is the
//! row's version. Every write names the term it expects, so a write based on a stale view
//! changes nothing. Expiry is judged only by the database clock, inside the statements.
//! Each statement binds its parameters once and in the same order on every backend, so the
//! binding code below is shared and only the text differs. Parameters are written `?` on
//! every backend; [`Statement`] numbers them `$1, $2, …` for PostgreSQL.

use diesel::backend::Backend as DieselBackend;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Text, Untyped};

mod fence;
mod mysql;
mod postgres;
mod sqlite;

pub(in crate::store) use fence::{
    MYSQL_GALERA_TRIGGER, MYSQL_GALERA_TRIGGER_PRESENT, fence_call, fence_statement,
};

pub(in crate::store) use mysql::{
    MYSQL, MYSQL_DURABILITY, MYSQL_WAKE_GIVE_BACK, MYSQL_WAKE_TAKE, MYSQL_WSREP_ON,
};
pub(in crate::store) use postgres::POSTGRES;
pub(in crate::store) use sqlite::{SQLITE, SQLITE_SYNCED, SQLITE_UNSYNCED};

/// The statements of one backend.
pub(in crate::store) struct Dialect {
    /// (name) -> holder, term, lease_ms, age_ms by the database clock, now_us, term_token,
    /// held_ms (since the term started; NULL where `taken_at` is not the current term's),
    /// and the pending commands: paused_ms and handover_ms (time left, NULL once over),
    /// handover_to, resign_term.
    pub(in crate::store) get: &'static str,
    /// (name): create the row, unheld, if it does not exist. Its row count means nothing:
    /// leadership is only ever taken by `claim`.
    pub(in crate::store) ensure_row: &'static str,
    /// (holder, term_token, lease_ms, name, expected_term, holder) -> term: take a released
    /// or lapsed lease, unless paused or handed over to another node; clears the handover.
    /// A handover is in force while its window lasts: a target with no window
    /// (`handover_until` NULL, left by hand) is none, as [`Dialect::get`] reads it, here
    /// and in the reacquire, the resign and the handovers.
    /// Answers the term it started (no row: it took nothing; MySQL, which has no
    /// `UPDATE .. RETURNING`, answers through [`Dialect::started_term`]).
    /// It and the reacquire write when the term started (`taken_at`, `taken_term`), which
    /// renewals, holds and releases keep, and the process token unchanged (`term_token`:
    /// [`LeaseRow::started_by`](crate::store::LeaseRow::started_by) binds it to the term
    /// through `taken_term`).
    /// The term it starts is the next one, or the database clock in microseconds since
    /// 1970 if that is higher (`GREATEST(term + 1, clock)`): a term acknowledged and then
    /// lost with its commit (an asynchronous standby promoted without it) is not started
    /// again, since the next claim on the promoted standby reads a later clock. One clock
    /// reading serves both `term` and `taken_term` (the statement's start).
    /// Its commit, and a reacquire's, must outlive a crash of the server: a term lost
    /// after it was acknowledged can be handed out again. On PostgreSQL both set
    /// `synchronous_commit` on for their own transaction, whatever the server, database
    /// or role says, so that they wait for the WAL flush and, under synchronous
    /// replication, for the synchronous standby. On SQLite they are synced
    /// (`DbConnection::start_term`); MySQL's settings are the server's, and a node warns
    /// once when they let a commit be lost (`innodb_flush_log_at_trx_commit`, `sync_binlog`).
    pub(in crate::store) claim: &'static str,
    /// (term_token, lease_ms, name, holder, term, holder) -> term: start a new term on a row
    /// this process still holds, unless asked to resign it, handed over to another node, or
    /// paused with the lease lapsed. Its term, its answer and its commit are a claim's.
    pub(in crate::store) reacquire: &'static str,
    /// (lease_ms, name, holder, term, resign_seen, paused_seen): extend a live lease of
    /// ours, if the commands pending on the row are the ones the leader has seen (0 or 1
    /// each): a new command makes it match nothing, and the leader reads the row.
    pub(in crate::store) renew: &'static str,
    /// (name, holder, term): give the row up. A handover the leader was asked for gets its
    /// window anew (two lease lengths from now), so that it covers the step-down however
    /// long that took. On PostgreSQL its commit does not wait for
    /// the WAL flush (`synchronous_commit` off for its own transaction): the holder has
    /// stopped acting already, so a release lost in a server crash only leaves the lease
    /// to lapse, as a stopped node's does, and the claim that follows it flushes it.
    pub(in crate::store) release: &'static str,
    /// (name, pause_ms): no claim of a free or lapsed lease for pause_ms; creates the row,
    /// unheld, if it does not exist, in the same statement (as `memory/table.rs` does in
    /// one step). On PostgreSQL it also wakes every node that LISTENs.
    pub(in crate::store) pause: &'static str,
    /// (name): end a pause.
    pub(in crate::store) resume: &'static str,
    /// (name, holder, term): ask the leader of a live term to step down. Like the
    /// handovers below, it asks nothing of a leader that is already asked or whose lease
    /// is offered to a node (one step-down at a time: one under way is not redirected, an
    /// offer's answer cannot be mistaken for another command, and a repeated command is
    /// harmless).
    pub(in crate::store) resign: &'static str,
    /// (to, name, holder, term): offer a live term's lease to `to`: only `to` may claim
    /// for two of its lease lengths, and the leader is not asked yet; `to` accepts the
    /// offer ([`Dialect::accept_handover`]) if it runs and could lead.
    pub(in crate::store) offer_handover: &'static str,
    /// (node, name, node, term): `node` accepts the offer of a live term's lease, which
    /// asks the leader to step down (a command the leader's renewal sees).
    pub(in crate::store) accept_handover: &'static str,
    /// (to, name, holder, term): ask the leader of a live term to step down, and let only
    /// `to` claim for two of its lease lengths, without asking `to` (`handover --force`,
    /// and a candidate that preempts, being `to` itself).
    pub(in crate::store) handover: &'static str,
    /// () -> term on MySQL: the term the claim or reacquire just run on this connection
    /// started (its `LAST_INSERT_ID(..)`). `None` where the claim answers the term itself.
    pub(in crate::store) started_term: Option<&'static str>,
    /// (name) on PostgreSQL: wakes every node that LISTENs (a command is pending).
    pub(in crate::store) wake: Option<&'static str>,
    /// (election, node_id, candidate, priority, version, host, standing, fresh): a node
    /// records itself; `fresh` (1 on a process's first record) resets `started`.
    pub(in crate::store) record_member: &'static str,
    /// (hold_ms, election, node_id): a node that lost by preemption does not preempt for
    /// hold_ms.
    pub(in crate::store) hold_preemption: &'static str,
    /// (election) -> node_id, candidate, priority, version, host, member_ms (since
    /// started), seen_ms (since last_seen), no_preempt_ms (left, NULL once over),
    /// standing.
    pub(in crate::store) members: &'static str,
    /// (election, older_than_ms): forget members not seen for that long.
    pub(in crate::store) prune_members: &'static str,
    /// (left_ms, name, holder, term): a lock whose work is done keeps its live lease in
    /// `term` for `left_ms` more by the database clock, and renews it no more (`leaderd lock
    /// --hold-at-least`). It leaves `timestamp` (the last renewal) alone and sets the lease to
    /// end `left_ms` from now, rounded up to the millisecond (on SQLite, whose times are
    /// whole milliseconds and whose difference of two is a float that can fall just below
    /// the whole one, a millisecond more); the holder stays, so others see who holds it.
    /// Where the clock stepped back past the last renewal, the lease ends `left_ms` after
    /// the renewal instead (never a length below zero, which the table refuses on
    /// PostgreSQL and SQLite): later than asked, never sooner.
    pub(in crate::store) hold: &'static str,
    /// () -> name, container_id, term, lease_ms, age_ms, held_ms (as [`Dialect::get`] reads
    /// it): every row whose lease is live by the database clock, elections' and locks'
    /// (`leaderd locks`), by name.
    pub(in crate::store) held_rows: &'static str,
}

/// A value bound to a statement.
pub(in crate::store) enum Param<'a> {
    Text(&'a str),
    BigInt(i64),
}

/// One of a dialect's fixed statements with its parameters, in the order of its `?`s.
///
/// diesel never caches a `sql_query` (its text could be anything), so each one is parsed
/// and planned anew and costs an extra round trip on PostgreSQL. These texts are fixed,
/// so this type lets diesel prepare each once per connection and key it by its text.
pub(in crate::store) struct Statement<'a> {
    sql: &'static str,
    params: Vec<Param<'a>>,
}

impl<'a> Statement<'a> {
    pub(in crate::store) fn new(sql: &'static str, params: Vec<Param<'a>>) -> Self {
        Statement { sql, params }
    }
}

impl<DB> QueryFragment<DB> for Statement<'_>
where
    DB: DieselBackend + HasSqlType<Text> + HasSqlType<BigInt>,
    str: ToSql<Text, DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> diesel::QueryResult<()> {
        let mut pieces = self.sql.split('?');
        out.push_sql(pieces.next().unwrap_or_default());
        let mut params = self.params.iter();
        for piece in pieces {
            match params.next() {
                Some(Param::Text(text)) => out.push_bind_param::<Text, str>(text)?,
                Some(Param::BigInt(number)) => out.push_bind_param::<BigInt, i64>(number)?,
                None => {
                    return Err(diesel::result::Error::QueryBuilderError(
                        format!("too few parameters for statement {:?}", self.sql).into(),
                    ));
                }
            }
            out.push_sql(piece);
        }
        match params.next() {
            None => Ok(()),
            Some(_) => Err(diesel::result::Error::QueryBuilderError(
                format!("too many parameters for statement {:?}", self.sql).into(),
            )),
        }
    }
}

// Keyed by its text in the statement cache (no static id: one type serves every text).
impl QueryId for Statement<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Statement<'_> {
    type SqlType = Untyped;
}
