//! The statements a sequence is made of, and how a sequence draws them from its seed and
//! what the model says about the tables now.

use leaderd::store::memory::Table;
use leaderd::store::{
    Commands, Lease, LeaseRow, MemberRecord, MemberStanding, ProcessToken, RecordOrder,
};
use rand::Rng;
use rand::rngs::SmallRng;
use std::time::Duration;
use tokio::time::Instant;

use super::GUARD;

/// The nodes of a sequence (`d` records itself but holds nothing).
pub(super) const NODES: [&str; 4] = ["a", "b", "c", "d"];

/// One statement of the store, as both sides run it.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Get(String),
    EnsureRow(String),
    Claim(Lease),
    Reacquire(Lease),
    Renew(Lease, Commands),
    Release(Lease),
    /// `leaderd lock --hold-at-least`: keep the lease `left` more, renewed no more.
    Hold(Lease, Duration),
    /// `leaderd pause --for`.
    Pause(String, Duration),
    Resume(String),
    Resign {
        name: String,
        holder: String,
        term: i64,
    },
    /// `handover --to` (`offer`) or `handover --force --to`.
    Handover {
        name: String,
        holder: String,
        term: i64,
        to: String,
        offer: bool,
    },
    Accept {
        name: String,
        node: String,
        term: i64,
    },
    Record(MemberRecord, bool),
    HoldPreemption {
        election: String,
        node: String,
        hold: Duration,
    },
    Members(String),
    Prune(String, Duration),
    /// `leaderd locks`.
    HeldRows,
    /// The handover columns set by hand (an operator's UPDATE, a node of another
    /// version): a target with no window, a window with no target, or both, the window
    /// ending `until` from now (or before it).
    EditHandover {
        name: String,
        to: Option<String>,
        until: Option<(bool, Duration)>,
    },
}

impl Op {
    /// What kind of statement it is.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Op::Get(_) => "get",
            Op::EnsureRow(_) => "ensure_row",
            Op::Claim(_) => "claim",
            Op::Reacquire(_) => "reacquire",
            Op::Renew(..) => "renew",
            Op::Release(_) => "release",
            Op::Hold(..) => "hold",
            Op::Pause(..) => "pause",
            Op::Resume(_) => "resume",
            Op::Resign { .. } => "resign",
            Op::Handover { offer: true, .. } => "offer",
            Op::Handover { offer: false, .. } => "handover",
            Op::Accept { .. } => "accept",
            Op::Record(..) => "record_member",
            Op::HoldPreemption { .. } => "hold_preemption",
            Op::Members(_) => "members",
            Op::Prune(..) => "prune",
            Op::HeldRows => "held_rows",
            Op::EditHandover { .. } => "by_hand",
        }
    }
}

/// What a sequence draws its statements from: its seed's generator, its names, its
/// nodes' process tokens, the terms its rows have had and the nodes they were offered to.
pub(super) struct Draw {
    pub(super) rng: SmallRng,
    pub(super) names: Vec<String>,
    tokens: Vec<[ProcessToken; 2]>,
    /// Every term each row has had (0 first).
    pub(super) terms: Vec<Vec<i64>>,
    /// The node each row was last handed over to (a read hides it once its window ends).
    offered: Vec<Option<String>>,
    /// `older_than` of every prune in this sequence.
    pub(super) prune_after: Duration,
}

impl Draw {
    pub(super) fn new(mut rng: SmallRng, prefix: &str) -> Draw {
        let names = vec![format!("{prefix}e"), format!("lock:{prefix}j")];
        let tokens = NODES
            .iter()
            .map(|_| {
                [
                    ProcessToken::from_rng(&mut rng),
                    ProcessToken::from_rng(&mut rng),
                ]
            })
            .collect();
        let prune_after = [5, 30, 100][rng.random_range(0..3)];
        Draw {
            rng,
            terms: vec![vec![0]; names.len()],
            offered: vec![None; names.len()],
            names,
            tokens,
            prune_after: Duration::from_secs(prune_after),
        }
    }

