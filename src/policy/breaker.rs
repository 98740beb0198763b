//! The circuit breaker of a route, one copy for `replay fallback` (driven
//! by recorded times) and `routeval serve` (driven by the clock), so what
//! the replay chooses is exactly what runs: `open_after` consecutive
//! failures open it for `open_ms`; then one half-open probe tries the route
//! while every other request goes to the fallback; the probe's success
//! closes it, its failure opens it again.
//!
//! Outcomes are learned at the time they happened, not in the order they
//! are reported: a request's outcome is queued with its time and learned by
//! the first decision at or after it, so two requests in flight at once see
//! the breaker as a gateway would.

#![deny(clippy::arithmetic_side_effects)]

use std::collections::BinaryHeap;

use crate::schema::BreakerSettings;

/// What the breaker does with a request arriving now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Closed: the route is tried.
    Route,
    /// Open past its time: this request is the half-open probe.
    Probe,
    /// Open, or a probe in flight: the request goes to the fallback.
    Fallback,
}

/// How a call to the route went, as its breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// A first token (or a whole answer) came in time: the route answered.
    FirstToken,
    /// An error status, or no connection, before a first token.
    Error,
    /// A 429 before a first token.
    RateLimited,
    /// No first token by the route's first-token deadline.
    Deadline,
    /// A first token in time, then a stream that stalled or broke: the
    /// stream's failure, not the route's, and the breaker counts it as
    /// the route answering.
    Stall,
}

impl CallOutcome {
    /// Whether the breaker counts it toward opening.
    pub fn is_failure(self) -> bool {
        match self {
            CallOutcome::FirstToken | CallOutcome::Stall => false,
            CallOutcome::Error | CallOutcome::RateLimited | CallOutcome::Deadline => true,
        }
    }
}

/// The breaker's state, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum State {
    Closed {
        failures: u32,
    },
    Open {
        until_ms: f64,
    },
    /// A probe is in flight; requests meanwhile go to the fallback.
    Probing,
}

/// An outcome the breaker has yet to learn, ordered by time (earliest
/// first in the heap).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pending {
    at_ms: f64,
    failure: bool,
    probe: bool,
}

