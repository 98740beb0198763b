//! The one consumer of a request's events. Every step of a request
//! (refused, read, decided, a stage begun, a call ended, a first byte, a
//! hedge, a move, a verdict, its end) is a typed [`Event`] that the step
//! hands here; this module alone folds it into the request's record, the
//! metrics, the spans, the breakers and the log, so the facts of one
//! request cannot drift apart between files. `tests/serve_corridor.rs`
//! holds that no other file of serve sets a record's field.

mod end;
mod redaction;

use axum::http::StatusCode;
use opentelemetry::KeyValue;

use crate::policy::{Admit, CallOutcome, Stay};
use crate::records::{Cause, Draw, HEDGE_ID_SUFFIX, Reason, Status};

use super::app::App;
use super::keys::Identity;
use super::log::Level;
use super::served::ServedRecord;
use super::trace::ChildSpan;

pub(super) use end::{AnswerEnd, Refusal, answered, attempt_finished, begin, refused, unfinished};

/// What a route's failure before its first byte says, for the record, the
/// log and the breaker.
#[derive(Debug, Clone)]
pub(super) struct FailureFacts {
    /// `deadline`, `unreachable` or `status`.
    pub kind: &'static str,
    /// What the log line says it did ("answered 503", "gave no first token
    /// within …").
    pub what: String,
    pub status: Status,
    pub upstream_status: Option<u16>,
    pub cause: Cause,
    /// The reason a request moved by it gives.
    pub moved_reason: Reason,
    /// The prompt, where the route may have read it (it gave no first
    /// token in time); `None` for an error status or no answer.
    pub billed: Option<Billed>,
}

/// What a call that was sent and then given up cost, as far as serve can
/// tell: its prompt, estimated as `run` estimates one, at its route's
/// input price. A route bills the prompt it read whether or not its answer
/// was taken; output it generated before it was cancelled is not seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Billed {
    pub input_tokens: u64,
    pub cost_usd: f64,
}

impl Billed {
    /// Written into an attempt's record.
    fn into_record(self, attempt: &mut ServedRecord) {
        attempt.record.input_tokens = Some(self.input_tokens);
        attempt.record.cached_input_tokens = Some(0);
        attempt.record.output_tokens = Some(0);
        attempt.record.cost_usd = Some(self.cost_usd);
        attempt.record.token_source = Some(crate::records::TokenSource::Estimated);
    }
}

/// An answer given up after its first byte while serve was assembling it
/// (nothing had reached the client).
#[derive(Debug, Clone)]
pub(super) struct Broken {
    pub status: Status,
    pub cause: Cause,
    /// `stall`, `upstream_cut` or `upstream_malformed`.
    pub finish_reason: &'static str,
    /// The log's word: `stall` or `cut`.
    pub failure: &'static str,
    pub message: String,
    pub ttft_ms: f64,
}

