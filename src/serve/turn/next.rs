//! What a request does after each step of its turn, decided from the
//! step's outcome and, where it may move, the fallback the breakers, the
//! routes' minutes and the retry budget allow: answer, move, or fail.
//! Pure, so every case is a unit test with no HTTP.

use crate::policy::{FallbackMove, Stay};
use crate::records::{Move, Reason};

/// How a step of a turn ended, as far as the next step depends on it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// The route's breaker sent the request on without a call.
    SentOn,
    /// The route gave its first byte in time.
    Reached,
    /// The route had no slot free: the client is told so (429), and the
    /// request does not move.
    NoSlot,
    /// The route gave no first byte; a request moved by it gives `moved`.
    NoFirstByte { moved: Reason },
    /// The answer broke after its first byte, before anything reached the
    /// client: `stalled` (else cut or malformed); `movable` on the stage's
    /// own route as a stall, a cut or a malformed stream (not on the
    /// fallback it had moved to, and not past the total deadline or too
    /// long to assemble).
    Broke { stalled: bool, movable: bool },
}

/// The next step.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    /// The route's answer goes to the client.
    Answer,
    /// The request moves to `to`, its record saying `reason`.
    Move { to: String, reason: Reason },
    /// The client gets the failure.
    Fail(Stayed),
}

/// Why a request could not move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Stayed {
    /// Its route's breaker is open and no fallback could take it.
    BreakerOpen,
    /// The fallback could not take it: there is none, or no capacity, or
    /// no budget.
    Fallback(Stay),
    /// Its outcome moves nowhere (a fallback's own broken answer).
    Nowhere,
}

impl Stayed {
    /// The reason the record gives where the request stayed for a reason
    /// of its own (an open breaker, no capacity, no budget); `None`: it
    /// says how its route failed.
    pub(super) fn reason(self) -> Option<Reason> {
        match self {
            Stayed::BreakerOpen => Some(Reason::BreakerOpen),
            Stayed::Fallback(stay) => stay.reason(),
            Stayed::Nowhere => None,
        }
    }

    /// What the log says of the fallback.
    pub(super) fn stay(self) -> Stay {
        match self {
            Stayed::Fallback(stay) => stay,
            Stayed::BreakerOpen | Stayed::Nowhere => Stay::NoFallback,
        }
    }
}

/// Whether `outcome` may move the request, and as what kind of call: the
/// fallback is looked for (and its minute and the budget taken) only then.
pub(super) fn wants_fallback(outcome: &Outcome) -> Option<FallbackMove> {
    match outcome {
        Outcome::Reached | Outcome::NoSlot => None,
        Outcome::SentOn => Some(FallbackMove::WithoutAttempt),
        Outcome::NoFirstByte { .. } => Some(FallbackMove::AfterAttempt),
        // A fallback's broken answer has nowhere further to go.
        Outcome::Broke { movable, .. } => movable.then_some(FallbackMove::AfterAttempt),
    }
}

/// The next step after `outcome`, given the fallback found for it (asked
/// for where [`wants_fallback`] says).
pub(super) fn next(outcome: &Outcome, fallback: Option<Result<String, Stay>>) -> Step {
    let moved = match outcome {
        Outcome::Reached => return Step::Answer,
        Outcome::NoSlot => return Step::Fail(Stayed::Nowhere),
        Outcome::SentOn => Reason::Fallback(Move::Breaker),
        Outcome::NoFirstByte { moved } => moved.clone(),
        Outcome::Broke { stalled, .. } => Reason::Fallback(if *stalled {
            Move::Deadline
        } else {
            Move::Error
        }),
    };
    match (outcome, fallback) {
        (_, Some(Ok(to))) => Step::Move { to, reason: moved },
        (Outcome::SentOn, _) => Step::Fail(Stayed::BreakerOpen),
        (_, Some(Err(stay))) => Step::Fail(Stayed::Fallback(stay)),
        (_, None) => Step::Fail(Stayed::Nowhere),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records;

    fn failed() -> Outcome {
        Outcome::NoFirstByte {
            moved: Reason::Fallback(Move::Deadline),
        }
    }

    #[test]
    fn a_first_byte_is_answered_and_looks_for_no_fallback() {
        assert_eq!(wants_fallback(&Outcome::Reached), None);
        assert_eq!(next(&Outcome::Reached, None), Step::Answer);
    }

    #[test]
    fn a_route_with_no_slot_free_fails_where_it_is() {
        assert_eq!(wants_fallback(&Outcome::NoSlot), None);
        assert_eq!(next(&Outcome::NoSlot, None), Step::Fail(Stayed::Nowhere));
    }

    #[test]
    fn a_failed_route_moves_as_its_failure_says_when_a_fallback_is_free() {
        assert_eq!(wants_fallback(&failed()), Some(FallbackMove::AfterAttempt));
        assert_eq!(
            next(&failed(), Some(Ok("big".to_owned()))),
            Step::Move {
                to: "big".to_owned(),
                reason: Reason::Fallback(Move::Deadline)
            }
        );
    }

    #[test]
    fn a_failed_route_that_cannot_move_says_why_unless_it_has_no_fallback() {
        let reason_of = |step: Step| match step {
            Step::Fail(stayed) => stayed.reason(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason_of(next(&failed(), Some(Err(Stay::Budget)))),
            Some(Reason::NoFallback(records::Stay::Budget))
        );
        assert_eq!(
            reason_of(next(&failed(), Some(Err(Stay::Capacity)))),
            Some(Reason::NoFallback(records::Stay::Capacity))
        );
        assert_eq!(
            next(&failed(), Some(Err(Stay::NoFallback))),
            Step::Fail(Stayed::Fallback(Stay::NoFallback))
        );
        assert_eq!(
            reason_of(next(&failed(), Some(Err(Stay::NoFallback)))),
            None
        );
    }

    #[test]
    fn an_open_breaker_moves_without_an_attempt_or_refuses_as_open() {
        assert_eq!(
            wants_fallback(&Outcome::SentOn),
            Some(FallbackMove::WithoutAttempt)
        );
        assert_eq!(
            next(&Outcome::SentOn, Some(Ok("big".to_owned()))),
            Step::Move {
                to: "big".to_owned(),
                reason: Reason::Fallback(Move::Breaker)
            }
        );
        for stay in [Stay::NoFallback, Stay::Capacity, Stay::Budget] {
            let step = next(&Outcome::SentOn, Some(Err(stay)));
            assert_eq!(step, Step::Fail(Stayed::BreakerOpen));
            assert_eq!(
                Stayed::BreakerOpen.reason(),
                Some(Reason::BreakerOpen),
                "{step:?}"
            );
        }
    }

    #[test]
    fn a_broken_answer_moves_once_from_its_own_route_only() {
        let own = Outcome::Broke {
            stalled: true,
            movable: true,
        };
        let fallback = Outcome::Broke {
            stalled: false,
            movable: false,
        };
        assert_eq!(wants_fallback(&own), Some(FallbackMove::AfterAttempt));
        assert_eq!(wants_fallback(&fallback), None);
        assert_eq!(
            next(&own, Some(Ok("big".to_owned()))),
            Step::Move {
                to: "big".to_owned(),
                reason: Reason::Fallback(Move::Deadline)
            }
        );
        assert_eq!(next(&fallback, None), Step::Fail(Stayed::Nowhere));
        let cut = Outcome::Broke {
            stalled: false,
            movable: true,
        };
        assert_eq!(
            next(&cut, Some(Ok("big".to_owned()))),
            Step::Move {
                to: "big".to_owned(),
                reason: Reason::Fallback(Move::Error)
            }
        );
    }
}