impl Eq for Pending {}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at_ms.total_cmp(&self.at_ms)
    }
}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One route's breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    settings: BreakerSettings,
    state: State,
    opens: u64,
    closes: u64,
    pending: BinaryHeap<Pending>,
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            state: State::Closed { failures: 0 },
            opens: 0,
            closes: 0,
            pending: BinaryHeap::new(),
        }
    }

    pub fn settings(&self) -> BreakerSettings {
        self.settings
    }

    /// Times it has opened.
    pub fn opens(&self) -> u64 {
        self.opens
    }

    /// Times a probe's success closed it.
    pub fn closes(&self) -> u64 {
        self.closes
    }

    /// The state after every outcome up to `now_ms` is learned.
    pub fn state_at(&mut self, now_ms: f64) -> State {
        self.learn_until(now_ms);
        self.state
    }

    /// What happens to a request arriving at `now_ms`, after every outcome
    /// up to then is learned. A `Probe` must be followed by its outcome
    /// ([`Breaker::outcome`] with `probe`), or the breaker stays half-open.
    pub fn admit(&mut self, now_ms: f64) -> Admit {
        self.learn_until(now_ms);
        match self.state {
            State::Closed { .. } => Admit::Route,
            State::Open { until_ms } if now_ms >= until_ms => {
                self.state = State::Probing;
                Admit::Probe
            }
            State::Open { .. } | State::Probing => Admit::Fallback,
        }
    }

    /// How a call the breaker admitted as `admitted` went, known at
    /// `at_ms`. A call the breaker was not asked about (a fallback tried
    /// while closed) is `Admit::Route`.
    pub fn outcome(&mut self, at_ms: f64, call: CallOutcome, admitted: Admit) {
        debug_assert_ne!(admitted, Admit::Fallback, "a call the breaker sent away");
        self.pending.push(Pending {
            at_ms,
            failure: call.is_failure(),
            probe: admitted == Admit::Probe,
        });
    }

    /// Learns every outcome queued, whatever its time.
    pub fn learn_all(&mut self) {
        self.learn_until(f64::INFINITY);
    }

    fn learn_until(&mut self, now_ms: f64) {
        while self.pending.peek().is_some_and(|next| next.at_ms <= now_ms) {
            let next = self.pending.pop().expect("peeked");
            self.learn(next);
        }
    }

    fn learn(&mut self, outcome: Pending) {
        let open = |breaker: &mut Breaker| {
            breaker.state = State::Open {
                until_ms: outcome.at_ms + breaker.settings.open_ms,
            };
            breaker.opens = breaker.opens.saturating_add(1);
        };
        match (self.state, outcome.probe, outcome.failure) {
            (State::Probing, true, true) => open(self),
            (State::Probing, true, false) => {
                self.state = State::Closed { failures: 0 };
                self.closes = self.closes.saturating_add(1);
            }
            (State::Closed { failures }, false, true) => {
                let failures = failures.saturating_add(1);
                if failures >= self.settings.open_after {
                    open(self);
                } else {
                    self.state = State::Closed { failures };
                }
            }
            (State::Closed { .. }, false, false) => self.state = State::Closed { failures: 0 },
            // Outcomes of requests sent before the breaker opened change
            // nothing once it has.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerSettings {
            open_after: 2,
            open_ms: 1000.0,
            first_token_deadline_ms: Some(300.0),
        })
    }

    #[test]
    fn consecutive_failures_open_it_and_one_probe_closes_it() {
        let mut breaker = breaker();
        assert_eq!(breaker.admit(0.0), Admit::Route);
        breaker.outcome(300.0, CallOutcome::Deadline, Admit::Route);
        assert_eq!(breaker.admit(100.0), Admit::Route);
        breaker.outcome(400.0, CallOutcome::Error, Admit::Route);
        // Both failures are known only from 400 ms on.
        assert_eq!(breaker.admit(399.0), Admit::Route);
        breaker.outcome(450.0, CallOutcome::FirstToken, Admit::Route);
        assert_eq!(breaker.admit(400.0), Admit::Fallback);
        assert_eq!(breaker.opens(), 1);
        // The success sent before it opened changes nothing.
        assert_eq!(breaker.admit(1399.0), Admit::Fallback);
        assert_eq!(breaker.admit(1400.0), Admit::Probe);
        assert_eq!(breaker.admit(1401.0), Admit::Fallback);
        breaker.outcome(1500.0, CallOutcome::FirstToken, Admit::Probe);
        assert_eq!(breaker.admit(1500.0), Admit::Route);
        assert_eq!(breaker.closes(), 1);
    }

    #[test]
    fn a_failed_probe_opens_it_again() {
        let mut breaker = breaker();
        breaker.outcome(0.0, CallOutcome::RateLimited, Admit::Route);
        breaker.outcome(1.0, CallOutcome::Error, Admit::Route);
        assert_eq!(breaker.admit(1001.0), Admit::Probe);
        breaker.outcome(1300.0, CallOutcome::Deadline, Admit::Probe);
        assert_eq!(breaker.state_at(1300.0), State::Open { until_ms: 2300.0 });
        assert_eq!(breaker.opens(), 2);
    }

    #[test]
    fn a_success_between_failures_resets_the_count() {
        let mut breaker = breaker();
        breaker.outcome(0.0, CallOutcome::Error, Admit::Route);
        breaker.outcome(1.0, CallOutcome::FirstToken, Admit::Route);
        breaker.outcome(2.0, CallOutcome::Error, Admit::Route);
        assert_eq!(breaker.state_at(2.0), State::Closed { failures: 1 });
    }

    #[test]
    fn a_stream_that_stalls_after_its_first_token_is_the_route_answering() {
        let mut breaker = breaker();
        breaker.outcome(0.0, CallOutcome::Error, Admit::Route);
        breaker.outcome(1.0, CallOutcome::Stall, Admit::Route);
        breaker.outcome(2.0, CallOutcome::Error, Admit::Route);
        assert_eq!(breaker.state_at(2.0), State::Closed { failures: 1 });
        // A probe that stalls after its first token closes it.
        breaker.outcome(3.0, CallOutcome::Error, Admit::Route);
        assert_eq!(breaker.admit(1003.0), Admit::Probe);
        breaker.outcome(1100.0, CallOutcome::Stall, Admit::Probe);
        assert_eq!(breaker.state_at(1100.0), State::Closed { failures: 0 });
    }
}