    fn one_of<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.rng.random_range(0..items.len())]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// A duration of at least the guard band, whole milliseconds mostly (the statements
    /// bind whole milliseconds: a sub-millisecond part must make no difference).
    fn length(&mut self, max: Duration) -> Duration {
        let ms = self
            .rng
            .random_range(GUARD.as_millis() as u64..=max.as_millis() as u64);
        let sub_ms = match self.chance(0.2) {
            true => self.rng.random_range(0..1000),
            false => 0,
        };
        Duration::from_millis(ms) + Duration::from_micros(sub_ms)
    }

    /// A term for a write on row `name`: mostly the row's, sometimes one it had before or
    /// one it never had.
    fn term(&mut self, name: usize, row: Option<&LeaseRow>) -> i64 {
        let current = row.map_or(0, |row| row.term);
        match self.rng.random_range(0..10) {
            0..=7 => current,
            8 => {
                let terms = self.terms[name].clone();
                *self.one_of(&terms)
            }
            _ => current + 1,
        }
    }

    /// A node for a write on `row`: mostly its holder, if it has one.
    fn holder(&mut self, row: Option<&LeaseRow>) -> String {
        match row.and_then(|row| row.holder.clone()) {
            Some(holder) if self.chance(0.85) => holder,
            _ => self.one_of(&NODES[..3]).to_string(),
        }
    }

    fn lease(&mut self, name: usize, holder: String, term: i64) -> Lease {
        let node = NODES.iter().position(|n| *n == holder).unwrap_or(0);
        let twin = usize::from(self.chance(0.2));
        let token = self.tokens[node][twin];
        Lease {
            name: self.names[name].clone(),
            holder,
            token,
            ttl: self.length(Duration::from_secs(6)),
            term,
        }
    }

    /// The next statement, given the model's tables at `now`.
    pub(super) fn op(&mut self, model: &Table, now: Instant) -> Op {
        // An offer's target accepts it now and then: mostly while the offer is in force,
        // sometimes late (a slow node), while the lease lives on.
        for name in 0..self.names.len() {
            let Some(row) = model.lease_row(&self.names[name], now) else {
                continue;
            };
            let offered = row.pending.handover_to.clone();
            let (to, chance) = match offered.filter(|to| row.offered_to(to)) {
                Some(to) => (to, 0.3),
                None => match (&self.offered[name], row.live_holder()) {
                    (Some(to), Some(_)) => (to.clone(), 0.15),
                    _ => continue,
                },
            };
            if self.chance(chance) {
                let term = self.term(name, Some(&row));
                return Op::Accept {
                    name: self.names[name].clone(),
                    node: to,
                    term,
                };
            }
        }
        let kind = self.rng.random_range(0..100);
        // A leader's statements and the commands to it, mostly on a row with a live lease.
        let live: Vec<usize> = (0..self.names.len())
            .filter(|name| {
                let row = model.lease_row(&self.names[*name], now);
                row.is_some_and(|row| row.live_holder().is_some())
            })
            .collect();
        let name = match (25..=72).contains(&kind) && !live.is_empty() && self.chance(0.85) {
            true => *self.one_of(&live),
            false => self.rng.random_range(0..self.names.len()),
        };
        let row = model.lease_row(&self.names[name], now);
        let row = row.as_ref();
        let text = self.names[name].clone();
        match kind {
            0..=7 => Op::Get(text),
            8..=10 => Op::EnsureRow(text),
            11..=24 => {
                let holder = self.one_of(&NODES[..3]).to_string();
                let term = self.term(name, row);
                Op::Claim(self.lease(name, holder, term))
            }
            25..=29 => {
                let holder = self.holder(row);
                let term = self.term(name, row);
                Op::Reacquire(self.lease(name, holder, term))
            }
            30..=43 => {
                let holder = self.holder(row);
                let term = self.term(name, row);
                let seen = match (row, self.chance(0.8)) {
                    (Some(row), true) => row.commands(),
                    _ => Commands {
                        resign: self.chance(0.5),
                        paused: self.chance(0.5),
                    },
                };
                Op::Renew(self.lease(name, holder, term), seen)
            }
            44..=50 => {
                let holder = self.holder(row);
                let term = self.term(name, row);
                Op::Release(self.lease(name, holder, term))
            }
            51..=53 => {
                let holder = self.holder(row);
                let term = self.term(name, row);
                let left = self.length(Duration::from_secs(10));
                Op::Hold(self.lease(name, holder, term), left)
            }
            54..=56 => {
                // Mostly short, so that the sequence goes on past it; `pause` without
                // `--for` is an hour.
                let duration = match self.rng.random_range(0..10) {
                    0..=7 => self.length(Duration::from_secs(5)),
                    8 => self.length(Duration::from_secs(60)),
                    _ => Duration::from_secs(3600),
                };
                Op::Pause(text, duration)
            }
            57 | 58 => Op::Resume(text),
            59..=61 => Op::Resign {
                holder: self.holder(row),
                term: self.term(name, row),
                name: text,
            },
            62..=67 => {
                let to = self.one_of(&NODES).to_string();
                self.offered[name] = Some(to.clone());
                Op::Handover {
                    holder: self.holder(row),
                    term: self.term(name, row),
                    to,
                    offer: self.chance(0.5),
                    name: text,
                }
            }
            68..=72 => {
                let offered = self.offered[name].clone();
                let node = match offered {
                    Some(to) if self.chance(0.8) => to,
                    _ => self.one_of(&NODES).to_string(),
                };
                Op::Accept {
                    node,
                    term: self.term(name, row),
                    name: text,
                }
            }
            73..=79 => {
                let record = MemberRecord {
                    election: text,
                    node_id: self.one_of(&NODES).to_string(),
                    standing: *self.one_of(&[
                        MemberStanding::Observer,
                        MemberStanding::Candidate,
                        MemberStanding::Starting,
                        MemberStanding::Unhealthy,
                        MemberStanding::Stopped,
                    ]),
                    priority: self.rng.random_range(0..4),
                    version: self.one_of(&["1.0", "1.1"]).to_string(),
                    host: self.one_of(&["h1", "h2"]).to_string(),
                    // Two processes, and records late or not.
                    order: RecordOrder {
                        process: self.rng.random_range(1..3),
                        count: self.rng.random_range(0..4),
                    },
                };
                Op::Record(record, self.chance(0.3))
            }
            80..=84 => {
                // Mostly a member's, often one held already (a shorter hold must not cut
                // a longer one short).
                let members = model.members(now, &text);
                let node = match members.is_empty() || self.chance(0.15) {
                    true => self.one_of(&NODES).to_string(),
                    false => self.one_of(&members).node_id.clone(),
                };
                Op::HoldPreemption {
                    election: text,
                    node,
                    hold: self.length(Duration::from_secs(60)),
                }
            }
            85..=89 => Op::Members(text),
            90 => Op::Prune(text, self.prune_after),
            91..=95 => Op::HeldRows,
            _ => {
                let to = match self.chance(0.7) {
                    true => Some(self.one_of(&NODES).to_string()),
                    false => None,
                };
                let until = match (to.is_none(), self.chance(0.6)) {
                    (true, _) | (false, true) => {
                        let ahead = self.chance(0.5);
                        Some((ahead, self.length(Duration::from_secs(5))))
                    }
                    (false, false) => None,
                };
                Op::EditHandover {
                    name: text,
                    to,
                    until,
                }
            }
        }
    }

    /// How far the next stage moves time (before it is kept clear of the boundaries), and
    /// whether backwards: the database clock stepping back. Mostly less than a lease
    /// (0.5 to 6 s), so that leases live on across stages; now and then far past every
    /// lease, pause and preemption hold, and past the prune age.
    pub(super) fn advance(&mut self) -> (bool, Duration) {
        match self.rng.random_range(0..25) {
            0 => (true, self.length(Duration::from_secs(3))),
            1 => (false, self.length(Duration::from_secs(120))),
            2..=13 => (false, self.length(GUARD * 3)),
            _ => (false, self.length(Duration::from_secs(4))),
        }
    }
}
