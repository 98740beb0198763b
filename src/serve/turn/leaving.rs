//! What the client is told when its route failed and the request could
//! not move: the route's failure (a 504 for a deadline, a 502 for no
//! answer, the upstream's own error otherwise), or a breaker's refusal.

use axum::http::{HeaderValue, StatusCode};

use crate::records::{Reason, Status};

use super::super::failure::Failure;
use super::super::forward::{Called, Source};
use super::super::passing::pass_through;
use super::super::reply::{error, refuse, refuse_as};
use super::super::served::ServedRecord;
use super::super::upstream_error::upstream_error_body;
use super::super::witness::{Refusal, refuses_credentials};
use super::{Turn, TurnEnd};

/// `Retry-After` in whole seconds, at least one (HTTP has no fraction),
/// and `retry-after-ms`, for a wait of `wait_ms`.
fn retry_after(wait_ms: f64) -> (HeaderValue, HeaderValue) {
    let millis = wait_ms.ceil().clamp(1.0, 86_400_000.0) as u64;
    (
        HeaderValue::from(millis.div_ceil(1000)),
        HeaderValue::from(millis),
    )
}

impl Turn<'_> {
    /// A 503 for a request the route's open breaker sent on at `now_ms`,
    /// with no fallback to take it. Its `Retry-After` (whole seconds) and
    /// `retry-after-ms` (which the OpenAI SDKs read first) say when the
    /// breaker lets its half-open probe through, so a client's retries are
    /// not spent while it is still open.
    pub(super) fn breaker_open(&self, record: ServedRecord, now_ms: f64) -> TurnEnd {
        // A probe already in flight answers within its deadline; a second
        // is the shortest wait `Retry-After` can say.
        let probe_in_ms = self
            .app
            .resilience
            .probe_in_ms(self.route, now_ms)
            .unwrap_or(1000.0);
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            None,
            &format!(
                "route {:?} is failing (its breaker is open) and no fallback can take the request; its breaker tries the route again in {} ms",
                self.route,
                probe_in_ms.ceil()
            ),
        );
        let (seconds, millis) = retry_after(probe_in_ms);
        let headers = response.headers_mut();
        headers.insert(axum::http::header::RETRY_AFTER, seconds);
        headers.insert("retry-after-ms", millis);
        let refusal = Refusal::with_status(Reason::BreakerOpen, Status::Error);
        TurnEnd::Answered(refuse_as(self.app, record, refusal, self.started, response))
    }

    /// The client's response to a route that failed before its first byte:
    /// a 504 for a deadline, a 502 for no answer, the upstream's own error
    /// status, rate-limit headers and (unless it carries the route's key or
    /// address) body otherwise.
    pub(super) async fn failed(
        &self,
        record: ServedRecord,
        route: &str,
        failure: Failure,
    ) -> TurnEnd {
        // A request that could not move says why; one with nowhere to move
        // says how its route failed.
        let reason = |failed: Reason| match &record.reason {
            Some(stayed @ Reason::NoFallback(_)) => stayed.clone(),
            _ => failed,
        };
        let status = failure.status();
        let (reason, response) = match failure {
            Failure::Deadline { by_breaker } => {
                let (deadline_ms, _) = self.deadline_ms(route);
                let which = if by_breaker {
                    "its breaker's first_token_deadline_ms"
                } else {
                    "--first-token-timeout-ms"
                };
                let response = error(
                    StatusCode::GATEWAY_TIMEOUT,
                    "timeout",
                    None,
                    &format!(
                        "route {route:?} gave no first token within {which} ({deadline_ms} ms)"
                    ),
                );
                (reason(Reason::FirstTokenTimeout), response)
            }
            Failure::Unreachable(problem) => {
                let response = error(StatusCode::BAD_GATEWAY, "upstream_error", None, &problem);
                (reason(Reason::UpstreamUnreachable), response)
            }
            Failure::Status(called) => return self.upstream_error(record, route, *called).await,
        };
        let refusal = Refusal::with_status(reason, status);
        TurnEnd::Answered(refuse_as(self.app, record, refusal, self.started, response))
    }

    /// The upstream's own error: its status, rate-limit headers and
    /// (unless it carries the route's key or address) body, the record
    /// ended as an answer is.
    async fn upstream_error(
        &self,
        mut record: ServedRecord,
        route: &str,
        called: Called,
    ) -> TurnEnd {
        let Called {
            status,
            limits,
            response,
            ..
        } = called;
        if refuses_credentials(status) {
            // The client's key was good; the route's was not. Its 401
            // would tell the client to fix a key it cannot.
            drop(response);
            let response = error(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                None,
                &format!(
                    "route {route:?} refused serve's credentials for it (it answered {status}); the operator must fix the route's key"
                ),
            );
            let reason = match &record.reason {
                Some(stayed @ Reason::NoFallback(_)) => stayed.clone(),
                _ => Reason::UpstreamCredentials,
            };
            let refusal = Refusal::with_status(reason, Status::Error);
            return TurnEnd::Answered(refuse_as(self.app, record, refusal, self.started, response));
        }
        super::super::witness::see(
            self.app,
            &mut record,
            super::super::witness::Event::Answering(status),
        );
        let upstream = self.decided.deployed.upstreams[route].clone();
        let total = self.total_deadline();
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
