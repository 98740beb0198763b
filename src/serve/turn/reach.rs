//! A stage's route reached, or its fallback: the route's breaker asked
//! first, one attempt made, and the next step taken as [`super::next`]
//! decides from its outcome and the fallback free for it.

use std::time::Instant;

use crate::policy::{Admit, FallbackMove, Stay};

use super::super::failure::Failure;
use super::super::reply::overloaded;
use super::super::served::ServedRecord;
use super::super::witness::{Event, see};
use super::attempt::Attempt;
use super::next::{Outcome, Step, next, wants_fallback};
use super::{Reached, Turn, TurnEnd};

impl Turn<'_> {
    /// This stage's route, or its fallback: the route that gave a first
    /// byte, or the client's response (already recorded).
    pub(super) async fn reach(&self, record: &mut ServedRecord) -> Result<Box<Reached>, TurnEnd> {
        let resilience = &self.app.resilience;
        let (from, offset_ms) = self.stage_start();
        let now_ms = self.arrival_ms + offset_ms;
        if let Some(route) = self.decided.deployed.config.table.route(self.route) {
            resilience.count_call(route, now_ms, self.tokens);
        }
        let admitted = resilience.admit(self.route, now_ms);
        if admitted == Some(Admit::Fallback) {
            let outcome = Outcome::SentOn;
            return match self.step(&outcome, now_ms) {
                Step::Move { to, reason } => {
                    see(self.app, record, Event::Sent { to: &to, reason });
                    self.moved(record, &to).await
                }
                _ => Err(self.breaker_open(record.clone(), now_ms)),
            };
        }
        let admitted = admitted.unwrap_or(Admit::Route);
        let attempt = self.attempt(self.route, from, offset_ms).await;
        self.learned(record, self.route, &attempt, admitted);
        let (outcome, at_ms) = match &attempt {
            Attempt::Reached(reached) => (Outcome::Reached, reached.ttft_ms),
            Attempt::Failed { failure, at_ms } => (
                Outcome::NoFirstByte {
                    moved: failure.moved_reason(),
                },
                *at_ms,
            ),
            Attempt::Full(_) => (Outcome::NoSlot, self.elapsed_ms()),
        };
        match (self.step(&outcome, self.arrival_ms + at_ms), attempt) {
            (Step::Answer, Attempt::Reached(reached)) => Ok(reached),
            (_, Attempt::Full(full)) => Err(TurnEnd::Answered(overloaded(
                self.app,
                record.clone(),
                self.started,
                full,
            ))),
            (Step::Move { to, .. }, Attempt::Failed { failure, at_ms }) => {
                self.left(record, &failure, at_ms, Ok(&to));
                self.moved(record, &to).await
            }
            (Step::Fail(stayed), Attempt::Failed { failure, at_ms }) => {
                self.left(record, &failure, at_ms, Err(stayed.stay()));
                Err(self.failed(record.clone(), self.route, failure).await)
            }
            _ => unreachable!("a first byte is answered, and nothing else is"),
        }
    }

    /// The step after `outcome` at `now_ms`, the fallback looked for (and
    /// its minute and the budget taken) only where the outcome may move.
    pub(super) fn step(&self, outcome: &Outcome, now_ms: f64) -> Step {
        let fallback = wants_fallback(outcome).map(|kind| self.fallback_for(now_ms, kind));
        next(outcome, fallback)
    }

    /// The request, moved to `fallback` (its record already says so).
    pub(super) async fn moved(
        &self,
        record: &mut ServedRecord,
        fallback: &str,
    ) -> Result<Box<Reached>, TurnEnd> {
        let attempt = self
            .attempt(fallback, Instant::now(), self.elapsed_ms())
            .await;
        self.learned(record, fallback, &attempt, Admit::Route);
        match attempt {
            Attempt::Reached(reached) => Ok(reached),
            Attempt::Full(full) => Err(TurnEnd::Answered(overloaded(
                self.app,
                record.clone(),
                self.started,
                full,
            ))),
            Attempt::Failed { failure, at_ms } => {
                let event = Event::Failed {
                    route: fallback,
                    failure: failure.facts(self.deadline_ms(fallback).0, self.billed(fallback)),
                    at_ms,
                    to: Err(Stay::NoFallback),
                    budget: None,
                };
                see(self.app, record, event);
                Err(self.failed(record.clone(), fallback, failure).await)
            }
        }
    }

    /// What the route's breaker learns of an attempt: its first byte, how
    /// it gave none, or (a probe that was never sent, for want of a slot)
    /// a failure, so the half-open state ends and the breaker reopens;
    /// and a hedged call's losing copy.
    fn learned(&self, record: &mut ServedRecord, route: &str, attempt: &Attempt, admitted: Admit) {
        let event = match attempt {
            Attempt::Reached(reached) => {
                self.reached(record, reached, admitted);
                return;
            }
            Attempt::Failed { failure, at_ms } => Event::NoFirstByte {
                route,
                arrival_ms: self.arrival_ms,
                at_ms: *at_ms,
                outcome: failure.outcome(),
                admitted,
            },
            Attempt::Full(_) if admitted == Admit::Probe => Event::NoFirstByte {
                route,
                arrival_ms: self.arrival_ms,
                at_ms: self.elapsed_ms(),
                outcome: crate::policy::CallOutcome::Error,
                admitted,
            },
            Attempt::Full(_) => return,
        };
        see(self.app, record, event);
    }

    /// A route's first byte: its breaker learns it, and a hedged call's
    /// losing copy is recorded.
    fn reached(&self, record: &mut ServedRecord, reached: &Reached, admitted: Admit) {
        let event = Event::FirstByte {
            route: &reached.route,
            arrival_ms: self.arrival_ms,
            at_ms: reached.ttft_ms,
            admitted,
        };
        see(self.app, record, event);
        if let Some(hedged) = &reached.hedged {
            let event = Event::Hedged {
                route: &reached.route,
                copy_won: hedged.copy_won,
                cancelled_at_ms: hedged.cancelled_at_ms,
                billed: self.billed(&reached.route),
            };
            see(self.app, record, event);
        }
    }

    /// This stage's route left after `failure`: for `to`, or staying.
    fn left(
        &self,
        record: &mut ServedRecord,
        failure: &Failure,
        at_ms: f64,
        to: Result<&str, Stay>,
    ) {
        let budget = (to == Err(Stay::Budget)).then(|| {
            self.app
                .resilience
                .budget_at(self.arrival_ms + self.elapsed_ms())
        });
        let event = Event::Failed {
            route: self.route,
            failure: failure.facts(self.deadline_ms(self.route).0, self.billed(self.route)),
            at_ms,
            to,
            budget,
        };
        see(self.app, record, event);
    }

    /// The first fallback of this stage's route the request may use now:
    /// allowed for its tenant, its breaker closed, within its `rpm`/`tpm`;
    /// and after a failed attempt, a call the retry budget allows.
    pub(super) fn fallback_for(&self, now_ms: f64, kind: FallbackMove) -> Result<String, Stay> {
        let table = &self.decided.deployed.config.table;
        let resilience = &self.app.resilience;
        let allowed: Vec<&str> = table
            .fallbacks_of(self.route)
            .filter(|name| self.decided.allowed.iter().any(|allowed| allowed == name))
            .collect();
        if allowed.is_empty() {
            return Err(Stay::NoFallback);
        }
        let closed: Vec<_> = allowed
            .into_iter()
            .filter(|name| resilience.is_closed(name, now_ms))
            .filter_map(|name| table.route(name))
            .collect();
        if closed.is_empty() {
            return Err(Stay::Capacity);
        }
        resilience.take_fallback(&closed, now_ms, self.tokens, kind)
    }
}
