//! Watching a set of nodes' status files: never two valid leaders, terms in order, and
//! waiting for them to agree.

use super::{Node, StatusFile};
use std::time::{Duration, SystemTime};

/// Samples the status files of a set of nodes and asserts, at every sample, that no two
/// nodes claim leadership that is still valid. Sound despite the files being read one
/// after another: a node can only become leader after every earlier leader's
/// `valid_until` has passed, so comparing against the time *after* reading all files never
/// flags a legitimate handover.
pub struct Sampler {
    pub samples: u64,
    /// Every leadership seen.
    pub leaderships: Vec<Leadership>,
}

/// One node's leadership in one term, as its status file showed it.
#[derive(Debug, Clone)]
pub struct Leadership {
    pub node_id: String,
    pub term: i64,
    pub since: SystemTime,
    /// The latest `valid_until` it claimed.
    pub valid_until: SystemTime,
    /// When its file first said it no longer led (a clean step-down ends before
    /// `valid_until`), as far as the samples saw: a short-lived first status after it (a
    /// few milliseconds, replaced by the next round's) may be missed.
    pub ended_at: Option<SystemTime>,
    /// The latest `updated_at` of a file that said it led: it led at least until then.
    pub last_led: SystemTime,
}

impl Leadership {
    /// The last instant this leadership could have been acted on.
    pub fn end(&self) -> SystemTime {
        self.ended_at
            .map_or(self.valid_until, |e| e.min(self.valid_until))
    }
}

impl Sampler {
    pub fn new() -> Sampler {
        Sampler {
            samples: 0,
            leaderships: Vec::new(),
        }
    }

    /// Reads every node's file once, checks the invariant and returns what was read.
    pub fn sample(&mut self, nodes: &[&Node]) -> Vec<Option<StatusFile>> {
        let statuses: Vec<_> = nodes.iter().map(|n| n.status()).collect();
        let read_done = SystemTime::now();
        let valid_leaders: Vec<_> = statuses
            .iter()
            .flatten()
            .filter(|s| s.is_leader() && s.valid_until > read_done)
            .collect();
        let ids: std::collections::BTreeSet<_> = valid_leaders.iter().map(|s| &s.node_id).collect();
        assert!(
            ids.len() <= 1,
            "two valid leaders at once: {valid_leaders:#?}"
        );
        for status in statuses.iter().flatten() {
            let term = status.term.unwrap_or(-1);
            let known = self
                .leaderships
                .iter_mut()
                .find(|l| l.node_id == status.node_id && l.term == term);
            match (status.is_leader(), known) {
                (true, Some(known)) => {
                    known.valid_until = known.valid_until.max(status.valid_until);
                    known.last_led = known.last_led.max(status.updated_at);
                }
                (true, None) => self.leaderships.push(Leadership {
                    node_id: status.node_id.clone(),
                    term,
                    since: status.since,
                    valid_until: status.valid_until,
                    ended_at: None,
                    last_led: status.updated_at,
                }),
                (false, _) => {
                    for open in self.leaderships.iter_mut().filter(|l| {
                        l.node_id == status.node_id
                            && l.ended_at.is_none()
                            && l.since <= status.updated_at
                    }) {
                        open.ended_at = Some(status.updated_at);
                    }
                }
            }
        }
        self.samples += 1;
        statuses
    }

    /// Leaderships seen must not overlap in time, and terms must grow with time: a term
    /// begins after the last instant its predecessor's file said it led. (Not after
    /// `ended_at`: the first status after a step-down may have been replaced before a
    /// sample saw it, and the file's times have millisecond resolution; two valid leaders
    /// at one instant are caught by [`Sampler::sample`].)
    pub fn check_terms(&self) {
        let mut terms = self.leaderships.clone();
        terms.sort_by_key(|l| l.term);
        for pair in terms.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            assert!(
                later.since >= earlier.last_led,
                "term {} of {} began before term {} of {} ended: {terms:#?}",
                later.term,
                later.node_id,
                earlier.term,
                earlier.node_id
            );
        }
    }

    /// Samples every few milliseconds until `condition` holds for what was read; returns
    /// the statuses then and the time it took.
    pub async fn until(
        &mut self,
        nodes: &[&Node],
        limit: Duration,
        what: &str,
        condition: impl Fn(&[Option<StatusFile>]) -> bool,
    ) -> (Vec<Option<StatusFile>>, Duration) {
        let start = std::time::Instant::now();
        loop {
            let statuses = self.sample(nodes);
            if condition(&statuses) {
                return (statuses, start.elapsed());
            }
            if start.elapsed() > limit {
                for node in nodes {
                    eprintln!("--- {} log:\n{}", node.id, node.log());
                }
                panic!("{what}: not within {limit:?}; last statuses: {statuses:#?}");
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }

    /// Samples for `duration`, only checking the invariant.
    pub async fn watch(&mut self, nodes: &[&Node], duration: Duration) {
        let end = std::time::Instant::now() + duration;
        while std::time::Instant::now() < end {
            self.sample(nodes);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
}

/// Waits until every node has a status file and all agree on one leader and term.
pub async fn wait_agreed(sampler: &mut Sampler, nodes: &[&Node]) -> (String, i64) {
    let (statuses, _) = sampler
        .until(
            nodes,
            Duration::from_secs(15),
            "all nodes agree on one leader",
            |s| s.iter().all(Option::is_some) && agreed_leader(s).is_some(),
        )
        .await;
    agreed_leader(&statuses).unwrap()
}

/// Waits until `nodes` agree on a leader in a term after `term`; returns it.
pub async fn wait_new_leader(sampler: &mut Sampler, nodes: &[&Node], term: i64) -> (String, i64) {
    let (statuses, _) = sampler
        .until(
            nodes,
            Duration::from_secs(15),
            "the nodes agree on a new leader",
            |s| agreed_leader(s).is_some_and(|(_, t)| t > term),
        )
        .await;
    agreed_leader(&statuses).unwrap()
}

/// The one node whose status says leader, if exactly one does and all others follow it.
pub fn agreed_leader(statuses: &[Option<StatusFile>]) -> Option<(String, i64)> {
    let statuses: Vec<&StatusFile> = statuses.iter().flatten().collect();
    let leaders: Vec<_> = statuses.iter().filter(|s| s.is_leader()).collect();
    let [leader] = leaders.as_slice() else {
        return None;
    };
    let agreed = statuses
        .iter()
        .all(|s| s.leader.as_deref() == Some(&leader.node_id) && s.term == leader.term);
    agreed.then(|| (leader.node_id.clone(), leader.term.unwrap()))
}