/// One thing that happened to a request, in the order it happened.
pub(super) enum Event<'a> {
    /// Refused before its body was read: what its key says of it.
    Keyed(&'a Identity),
    /// Its body read: its slice, its tenant and its conversation.
    Read {
        slice: &'a str,
        tenant: &'a str,
        messages: Option<String>,
    },
    /// Decided: the last user message, the one the router scored.
    Prompt(String),
    /// What the `--shadow` candidate would have done: its route and score,
    /// or (no route) the reason it would have refused.
    Shadowed {
        version: u64,
        route: Option<String>,
        reason: Reason,
        score: Option<f64>,
    },
    /// The served config's decision: its score and its draw.
    Decided {
        score: Option<f64>,
        propensity: f64,
        draw: Draw,
    },
    /// The decision admitted and its route about to be called (a cascade:
    /// its first stage): from here the record is a decision's.
    Routed { route: &'a str },
    /// A stage's turn begins on its route.
    Staged { route: &'a str, reason: Reason },
    /// The route gave its first byte `at_ms` after the request arrived
    /// (`arrival_ms`, the breakers' clock).
    FirstByte {
        route: &'a str,
        arrival_ms: f64,
        at_ms: f64,
        admitted: Admit,
    },
    /// The route gave none.
    NoFirstByte {
        route: &'a str,
        arrival_ms: f64,
        at_ms: f64,
        outcome: CallOutcome,
        admitted: Admit,
    },
    /// A hedged call answered: by the copy or the original, the other
    /// cancelled `cancelled_at_ms` after the request arrived.
    Hedged {
        route: &'a str,
        copy_won: bool,
        cancelled_at_ms: f64,
        /// The cancelled call's prompt.
        billed: Billed,
    },
    /// The route failed before its first byte; the request moved to `to`,
    /// or stayed and why.
    Failed {
        route: &'a str,
        failure: FailureFacts,
        at_ms: f64,
        to: Result<&'a str, Stay>,
        /// The retry budget when it refused the move: allowed, used.
        budget: Option<(u64, u64)>,
    },
    /// The request moved to `to` for `reason` without trying its route
    /// (the route's breaker sent it on).
    Sent { to: &'a str, reason: Reason },
    /// The answer broke after its first byte before anything reached the
    /// client; the request moved to `to`.
    BrokeAndMoved {
        route: &'a str,
        broken: Broken,
        billed: Billed,
        at_ms: f64,
        to: &'a str,
    },
    /// The route's status, the one the client gets with its answer.
    Answering(StatusCode),
    /// The answer broke and could not move, for `stay`'s reason if any.
    Stayed(Option<Reason>),
    /// A cascade's verifier scored the stage's answer (`None`: it failed).
    Scored(Option<f64>),
}

/// A call's head or first byte came, or did not, `at_ms` after the
/// request arrived: an event of no record's (a hedge's two calls race).
pub(super) struct CallEnded<'a> {
    pub route: &'a str,
    /// How `routeval_upstream_responses_total` counts it.
    pub class: &'static str,
    /// The call's span, ended here.
    pub span: ChildSpan<'a>,
    pub status: Option<StatusCode>,
    pub error: Option<String>,
    pub at_ms: f64,
}

/// Whether an upstream's `status` refuses the key serve called it with
/// (401), or what that key may do (403): the route's problem, never the
/// client's, whose own key serve checked.
pub(super) fn refuses_credentials(status: StatusCode) -> bool {
    status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN
}

/// Counts a call by route and class and ends its span; a route that
/// refused serve's credentials is logged as an error, whatever became of
/// the request.
pub(super) fn call_ended(app: &App, call: CallEnded<'_>) {
    let CallEnded {
        route,
        class,
        span,
        status,
        error,
        at_ms,
    } = call;
    app.metrics.upstream(route, class);
    if status.is_some_and(refuses_credentials) {
        let status = status.map(|status| status.as_u16());
        app.log
            .event(
                Level::Error,
                "upstream_credentials_refused",
                format!(
                    "route {route:?} refused serve's credentials (it answered {}): check its api_key_env key",
                    status.unwrap_or_default()
                ),
            )
            .field("route", route)
            .field("upstream_status", status)
            .emit();
    }
    let attributes =
        move || {
            let mut attributes = vec![
                KeyValue::new("routeval.upstream_class", class),
                KeyValue::new("routeval.at_ms", at_ms),
            ];
            attributes.extend(status.map(|status| {
                KeyValue::new("http.response.status_code", i64::from(status.as_u16()))
            }));
            attributes
        };
    span.end(attributes, error);
}

/// Folds `event` into `record`, the metrics, the spans, the breakers and
/// the log.
pub(super) fn see(app: &App, record: &mut ServedRecord, event: Event<'_>) {
    match event {
        Event::Keyed(identity) => {
            record.record.tenant = Some(identity.tenant.clone().into());
            if let Some(slice) = &identity.slice {
                record.record.slice = slice.clone().into();
            }
        }
        Event::Read {
            slice,
            tenant,
            messages,
        } => {
            record.record.slice = slice.to_owned().into();
            record.record.tenant = Some(tenant.to_owned().into());
            record.record.messages = messages.map(Into::into);
        }
        Event::Prompt(prompt) => record.record.prompt = Some(prompt.into()),
        Event::Shadowed {
            version,
            route,
            reason,
            score,
        } => {
            let record = &mut record.record;
            record.shadow_config_version = Some(version);
            record.shadow_route = route.map(Into::into);
            record.shadow_reason = Some(reason);
            record.shadow_score = score;
        }
        Event::Decided {
            score,
            propensity,
            draw,
        } => {
            let record = &mut record.record;
            record.score = score;
            record.propensity = Some(propensity);
            record.draw = Some(draw);
        }
        Event::Routed { route } => {
            record.record.decided_route = Some(route.to_owned().into());
        }
        Event::Staged { route, reason } => {
            record.record.route = route.to_owned().into();
            record.record.reason = Some(reason);
        }
        Event::FirstByte {
            route,
            arrival_ms,
            at_ms,
            admitted,
        } => app
            .resilience
            .outcome(route, arrival_ms + at_ms, CallOutcome::FirstToken, admitted),
        Event::NoFirstByte {
            route,
            arrival_ms,
            at_ms,
            outcome,
            admitted,
        } => app
            .resilience
            .outcome(route, arrival_ms + at_ms, outcome, admitted),
        Event::Hedged {
            route,
            copy_won,
            cancelled_at_ms,
            billed,
        } => hedged(app, record, route, copy_won, cancelled_at_ms, billed),
        Event::Failed {
            route,
            failure,
            at_ms,
            to,
            budget,
        } => failed(app, record, route, &failure, at_ms, to, budget),
        Event::Sent { to, reason } => {
            record.record.route = to.to_owned().into();
            record.record.reason = Some(reason);
        }
        Event::BrokeAndMoved {
            route,
            broken,
            billed,
            at_ms,
            to,
        } => broke_and_moved(app, record, route, (&broken, billed), at_ms, to),
        Event::Stayed(reason) => {
            if let Some(reason) = reason {
                record.record.reason = Some(reason);
            }
        }
        Event::Answering(status) => {
            record.record.status = Status::from_http(status.as_u16());
        }
        Event::Scored(score) => record.record.score = score,
    }
}

/// A hedged request: the copy that lost (cancelled before its first
/// token, so billed its prompt and no output) is its own record, `ID-hedge-1`, reason
/// `hedge-lost`. The request's own reason is `hedge-won`, unless it had
/// moved to a fallback: the move is what decided its route, and the lost
/// copy's record says it was hedged.
fn hedged(
    app: &App,
    record: &mut ServedRecord,
    route: &str,
    copy_won: bool,
    at_ms: f64,
    billed: Billed,
) {
    if !matches!(record.reason, Some(Reason::Fallback(_))) {
        record.record.reason = Some(Reason::HedgeWon);
    }
    let mut lost = record.clone();
    lost.record.id = format!("{}{}", record.id, HEDGE_ID_SUFFIX).into();
    lost.record.route = route.to_owned().into();
    lost.record.reason = Some(Reason::HedgeLost);
    lost.record.status = Status::Error;
    lost.record.finish_reason = Some(
        if copy_won {
            "hedge_original_cancelled"
        } else {
            "hedge_copy_cancelled"
        }
        .into(),
    );
    lost.record.total_ms = Some(at_ms);
    billed.into_record(&mut lost);
    attempt_finished(app, lost);
}

/// A route that gave no first byte: the log line, and the request moved
/// (its route's attempt its own record, `<id>-attempt-1`) or the reason it
/// stayed.
fn failed(
    app: &App,
    record: &mut ServedRecord,
    route: &str,
    failure: &FailureFacts,
    at_ms: f64,
    to: Result<&str, Stay>,
    budget: Option<(u64, u64)>,
) {
    let then = match to {
        Ok(fallback) => format!("the request moved to {fallback:?}"),
        Err(Stay::NoFallback) => "no fallback: the client got the failure".to_owned(),
        Err(Stay::Capacity) => {
            "every fallback was at its rpm or tpm or its breaker was open: the client got the failure".to_owned()
        }
        Err(Stay::Budget) => "the retry budget was spent: the client got the failure".to_owned(),
    };
    app.log
        .event(
            Level::Warn,
            "upstream_failed",
            format!("route {route:?} {}; {then}", failure.what),
        )
        .field("request_id", record.id.to_string())
        .field("route", route)
        .field("failure", failure.kind)
        .field("upstream_status", failure.upstream_status)
        .field("at_ms", at_ms)
        .field("fallback", to.ok())
        .field(
            "stay",
            to.err()
                .and_then(Stay::reason)
                .map(|reason| reason.to_string()),
        )
        .emit();
    if let (Err(Stay::Budget), Some((allowed, used))) = (to, budget) {
        app.log
            .event(
                Level::Warn,
                "budget_refused",
                format!(
                    "the retry budget refused a fallback for route {route:?}: {used} of {allowed} extra calls spent in its window"
                ),
            )
            .field("request_id", record.id.to_string())
            .field("route", route)
            .field("allowed", allowed)
            .field("used", used)
            .emit();
    }
    match to {
        Ok(fallback) => {
            let mut attempt = abandoned(record, route, failure.status, failure.cause);
            attempt.record.total_ms = Some(at_ms);
            if let Some(billed) = failure.billed {
                billed.into_record(&mut attempt);
            }
            attempt_finished(app, attempt);
            record.record.route = fallback.to_owned().into();
            record.record.reason = Some(failure.moved_reason.clone());
        }
        Err(stay) => {
            if let Some(reason) = stay.reason() {
                record.record.reason = Some(reason);
            }
        }
    }
}

/// The record of the request's attempt at `route`, given up: its
/// `<id>-attempt-1`.
fn abandoned(record: &ServedRecord, route: &str, status: Status, cause: Cause) -> ServedRecord {
    let mut attempt = record.clone();
    attempt.record.id = format!("{}{}", record.id, crate::records::ATTEMPT_ID_SUFFIX).into();
    attempt.record.route = route.to_owned().into();
    attempt.record.status = status;
    attempt.record.reason = Some(Reason::Abandoned(cause));
    attempt
}

/// An answer left after its first byte, before serve had sent the client
/// anything: the attempt's record, the log line, and the request moved.
fn broke_and_moved(
    app: &App,
    record: &mut ServedRecord,
    route: &str,
    (broken, billed): (&Broken, Billed),
    at_ms: f64,
    to: &str,
) {
    let mut attempt = abandoned(record, route, broken.status, broken.cause);
    billed.into_record(&mut attempt);
    attempt.record.finish_reason = Some(broken.finish_reason.into());
    attempt.record.ttft_ms = Some(broken.ttft_ms);
    attempt.record.total_ms = Some(at_ms);
    attempt_finished(app, attempt);
    app.log
        .event(
            Level::Warn,
            "upstream_failed",
            format!(
                "{} before serve had sent the client anything; the request moved to {to:?}",
                broken.message
            ),
        )
        .field("request_id", record.id.to_string())
        .field("route", route)
        .field("failure", broken.failure)
        .field("at_ms", at_ms)
        .field("fallback", Some(to))
        .emit();
    record.record.route = to.to_owned().into();
    record.record.reason = Some(Reason::Fallback(match broken.cause {
        Cause::Deadline => crate::records::Move::Deadline,
        _ => crate::records::Move::Error,
    }));
}
