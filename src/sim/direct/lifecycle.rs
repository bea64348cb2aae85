//! How a direct run carries out a process's life: its start, SIGKILL, SIGTERM, a freeze
//! or a suspend, a failing health check; each input in the machine's order (`Source::ORDER`); and the
//! machine's actions: statements to the database, a durable status after the status
//! file's delay, a resign once the leader work has stopped.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::process::{Process, Sent};
use super::statement::run_statement;
use super::{ELECTION, Event, World};
use crate::election::ElectionSettings;
use crate::election::clock::Instants;
use crate::election::machine::{Action, Input, Machine, Moment, Reply, Source, Statement};
use crate::election::{Role, Status};
use crate::sim::database::judge_new_term;
use crate::sim::db::Dice;
use crate::sim::models::FILE_RETRY;
use crate::sim::schedule::Fault;
use crate::store::{ProcessToken, StoreError};

/// How long the status file takes to make a publication durable, undisturbed.
const STATUS_FILE_WRITE: Duration = Duration::from_millis(1);

impl World {
    /// Starts a process for `node` (the twin of a live one if there is one).
    pub(super) fn start(&mut self, node: usize) {
        let spec = self.scenario.nodes[node].clone();
        let twin = self.processes.iter().any(|p| p.alive && p.node == node);
        let incarnation = self.processes.iter().filter(|p| p.node == node).count();
        let label = format!("{}#{incarnation}", spec.id);
        let settings = ElectionSettings::new(
            ELECTION,
            &spec.id,
            self.scenario.ttl,
            self.scenario.interval,
        )
        .expect("the scenario's settings are valid");
        let mut machine = Machine::new(Arc::new(settings), self.base + self.now);
        machine.release_waits_for_durable = true;
        let mut rng = SmallRng::seed_from_u64(self.random_seed());
        machine.token = ProcessToken::from_rng(&mut rng);
        machine.rng = rng;
        let dice = Dice::new(
            SmallRng::seed_from_u64(self.random_seed()),
            self.base,
            node,
            &self.scenario.events,
        );
        let unhealthy = self.scenario.events.iter().enumerate().any(|(i, e)| {
            self.open[i] && matches!(e.fault, Fault::Unhealthy { node: n } if n == node)
        });
        // A restart drawn while its host sleeps runs from the wake: it sleeps too.
        let host_wakes_at = (self.scenario.events.iter().enumerate())
            .filter(|(i, e)| {
                self.open[*i] && matches!(e.fault, Fault::Suspend { node: n } if n == node)
            })
            .map(|(_, e)| e.until)
            .max();
        self.processes.push(Process {
            node,
            label: label.clone(),
            machine,
            alive: true,
            stop: false,
            stopped: false,
            unhealthy,
            in_flight: None,
            arrived: None,
            hint: false,
            resign: None,
            frozen_until: Duration::ZERO,
            slept: Duration::ZERO,
            started: self.now,
            timer: 0,
            look_at: None,
            connected: None,
            dice,
            sent: VecDeque::new(),
            status: Status::initial(),
            last_term: None,
            twin,
        });
        self.note(&label, || "starts".to_owned());
        let index = self.processes.len() - 1;
        match host_wakes_at {
            Some(until) => self.freeze_process(index, until),
            None => self.pump(index),
        }
    }

