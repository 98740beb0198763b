//! One attempt at a route: a slot on it, the call (and, where the route
//! hedges, a copy raced against it), and its first byte by the route's
//! deadline. It returns what happened as an [`Attempt`] and touches no
//! record, breaker or metric: its calls' ends are the witness's events.

use std::time::Instant;

use axum::http::{HeaderName, HeaderValue, StatusCode};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use super::super::admission::Full;
use super::super::deployed::Upstream;
use super::super::failure::{Failure, status_class};
use super::super::forward::{CallFailed, Called, Source, call, first_chunk, outgoing_headers};
use super::super::settings::{after, millis};
use super::super::sse::is_sse;
use super::super::witness::{CallEnded, call_ended};
use super::{Reached, Turn};

/// How one call went up to its first byte.
pub(super) enum FirstByte {
    Came {
        status: StatusCode,
        content_type: Option<HeaderValue>,
        limits: Vec<(HeaderName, HeaderValue)>,
        expected_bytes: Option<u64>,
        source: Source,
        ttft_ms: f64,
    },
    /// An error status, `at_ms` after the request arrived.
    Status(Box<Called>, f64),
    Failed(CallFailed, f64),
}

/// How an attempt at a route ended.
pub(super) enum Attempt {
    Reached(Box<Reached>),
    /// Failed `at_ms` after the request arrived.
    Failed {
        failure: Failure,
        at_ms: f64,
    },
    /// The route had no slot free.
    Full(Full),
}

impl Turn<'_> {
    /// One call's first byte by `first_token`, traced as an attempt of
    /// `role` (`route`, `fallback` or `hedge`).
    pub(super) async fn first_byte(
        &self,
        route: &str,
        upstream: &Upstream,
        first_token: tokio::time::Instant,
        role: &'static str,
    ) -> FirstByte {
        let request = &self.decided.sent;
        let streamed = self.streams_for_client(route);
        let role = if role == "route" && route != self.route {
            "fallback"
        } else {
            role
        };
        let span = self.decided.trace.child("upstream", SpanKind::Client, || {
            vec![
                KeyValue::new("routeval.route", route.to_owned()),
                KeyValue::new("routeval.attempt", role),
                KeyValue::new("routeval.stage", self.stage as i64),
                KeyValue::new("gen_ai.request.model", upstream.model.clone()),
            ]
        });
        let headers = outgoing_headers(&self.decided.request_id, &span);
        let ended = |span, class, status, error| CallEnded {
            route,
            class,
            span,
            status,
            error,
            at_ms: self.elapsed_ms(),
        };
        let called = call(
            self.app,
            route,
            upstream,
            request,
            first_token,
            &headers,
            streamed,
        )
        .await;
        let called = match called {
            Ok(called) => called,
            Err(failed) => {
                let error = Some(failed.describe());
                call_ended(self.app, ended(span, failed.class(), None, error));
                return FirstByte::Failed(failed, self.elapsed_ms());
            }
        };
        if !called.status.is_success() {
            let error = Some(format!("route {route:?} answered {}", called.status));
            let class = status_class(called.status);
            call_ended(self.app, ended(span, class, Some(called.status), error));
            return FirstByte::Status(Box::new(called), self.elapsed_ms());
        }
        let Called {
            status,
            content_type,
            limits,
            response,
        } = called;
        let expected_bytes = response.content_length();
        let first = first_chunk(route, response, first_token, is_sse(content_type.as_ref())).await;
        let class = first.as_ref().map_or_else(CallFailed::class, |_| "2xx");
        let error = first.as_ref().err().map(CallFailed::describe);
        call_ended(self.app, ended(span, class, Some(status), error));
        match first {
            Ok(source) => FirstByte::Came {
                status,
                content_type,
                limits,
                expected_bytes,
                source,
                ttft_ms: self.elapsed_ms(),
            },
            Err(failed) => FirstByte::Failed(failed, self.elapsed_ms()),
        }
    }

    /// Calls `route`; its first byte must come within its deadline,
    /// counted from `from` (`offset_ms` after the request arrived).
    pub(super) async fn attempt(&self, route: &str, from: Instant, offset_ms: f64) -> Attempt {
        let slot = match self.app.admission.route(route) {
            Ok(slot) => slot,
            Err(full) => return Attempt::Full(full),
        };
        let upstream = self
            .decided
            .deployed
            .upstreams
            .get(route)
            .expect("every route has an upstream")
            .clone();
        let (deadline_ms, by_breaker) = self.deadline_ms(route);
        let total = self.total_deadline();
        let first_token =
            after(tokio::time::Instant::from_std(from), millis(deadline_ms)).min(total);
        let (first, hedged) = match self.hedge_at(route, from) {
            Some(hedge_at) if hedge_at < first_token => {
                self.hedged_first_byte(route, &upstream, first_token, hedge_at)
                    .await
            }
            _ => (
                self.first_byte(route, &upstream, first_token, "route")
                    .await,
                None,
            ),
        };
        let late = Failure::Deadline { by_breaker };
        // A deadline is recorded as the moment it passed, so that what
        // serve did and what `replay fallback` computes from its records
        // agree to the millisecond.
        let at_deadline = offset_ms + deadline_ms;
        let failed = |failure: Failure, at_ms: f64| Attempt::Failed { failure, at_ms };
        match first {
            // A first byte measured past the deadline is late however the
            // race with the timer went.
            FirstByte::Came { ttft_ms, .. } if ttft_ms - offset_ms > deadline_ms => {
                failed(late, at_deadline)
            }
            FirstByte::Came {
                status,
                content_type,
                limits,
                expected_bytes,
                source,
                ttft_ms,
            } => Attempt::Reached(Box::new(Reached {
                route: route.to_owned(),
                upstream,
                status,
                content_type,
                limits,
                expected_bytes,
                source,
                slot,
                ttft_ms,
                hedged,
            })),
            FirstByte::Status(called, at_ms) => failed(Failure::Status(called), at_ms),
            FirstByte::Failed(CallFailed::TimedOut, _) => failed(late, at_deadline),
            FirstByte::Failed(CallFailed::Unreachable(problem), at_ms) => {
                failed(Failure::Unreachable(problem), at_ms)
            }
        }
    }
}
