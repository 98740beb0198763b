//! How a request leaves a failing route: the failure logged and
//! recorded, the table's fallback taken when its `rpm`/`tpm` and the retry
//! budget allow (the route's attempt recorded as abandoned), or else the
//! client given the route's failure, or a breaker's refusal.

use std::time::Instant;

use axum::http::{HeaderValue, StatusCode};

use crate::policy::{Admit, CallOutcome, FallbackMove, Stay};
use crate::records::{Cause, Reason, Status};

use super::failure::Failure;
use super::forward::{Called, Source, pass_through};
use super::log::Level;
use super::reply::{error, overloaded, refuse};
use super::served::ServedRecord;
use super::turn::{Attempt, Reached, Turn, TurnEnd};
use super::upstream_error::upstream_error_body;

impl Turn<'_> {
    /// Logs a route that gave no first byte: how it failed, and where the
    /// request went (`moved_to`), or why it could not move.
    pub(super) fn log_failure(
        &self,
        route: &str,
        failure: &Failure,
        at_ms: f64,
        moved_to: Result<&str, Stay>,
    ) {
        let log = &self.app.log;
        let (kind, what) = match failure {
            Failure::Deadline { by_breaker } => (
                "deadline",
                format!(
                    "gave no first token within {} ({} ms)",
                    if *by_breaker {
                        "its breaker's first_token_deadline_ms"
                    } else {
                        "--first-token-timeout-ms"
                    },
                    self.deadline_ms(route).0
                ),
            ),
            Failure::Unreachable(problem) => ("unreachable", format!("did not answer: {problem}")),
            Failure::Status(called) => ("status", format!("answered {}", called.status)),
        };
        let then = match moved_to {
            Ok(fallback) => format!("the request moved to {fallback:?}"),
            Err(Stay::NoFallback) => "no fallback: the client got the failure".to_owned(),
            Err(Stay::Capacity) => {
                "every fallback was at its rpm or tpm or its breaker was open: the client got the failure".to_owned()
            }
            Err(Stay::Budget) => "the retry budget was spent: the client got the failure".to_owned(),
        };
        log.event(
            Level::Warn,
            "upstream_failed",
            format!("route {route:?} {what}; {then}"),
        )
        .field("request_id", self.decided.request_id.clone())
        .field("route", route)
        .field("failure", kind)
        .field(
            "upstream_status",
            match failure {
                Failure::Status(called) => Some(called.status.as_u16()),
                _ => None,
            },
        )
        .field("at_ms", at_ms)
        .field("fallback", moved_to.ok())
        .field(
            "stay",
            moved_to
                .err()
                .and_then(Stay::reason)
                .map(|reason| reason.to_string()),
        )
        .emit();
        if moved_to == Err(Stay::Budget) {
            let (allowed, used) = self
                .app
                .resilience
                .budget_at(self.arrival_ms + self.elapsed_ms());
            log.event(
                Level::Warn,
                "budget_refused",
                format!(
                    "the retry budget refused a fallback for route {route:?}: {used} of {allowed} extra calls spent in its window"
                ),
            )
            .field("request_id", self.decided.request_id.clone())
            .field("route", route)
            .field("allowed", allowed)
            .field("used", used)
            .emit();
        }
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

    /// The record of the route's abandoned attempt, beside the request's
    /// own: `<id>-attempt-1`, the route, how it failed and when.
    pub(super) fn abandoned(&self, record: &ServedRecord, failure: &Failure, at_ms: f64) {
        let mut attempt = record.clone();
        attempt.id = format!("{}{}", record.id, crate::records::ATTEMPT_ID_SUFFIX).into();
        attempt.route = self.route.to_owned().into();
        attempt.status = failure.status();
        attempt.reason = Some(Reason::Abandoned(match failure {
            Failure::Deadline { .. } => Cause::Deadline,
            _ => Cause::Error,
        }));
        attempt.total_ms = Some(at_ms);
        self.app.finish_attempt(attempt);
    }

    /// The request, moved to `fallback` for `reason`.
    pub(super) async fn moved(
        &self,
        record: &mut ServedRecord,
        fallback: &str,
        reason: Reason,
    ) -> Result<Box<Reached>, TurnEnd> {
        record.route = fallback.to_owned().into();
        record.reason = Some(reason);
        let arrival_ms = self.arrival_ms;
        let offset_ms = self.elapsed_ms();
        match self.attempt(fallback, Instant::now(), offset_ms).await {
            Attempt::Reached(reached) => {
                self.app.resilience.outcome(
                    fallback,
                    arrival_ms + reached.ttft_ms,
                    CallOutcome::FirstToken,
                    Admit::Route,
                );
                self.record_hedge(record, &reached);
                Ok(reached)
            }
            Attempt::Full(full) => Err(TurnEnd::Answered(overloaded(
                self.app,
                record.clone(),
                self.started,
                full,
            ))),
            Attempt::Failed { failure, at_ms } => {
                self.app.resilience.outcome(
                    fallback,
                    arrival_ms + at_ms,
                    failure.outcome(),
                    Admit::Route,
                );
                self.log_failure(fallback, &failure, at_ms, Err(Stay::NoFallback));
                Err(self.failed(record.clone(), fallback, failure).await)
            }
        }
    }

    /// A 503 for a request the route's open breaker sent on, with no
    /// fallback to take it.
    pub(super) fn breaker_open(&self, mut record: ServedRecord) -> TurnEnd {
        record.status = Status::Error;
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            None,
            &format!(
                "route {:?} is failing (its breaker is open) and no fallback can take the request",
                self.route
            ),
        );
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from_static("1"),
        );
        TurnEnd::Answered(refuse(
            self.app,
            record,
            Reason::BreakerOpen,
            self.started,
            response,
        ))
    }

    /// The client's response to a route that failed before its first byte:
    /// a 504 for a deadline, a 502 for no answer, the upstream's own error
    /// status, rate-limit headers and (unless it carries the route's key or
    /// address) body otherwise.
    pub(super) async fn failed(
        &self,
        mut record: ServedRecord,
        route: &str,
        failure: Failure,
    ) -> TurnEnd {
        record.status = failure.status();
        // A request that could not move says why; one with nowhere to move
        // says how its route failed.
        let reason = |failed: Reason| match &record.reason {
            Some(stayed @ Reason::NoFallback(_)) => stayed.clone(),
            _ => failed,
        };
        match failure {
            Failure::Deadline { by_breaker } => {
                let reason = reason(Reason::FirstTokenTimeout);
                let (deadline_ms, _) = self.deadline_ms(route);
                let which = if by_breaker {
                    "its breaker's first_token_deadline_ms"
                } else {
                    "--first-token-timeout-ms"
                };
                TurnEnd::Answered(refuse(
                    self.app,
                    record,
                    reason,
                    self.started,
                    error(
                        StatusCode::GATEWAY_TIMEOUT,
                        "timeout",
                        None,
                        &format!(
                            "route {route:?} gave no first token within {which} ({deadline_ms} ms)"
                        ),
                    ),
                ))
            }
            Failure::Unreachable(problem) => {
                let reason = reason(Reason::UpstreamUnreachable);
                TurnEnd::Answered(refuse(
                    self.app,
                    record,
                    reason,
                    self.started,
                    error(StatusCode::BAD_GATEWAY, "upstream_error", None, &problem),
                ))
            }
            Failure::Status(called) => {
                let Called {
                    status,
                    limits,
                    response,
                    ..
                } = *called;
                let upstream = self.decided.deployed.upstreams[route].clone();
                let total = tokio::time::Instant::from_std(self.started) + self.app.timeouts.total;
                let body = upstream_error_body(route, &upstream, status, response, total).await;
                let mut finishing = self.finishing(route, upstream, 0.0);
                finishing.record = Some(record);
                TurnEnd::Answered(pass_through(
                    finishing,
                    status,
                    Some(HeaderValue::from_static("application/json")),
                    self.headers(route, limits),
                    Source::Buffered(body),
                ))
            }
        }
    }

    pub(super) fn failed_reason(
        &self,
        record: ServedRecord,
        reason: Reason,
        message: &str,
    ) -> TurnEnd {
        TurnEnd::Answered(refuse(
            self.app,
            record,
            reason,
            self.started,
            error(StatusCode::BAD_GATEWAY, "upstream_error", None, message),
        ))
    }
}