    fn live(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.processes.len())
            .filter(move |&i| self.processes[i].alive && self.processes[i].node == node)
    }

    /// SIGKILL: the process ends at once; its statements on their way still run.
    pub(super) fn kill(&mut self, node: usize) {
        for index in self.live(node).collect::<Vec<_>>() {
            self.end(index, "killed");
        }
    }

    pub(super) fn kill_twin(&mut self, node: usize) {
        let twins: Vec<usize> = self
            .live(node)
            .filter(|&i| self.processes[i].twin)
            .collect();
        for index in twins {
            self.end(index, "killed (twin)");
        }
    }

    fn end(&mut self, index: usize, how: &str) {
        let p = &mut self.processes[index];
        p.alive = false;
        p.status.role = Role::Unknown;
        let label = p.label.clone();
        self.note(&label, || how.to_owned());
    }

    /// SIGTERM: the daemon closes the claim gate, then the election steps down.
    pub(super) fn stop(&mut self, node: usize) {
        for index in self.live(node).collect::<Vec<_>>() {
            self.processes[index].stop = true;
            self.pump(index);
        }
    }

    /// Freezes the node's processes until `until` (SIGSTOP, or the host asleep).
    pub(super) fn freeze(&mut self, node: usize, until: Duration) {
        for index in self.live(node).collect::<Vec<_>>() {
            self.freeze_process(index, until);
        }
    }

    fn freeze_process(&mut self, index: usize, until: Duration) {
        let p = &mut self.processes[index];
        p.frozen_until = until;
        let generation = p.timer;
        self.at(
            until,
            Event::Timer {
                process: index,
                generation,
            },
        );
    }

    /// The node's host wakes after sleeping `slept`: its processes' monotonic clocks fall
    /// that far behind (their timers, on that clock, fire that much later).
    pub(super) fn woke(&mut self, node: usize, slept: Duration) {
        for index in self.live(node).collect::<Vec<_>>() {
            let p = &mut self.processes[index];
            // Seed 70260: a process restarted during the sleep lagged by all of it.
            p.slept += slept.min(self.now.saturating_sub(p.started));
        }
    }

    /// A failing health check closes the claim gate, and a leader resigns.
    pub(super) fn set_unhealthy(&mut self, node: usize, unhealthy: bool) {
        for index in self.live(node).collect::<Vec<_>>() {
            let p = &mut self.processes[index];
            p.unhealthy = unhealthy;
            if unhealthy && p.machine.is_leading() {
                p.resign = Some(None);
            }
            self.pump(index);
        }
    }

    /// The process's clocks now.
    fn moment(&self, index: usize) -> Moment {
        let p = &self.processes[index];
        Moment {
            at: Instants {
                at: self.base + self.now - p.slept,
                boot: Duration::from_secs(1000) + self.now,
            },
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + self.now,
            claims_open: !p.stopped && !p.unhealthy && self.scenario.nodes[p.node].candidate,
        }
    }

    /// Gives the process every input that is ready, in [`Source::ORDER`], then sets its
    /// timer.
    pub(super) fn pump(&mut self, index: usize) {
        loop {
            let p = &mut self.processes[index];
            if !p.alive || self.now < p.frozen_until || self.violation.is_some() {
                return;
            }
            let mono = self.base + self.now - p.slept;
            let machine = &p.machine;
            let source = machine.next_source(mono, |source| match source {
                Source::Stop => p.stop,
                Source::Look => p.look_at.is_some_and(|look| look <= mono),
                Source::ReleaseHint => p.hint,
                // Nothing in a direct run asks to renew now.
                Source::RenewRequest => false,
                Source::Resign => p.resign.is_some(),
                Source::Answer => p.arrived.is_some(),
                Source::Due => machine.next_round().is_some_and(|due| due <= mono),
            });
            let input = match source {
                None => break,
                Some(Source::Stop) => {
                    (p.stop, p.stopped) = (false, true);
                    Input::Stop
                }
                Some(Source::Look) => {
                    p.look_at = None;
                    Input::Look
                }
                Some(Source::ReleaseHint) => {
                    p.hint = false;
                    Input::ReleaseHint
                }
                Some(Source::RenewRequest) => Input::RenewRequested,
                Some(Source::Resign) => Input::Resign(p.resign.take().flatten()),
                Some(Source::Answer) => {
                    p.in_flight = None;
                    Input::Answer(p.arrived.take().expect("an answer is ready"))
                }
                Some(Source::Due) => Input::Due,
            };
            let now = self.moment(index);
            self.steps += 1;
            let label = self.processes[index].label.clone();
            self.note(&label, || format!("{input:?}"));
            let actions = self.processes[index].machine.step(now, input);
            self.carry_out(index, actions);
        }
        // The next timer: the round or the deadline, on the process's monotonic clock.
        let p = &mut self.processes[index];
        let mono = self.base + self.now - p.slept;
        p.look_at = p.machine.next_look(mono);
        let wake = [p.look_at, p.machine.next_round()]
            .into_iter()
            .flatten()
            .min();
        p.timer += 1;
        if let Some(wake) = wake {
            let generation = p.timer;
            let at = wake.saturating_duration_since(self.base) + p.slept;
            self.at(
                at,
                Event::Timer {
                    process: index,
                    generation,
                },
            );
        }
    }

    fn carry_out(&mut self, index: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send(statement) => self.send_from(index, statement),
                Action::AwaitDurable { version, within } => {
                    let id = self.fresh_id();
                    self.processes[index].in_flight = Some(id);
                    self.await_durable(index, id, version, within)
                }
                Action::Abandon => self.processes[index].in_flight = None,
                Action::Publish(status) => {
                    self.check_published(index, &status);
                    let label = self.processes[index].label.clone();
                    self.note(&label, || {
                        format!(
                            "publishes {:?} term {:?} leader {:?}",
                            status.role, status.term, status.leader
                        )
                    });
                    self.processes[index].status = status;
                }
                Action::PassOnResign { term } => {
                    // The leader work stops (on_demoted), then the hooks resign.
                    let step_down = self.scenario.nodes[self.processes[index].node].step_down;
                    self.at(
                        self.now + step_down,
                        Event::Resign {
                            process: index,
                            term,
                        },
                    );
                }
                Action::Finish(_) => self.end(index, "stopped"),
                Action::Event(_)
                | Action::Report(_)
                | Action::RoundFailed(_)
                | Action::AnswerRenewals(_) => {}
            }
        }
    }

    /// Sends a statement of `index`'s: properties 5 and 6 at the sending.
    fn send_from(&mut self, index: usize, statement: Statement) {
        let id = self.fresh_id();
        let now = self.now;
        let p = &mut self.processes[index];
        p.in_flight = Some(id);
        let label = p.label.clone();
        while p
            .sent
            .front()
            .is_some_and(|t| now - *t >= Duration::from_secs(1))
        {
            p.sent.pop_front();
        }
        p.sent.push_back(now);
        let count = p.sent.len();
        let starts_term = matches!(
            statement,
            Statement::Claim { .. } | Statement::Reacquire { .. }
        );
        let stopped = p.stopped;
        let sent = Sent {
            process: index,
            id,
            statement,
            sent_at: now,
            clock_at: now,
            epoch: 0,
            back: Duration::ZERO,
            lose_answer: false,
            settings: Arc::clone(&p.machine.settings),
            token: p.machine.token,
        };
        self.note(&label, || format!("sends {statement:?}"));
        if count > crate::sim::world::STATEMENTS_PER_SECOND {
            self.fail(
                "5: no node sends more than 20 statements in a second",
                format!("{label} sent {count} statements in the last second"),
            );
        }
        if stopped && starts_term {
            self.fail(
                "6: a node that has begun to stop never starts a term",
                format!("{label} sends {statement:?} after its stop"),
            );
        }
        self.send(sent);
    }

    /// The status file makes `version` durable after its delay, retrying while its writes
    /// fail; the answer says whether that came within `within`.
    fn await_durable(&mut self, index: usize, id: u64, _version: u64, within: Duration) {
        let node = self.processes[index].node;
        let mut durable_in = STATUS_FILE_WRITE;
        for (i, event) in self.scenario.events.iter().enumerate() {
            if let Fault::SlowStatusFile {
                node: n,
                delay,
                fail,
            } = event.fault
            {
                if n == node && self.open[i] {
                    durable_in += delay;
                    if fail {
                        let failing = event.until.saturating_sub(self.now);
                        durable_in += failing + FILE_RETRY;
                    }
                }
            }
        }
        let answer = Ok(Reply::Durable(durable_in <= within));
        let at = self.now + durable_in.min(within);
        self.at(
            at,
            Event::Arrive {
                process: index,
                id,
                answer,
            },
        );
    }

    /// The statement reaches the database and runs, unless a restart cut its connection.
    pub(super) fn execute(&mut self, sent: Sent) {
        if self.db.epoch != sent.epoch {
            let answer = Err(StoreError::QueryTimeout { after: sent.back });
            return self.answer(&sent, Duration::ZERO, answer);
        }
        let db_now = self.db_clock_at(sent.clock_at);
        self.db.failures.before_statement(self.now, &self.db.table);
        let ran = run_statement(
            &mut self.db.table,
            db_now,
            &sent.settings,
            sent.token,
            sent.statement,
        );
        let me = sent.settings.node_id();
        if let Some((before, reacquired)) = ran.started {
            judge_new_term(&mut self.db, before, me, reacquired);
            // No term is issued twice over the run, a rollback's included.
            if let Reply::Started(Some(new)) = ran.reply {
                let breach = self.db.failures.issued(new, me);
                self.db.breaches.extend(breach);
            }
        }
        if ran.released {
            self.notify_all();
        }
        let reply = ran.reply;
        let label = self.processes[sent.process].label.clone();
        self.note(&label, || format!("{:?} runs: {reply:?}", sent.statement));
        if let Some((property, detail)) = self.db.breaches.pop() {
            self.fail(property, detail);
        }
        let answer = match sent.lose_answer {
            true => Err(StoreError::QueryTimeout { after: sent.back }),
            false => Ok(reply),
        };
        self.answer(&sent, sent.back, answer);
    }
}
