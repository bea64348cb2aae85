//! The operator commands and the members table on a [`SqlStore`]: statements of their
//! own, which only `operator.rs` and `daemon/members.rs` send.

use std::time::Duration;

use super::{Opening, SqlStore};
use crate::store::{
    ControlStore, MEMBER_PRUNE_AFTER, Member, MemberRecord, StepDownRequest, StoreError,
};

/// Operator commands and the members table: statements of their own, on the store's
/// connection (the daemon records members on a store of their own, off its renewals).
impl ControlStore for SqlStore {
    fn disconnect(&mut self) {
        SqlStore::disconnect(self);
    }

    async fn pause(&mut self, name: &str, duration: Duration) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.run(Opening::Plain, move |c| {
            // One statement, which also wakes the nodes on PostgreSQL.
            Box::pin(async move { c.pause(&name, duration).await })
        })
        .await
    }

    async fn resume(&mut self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move {
                let found = c.resume(&name).await?;
                c.wake(&name).await?;
                Ok(found)
            })
        })
        .await
    }

    async fn request_step_down(
        &mut self,
        name: &str,
        holder: &str,
        term: i64,
        request: StepDownRequest<'_>,
    ) -> Result<bool, StoreError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let target = request.target();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move {
                let asked = match &target {
                    Some((to, offer)) => {
                        c.request_handover(&name, &holder, term, to, *offer).await?
                    }
                    None => c.request_resign(&name, &holder, term).await?,
                };
                if asked {
                    c.wake(&name).await?;
                }
                Ok(asked)
            })
        })
        .await
    }

    async fn record_member(
        &mut self,
        record: &MemberRecord,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let record = record.clone();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.record_member(&record, fresh).await })
        })
        .await
    }

    async fn hold_preemption(
        &mut self,
        election: &str,
        node_id: &str,
        hold: Duration,
    ) -> Result<(), StoreError> {
        let (election, node_id) = (election.to_owned(), node_id.to_owned());
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.hold_preemption(&election, &node_id, hold).await })
        })
        .await
    }

    async fn members(&mut self, election: &str) -> Result<Vec<Member>, StoreError> {
        let election = election.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.members(&election).await })
        })
        .await
    }

    async fn prune_members(&mut self, election: &str) -> Result<(), StoreError> {
        let election = election.to_owned();
        self.run(Opening::Plain, move |c| {
            Box::pin(async move { c.prune_members(&election, MEMBER_PRUNE_AFTER).await })
        })
        .await
    }
}
