//! The operator commands, the members table and `leaderd locks` on one connection: each
//! one of the dialect's statements.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::RunQueryDsl;
use std::time::Duration;

use super::{DbConnection, duration, ms, read_error};
use crate::store::dialect::{Dialect, MYSQL, POSTGRES, Param, SQLITE, Statement};
use crate::store::{HeldRow, Member, MemberRecord, MemberStanding, StoreError};

#[derive(QueryableByName)]
struct HeldSql {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    container_id: String,
    #[diesel(sql_type = BigInt)]
    term: i64,
    #[diesel(sql_type = BigInt)]
    lease_ms: i64,
    #[diesel(sql_type = BigInt)]
    age_ms: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_ms: Option<i64>,
}

#[derive(QueryableByName)]
struct MemberSql {
    #[diesel(sql_type = Text)]
    node_id: String,
    #[diesel(sql_type = BigInt)]
    candidate: i64,
    #[diesel(sql_type = BigInt)]
    priority: i64,
    #[diesel(sql_type = Text)]
    version: String,
    #[diesel(sql_type = Text)]
    host: String,
    #[diesel(sql_type = BigInt)]
    member_ms: i64,
    #[diesel(sql_type = BigInt)]
    seen_ms: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    record_process: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    no_preempt_ms: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    standing: Option<String>,
}

impl DbConnection {
    /// Pauses the election for `duration`, creating its row if needed, in one statement
    /// (on PostgreSQL it also wakes the nodes that LISTEN).
    pub async fn pause(&mut self, name: &str, duration: Duration) -> Result<(), StoreError> {
        let params = vec![Param::Text(name), Param::BigInt(ms(duration))];
        self.write(|d| d.pause, params).await?;
        Ok(())
    }

    pub async fn resume(&mut self, name: &str) -> Result<bool, StoreError> {
        Ok(self.write(|d| d.resume, vec![Param::Text(name)]).await? == 1)
    }

    /// Asks `holder`, leader in `term`, to step down; `false` if that lease is not live.
    pub async fn request_resign(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
    ) -> Result<bool, StoreError> {
        let params = vec![Param::Text(name), Param::Text(holder), Param::BigInt(term)];
        Ok(self.write(|d| d.resign, params).await? == 1)
    }

    /// Asks `holder`, leader in `term`, to step down in favour of `to`, or (`offer`) only
    /// offers `to` its lease; `false` if that lease is not live.
    pub async fn request_handover(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        to: &str,
        offer: bool,
    ) -> Result<bool, StoreError> {
        let params = vec![
            Param::Text(to),
            Param::Text(name),
            Param::Text(holder),
            Param::BigInt(term),
        ];
        let statement = match offer {
            true => |d: &Dialect| d.offer_handover,
            false => |d: &Dialect| d.handover,
        };
        Ok(self.write(statement, params).await? == 1)
    }

    pub async fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let params = vec![
            Param::Text(&record.election),
            Param::Text(&record.node_id),
            Param::BigInt(i64::from(record.candidate())),
            Param::BigInt(record.priority),
            Param::Text(&record.version),
            Param::Text(&record.host),
            Param::Text(record.standing.as_str()),
            Param::BigInt(record.order.process),
            Param::BigInt(record.order.count),
            Param::BigInt(i64::from(fresh)),
        ];
        self.write(|d| d.record_member, params).await?;
        Ok(())
    }

    pub async fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> Result<(), StoreError> {
        let params = vec![
            Param::BigInt(ms(hold)),
            Param::Text(election),
            Param::Text(node_id),
        ];
        self.write(|d| d.hold_preemption, params).await?;
        Ok(())
    }

    pub async fn members(&mut self, election: &str) -> Result<Vec<Member>, StoreError> {
        let rows: Vec<MemberSql> = on_connection!(self, |c, d| {
            Statement::new(d.members, vec![Param::Text(election)])
                .load(c)
                .await
                .map_err(read_error)?
        });
        Ok(rows
            .into_iter()
            .map(|row| Member {
                node_id: row.node_id,
                candidate: row.candidate != 0,
                standing: row.standing.as_deref().and_then(MemberStanding::parse),
                priority: row.priority,
                version: row.version,
                host: row.host,
                member_for: duration(row.member_ms),
                seen_ago: duration(row.seen_ms),
                no_preempt_for: row.no_preempt_ms.map(duration),
                recorded_every: match row.record_process {
                    Some(_) => crate::store::MEMBER_PERIOD,
                    None => crate::store::LEGACY_MEMBER_PERIOD,
                },
            })
            .collect())
    }

    pub async fn prune_members(
        &mut self,
        election: &str,
        older_than: Duration,
    ) -> Result<(), StoreError> {
        let params = vec![Param::Text(election), Param::BigInt(ms(older_than))];
        self.write(|d| d.prune_members, params).await?;
        Ok(())
    }

    /// Every live lease, elections' and locks', by name.
    pub async fn held_rows(&mut self) -> Result<Vec<HeldRow>, StoreError> {
        let rows: Vec<HeldSql> = on_connection!(self, |c, d| {
            Statement::new(d.held_rows, vec![])
                .load(c)
                .await
                .map_err(read_error)?
        });
        Ok(rows
            .into_iter()
            .map(|row| HeldRow {
                name: row.name,
                holder: row.container_id,
                term: row.term,
                lease: duration(row.lease_ms),
                age: duration(row.age_ms),
                held: row.held_ms.map(duration),
            })
            .collect())
    }
}
