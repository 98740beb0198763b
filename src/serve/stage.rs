//! One route's turn at a request (the only one, or a cascade's stage), and
//! how it leaves a failing route: the route's breaker is asked first; a
//! request it sends on, or one whose route fails before its first byte (an
//! error, a 429, no answer, or a first token past the route's deadline),
//! moves to the table's fallback if the fallback's `rpm`/`tpm` and the retry
//! budget allow; otherwise the client gets the route's failure. After the
//! first byte, a request that did not stream may still move while its
//! answer is assembled (nothing has reached the client yet); a streamed
//! one may not: a stall or a cut is its error, never a second model's
//! text spliced on.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use crate::policy::{Admit, CallOutcome, FallbackMove, Plan, Stay};
use crate::records::{Cause, HEDGE_ID_SUFFIX, Move, Reason, Status};

use super::admission::{Full, Slot};
use super::answer::Answer;
use super::app::App;
use super::assemble::Assembly;
use super::cascade::verify;
use super::decision::Decided;
use super::deployed::Upstream;
use super::forward::outgoing_headers;
use super::forward::{
    CallFailed, Called, Ending, Finishing, Source, call, first_chunk, is_sse, pass_through,
    read_events,
};
use super::log::Level;
use super::reply::{error, overloaded, refuse, refused_as_recorded};
use super::served::ServedRecord;
use super::sse::Framer;

/// One route's turn at a request: the only one, or a cascade's stage.
pub(super) struct StageCall<'a> {
    pub app: &'a Arc<App>,
    pub decided: &'a Decided,
    pub route: &'a str,
    pub stage: usize,
    pub last: bool,
    pub started: Instant,
    /// The tokens a call reserves against a route's `tpm`: the prompt's
    /// estimate plus the request's `max_tokens`.
    pub tokens: u64,
    /// The prompt's estimate alone, which a route's hedge bounds.
    pub prompt_tokens: u64,
    /// When the request arrived, ms since 1970 (its record's timestamp):
    /// the clock the breakers and the budget run on.
    pub arrival_ms: f64,
}

/// How a stage ended: the client's response, or (a cascade stage whose
/// answer the verifier rejected) the record, for the next stage.
pub(super) enum Stage {
    Answered(Response),
    Escalated(Box<ServedRecord>),
}

/// A route that gave its first byte in time.
struct Reached {
    route: String,
    upstream: Upstream,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    /// The upstream's rate-limit headers, passed on.
    limits: Vec<(HeaderName, HeaderValue)>,
    /// The body's length, where the upstream said it.
    expected_bytes: Option<u64>,
    source: Source,
    slot: Slot,
    /// Its first byte, ms after the request arrived.
    ttft_ms: f64,
    /// Whether a hedged copy was sent, and which answered.
    hedged: Option<Hedged>,
}

/// A hedged call: which of the two answered, and when the other was
/// cancelled.
struct Hedged {
    copy_won: bool,
    cancelled_at_ms: f64,
    /// The copy's route slot, given back with the answer.
    slot: Slot,
}

/// How one call went up to its first byte.
enum FirstByte {
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

/// Why an attempt gave no first byte.
enum Failure {
    /// No first byte by the deadline: the route's breaker deadline
    /// (`by_breaker`) or `--first-token-timeout-ms`.
    Deadline {
        by_breaker: bool,
    },
    Unreachable(String),
    /// An error status; its body is passed on if nothing else answers.
    Status(Box<Called>),
}

impl Failure {
    /// The call's outcome, as the route's breaker counts it.
    fn outcome(&self) -> CallOutcome {
        match self {
            Failure::Deadline { .. } => CallOutcome::Deadline,
            Failure::Status(called) if called.status == StatusCode::TOO_MANY_REQUESTS => {
                CallOutcome::RateLimited
            }
            Failure::Unreachable(_) | Failure::Status(_) => CallOutcome::Error,
        }
    }

    fn status(&self) -> Status {
        match self {
            Failure::Deadline { .. } => Status::Timeout,
            Failure::Unreachable(_) => Status::Error,
            Failure::Status(called) => Status::from_http(called.status.as_u16()),
        }
    }

    /// The reason of a request moved by this failure.
    fn moved_reason(&self) -> Reason {
        Reason::Fallback(match self {
            Failure::Deadline { .. } => Move::Deadline,
            _ => Move::Error,
        })
    }
}

enum Attempt {
    Reached(Box<Reached>),
    /// Failed `at_ms` after the request arrived.
    Failed {
        failure: Failure,
        at_ms: f64,
    },
    Full(Full),
}

impl StageCall<'_> {
    /// The decision's headers, then the upstream's rate-limit headers.
    fn headers(
        &self,
        route: &str,
        limits: Vec<(HeaderName, HeaderValue)>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let config = &self.decided.deployed.config;
        let tier = config.table.route(route).map_or_else(
            || self.stage.to_string(),
            |found| found.tier.name().to_owned(),
        );
        let decision = [
            ("x-routeval-route", route.to_owned()),
            ("x-routeval-tier", tier),
            ("x-routeval-config-version", config.version.to_string()),
        ];
        decision
            .into_iter()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&value).ok()?,
                ))
            })
            .chain(limits)
            .collect()
    }

    /// Whether the client asked for a stream.
    fn client_streams(&self) -> bool {
        self.decided.request.get("stream") == Some(&serde_json::Value::Bool(true))
    }

    /// Whether `route` is called with streaming though the client did not
    /// stream (serve then assembles the answer).
    fn streams_for_client(&self, route: &str) -> bool {
        !self.client_streams()
            && self
                .decided
                .deployed
                .config
                .table
                .route(route)
                .is_some_and(|found| found.stream_upstream)
    }

    fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    /// Where this stage's deadlines count from: the request's arrival for
    /// its first stage (the times its record gives), else now.
    fn stage_start(&self) -> (Instant, f64) {
        if self.stage == 0 {
            (self.started, 0.0)
        } else {
            (Instant::now(), self.elapsed_ms())
        }
    }

    /// The route's first-token deadline, ms: its breaker's, if sooner than
    /// `--first-token-timeout-ms`, and whether it is the breaker's.
    /// A route that cannot stream answers a non-streamed call in one
    /// piece, whose first byte is its last: such a call is bounded by
    /// `--total-timeout-ms` only.
    fn deadline_ms(&self, route: &str) -> (f64, bool) {
        let global = self.app.timeouts.first_token.as_secs_f64() * 1e3;
        let table = &self.decided.deployed.config.table;
        let whole = table
            .route(route)
            .is_some_and(|found| !found.stream_upstream && !self.client_streams());
        if whole {
            return (self.app.timeouts.total.as_secs_f64() * 1e3, false);
        }
        match table.route(route).and_then(|found| found.breaker) {
            Some(breaker) if breaker.first_token_deadline_ms < global => {
                (breaker.first_token_deadline_ms, true)
            }
            _ => (global, false),
        }
    }

    /// One call's first byte by `first_token`, traced as an attempt of
    /// `role` (`route`, `fallback` or `hedge`).
    async fn first_byte(
        &self,
        route: &str,
        upstream: &Upstream,
        first_token: tokio::time::Instant,
        role: &'static str,
    ) -> FirstByte {
        let request = &self.decided.request;
        let streamed = self.streams_for_client(route);
        let metrics = &self.app.metrics;
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
        let ended = |class: &'static str, status: Option<StatusCode>, error: Option<String>| {
            let attributes = move || {
                let mut attributes = vec![
                    KeyValue::new("routeval.upstream_class", class),
                    KeyValue::new("routeval.at_ms", self.elapsed_ms()),
                ];
                attributes.extend(status.map(|status| {
                    KeyValue::new("http.response.status_code", i64::from(status.as_u16()))
                }));
                attributes
            };
            (attributes, error)
        };
        let called = match call(
            self.app,
            route,
            upstream,
            request,
            first_token,
            &headers,
            streamed,
        )
        .await
        {
            Ok(called) => called,
            Err(failed) => {
                metrics.upstream(route, failed.class());
                let (attributes, error) = ended(failed.class(), None, Some(failed.describe()));
                span.end(attributes, error);
                return FirstByte::Failed(failed, self.elapsed_ms());
            }
        };
        if !called.status.is_success() {
            let class = status_class(called.status);
            metrics.upstream(route, class);
            let (attributes, error) = ended(
                class,
                Some(called.status),
                Some(format!("route {route:?} answered {}", called.status)),
            );
            span.end(attributes, error);
            return FirstByte::Status(Box::new(called), self.elapsed_ms());
        }
        let Called {
            status,
            content_type,
            limits,
            response,
        } = called;
        let expected_bytes = response.content_length();
        let first = first_chunk(route, response, first_token).await;
        let class = first.as_ref().map_or_else(CallFailed::class, |_| "2xx");
        metrics.upstream(route, class);
        let (attributes, error) = ended(
            class,
            Some(status),
            first.as_ref().err().map(CallFailed::describe),
        );
        span.end(attributes, error);
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

    /// The route's hedge for this request: when the copy goes, if the
    /// route hedges and the prompt is short enough.
    fn hedge_at(&self, route: &str, from: Instant) -> Option<tokio::time::Instant> {
        let hedge = self.decided.deployed.config.table.route(route)?.hedge?;
        (self.prompt_tokens <= hedge.max_prompt_tokens).then(|| {
            tokio::time::Instant::from_std(from)
                + std::time::Duration::from_secs_f64(hedge.after_ms / 1e3)
        })
    }

    /// The first byte of a hedged call: the call alone if it gives one by
    /// `hedge_at`, else the first of it and a copy sent then (on a slot of
    /// its own, if the route has one free); the other is cancelled, and
    /// [`Hedged`] says what it was.
    async fn hedged_first_byte(
        &self,
        route: &str,
        upstream: &Upstream,
        first_token: tokio::time::Instant,
        hedge_at: tokio::time::Instant,
    ) -> (FirstByte, Option<Hedged>) {
        let original = self.first_byte(route, upstream, first_token, "route");
        tokio::pin!(original);
        tokio::select! {
            biased;
            came = &mut original => return (came, None),
            () = tokio::time::sleep_until(hedge_at) => {}
        }
        // The copy is an extra call: the route must have a slot free, and
        // then the retry budget must allow it; it counts in the route's
        // minute like any call.
        let Ok(copy_slot) = self.app.admission.route(route) else {
            return (original.await, None);
        };
        let now_ms = self.arrival_ms + self.elapsed_ms();
        if !self.app.resilience.take_extra(now_ms) {
            return (original.await, None);
        }
        if let Some(found) = self.decided.deployed.config.table.route(route) {
            self.app.resilience.count_call(found, now_ms, self.tokens);
        }
        let copy = self.first_byte(route, upstream, first_token, "hedge");
        tokio::pin!(copy);
        let (first, copy_first) = tokio::select! {
            came = &mut original => (came, false),
            came = &mut copy => (came, true),
        };
        // A copy that failed is no answer: the other may still give one.
        let (winner, copy_won) = if matches!(first, FirstByte::Came { .. }) {
            (first, copy_first)
        } else if copy_first {
            (original.await, false)
        } else {
            (copy.await, true)
        };
        let hedged = Hedged {
            copy_won,
            cancelled_at_ms: self.elapsed_ms(),
            slot: copy_slot,
        };
        (winner, Some(hedged))
    }

    /// Calls `route`; its first byte must come within its deadline,
    /// counted from `from` (`offset_ms` after the request arrived).
    async fn attempt(&self, route: &str, from: Instant, offset_ms: f64) -> Attempt {
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
        let total = tokio::time::Instant::from_std(self.started) + self.app.timeouts.total;
        let first_token = (tokio::time::Instant::from_std(from)
            + std::time::Duration::from_secs_f64(deadline_ms / 1e3))
        .min(total);
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

    /// Logs a route that gave no first byte: how it failed, and where the
    /// request went (`moved_to`), or why it could not move.
    fn log_failure(
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
    fn fallback_for(&self, now_ms: f64, kind: FallbackMove) -> Result<String, Stay> {
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

    /// This stage's route, or its fallback: the route that gave a first
    /// byte, or the client's response (already recorded).
    async fn reach(&self, record: &mut ServedRecord) -> Result<Box<Reached>, Stage> {
        let resilience = &self.app.resilience;
        let arrival_ms = self.arrival_ms;
        let (from, offset_ms) = self.stage_start();
        let table = &self.decided.deployed.config.table;
        if let Some(route) = table.route(self.route) {
            resilience.count_call(route, arrival_ms + offset_ms, self.tokens);
        }
        let admitted = resilience.admit(self.route, arrival_ms + offset_ms);
        if admitted == Some(Admit::Fallback) {
            return match self.fallback_for(arrival_ms + offset_ms, FallbackMove::WithoutAttempt) {
                Ok(fallback) => {
                    self.moved(record, &fallback, Reason::Fallback(Move::Breaker))
                        .await
                }
                Err(_) => Err(self.breaker_open(record.clone())),
            };
        }
        let admitted = admitted.unwrap_or(Admit::Route);
        match self.attempt(self.route, from, offset_ms).await {
            Attempt::Reached(reached) => {
                resilience.outcome(
                    self.route,
                    arrival_ms + reached.ttft_ms,
                    CallOutcome::FirstToken,
                    admitted,
                );
                self.record_hedge(record, &reached);
                Ok(reached)
            }
            Attempt::Full(full) => {
                // A probe that was never sent must still end the half-open
                // state: it is counted a failure, and the breaker reopens.
                if admitted == Admit::Probe {
                    let at_ms = arrival_ms + self.elapsed_ms();
                    resilience.outcome(self.route, at_ms, CallOutcome::Error, admitted);
                }
                Err(Stage::Answered(overloaded(
                    self.app,
                    record.clone(),
                    self.started,
                    full,
                )))
            }
            Attempt::Failed { failure, at_ms } => {
                resilience.outcome(self.route, arrival_ms + at_ms, failure.outcome(), admitted);
                let fallback = self.fallback_for(arrival_ms + at_ms, FallbackMove::AfterAttempt);
                self.log_failure(
                    self.route,
                    &failure,
                    at_ms,
                    fallback.as_deref().map_err(|stay| *stay),
                );
                match fallback {
                    Ok(fallback) => {
                        self.abandoned(record, &failure, at_ms);
                        self.moved(record, &fallback, failure.moved_reason()).await
                    }
                    Err(stay) => {
                        if let Some(reason) = stay.reason() {
                            record.reason = Some(reason);
                        }
                        Err(self.failed(record.clone(), self.route, failure).await)
                    }
                }
            }
        }
    }

    /// The record of the route's abandoned attempt, beside the request's
    /// own: `<id>-attempt-1`, the route, how it failed and when.
    fn abandoned(&self, record: &ServedRecord, failure: &Failure, at_ms: f64) {
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

    /// A hedged request: its reason is `hedge-won`, and the copy that lost
    /// (cancelled before its first token, so it was never billed output)
    /// is its own record, `ID-hedge-1`, reason `hedge-lost`.
    fn record_hedge(&self, record: &mut ServedRecord, reached: &Reached) {
        let Some(hedged) = &reached.hedged else {
            return;
        };
        record.reason = Some(Reason::HedgeWon);
        let mut lost = record.clone();
        lost.id = format!("{}{}", record.id, HEDGE_ID_SUFFIX).into();
        lost.route = reached.route.clone().into();
        lost.reason = Some(Reason::HedgeLost);
        lost.status = Status::Error;
        lost.finish_reason = Some(
            if hedged.copy_won {
                "hedge_original_cancelled"
            } else {
                "hedge_copy_cancelled"
            }
            .into(),
        );
        lost.total_ms = Some(hedged.cancelled_at_ms);
        self.app.finish_attempt(lost);
    }

    /// The request, moved to `fallback` for `reason`.
    async fn moved(
        &self,
        record: &mut ServedRecord,
        fallback: &str,
        reason: Reason,
    ) -> Result<Box<Reached>, Stage> {
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
            Attempt::Full(full) => Err(Stage::Answered(overloaded(
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
    fn breaker_open(&self, mut record: ServedRecord) -> Stage {
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
        Stage::Answered(refuse(
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
    async fn failed(&self, mut record: ServedRecord, route: &str, failure: Failure) -> Stage {
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
                Stage::Answered(refuse(
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
                Stage::Answered(refuse(
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
                Stage::Answered(pass_through(
                    finishing,
                    status,
                    Some(HeaderValue::from_static("application/json")),
                    self.headers(route, limits),
                    Source::Buffered(body),
                ))
            }
        }
    }

    fn finishing(&self, route: &str, upstream: Upstream, spent_before: f64) -> Finishing {
        Finishing {
            app: self.app.clone(),
            record: None,
            started: self.started,
            answer: Answer::default(),
            sse: None,
            body: Vec::new(),
            body_unread: false,
            route: route.to_owned(),
            upstream,
            spent_before,
            first_byte: None,
            ending: Ending::default(),
            expected_bytes: None,
            passed_bytes: 0,
            over: false,
            slots: Vec::new(),
        }
    }

    fn failed_reason(&self, record: ServedRecord, reason: Reason, message: &str) -> Stage {
        Stage::Answered(refuse(
            self.app,
            record,
            reason,
            self.started,
            error(StatusCode::BAD_GATEWAY, "upstream_error", None, message),
        ))
    }

    /// Calls the route (or its fallback); passes its answer on, or (a
    /// cascade stage before the last) reads it whole, asks the verifier,
    /// and releases it or escalates. The request's slots (`held`: in total
    /// and its tenant's) and the route's go with the answer, given back
    /// when its last byte has gone.
    pub async fn answer(
        &self,
        mut record: ServedRecord,
        spent: &mut f64,
        held: &mut Vec<Slot>,
    ) -> Stage {
        let mut reached = match self.reach(&mut record).await {
            Ok(reached) => reached,
            Err(stage) => return stage,
        };
        let assembling =
            |reached: &Reached| is_sse(reached.content_type.as_ref()) && !self.client_streams();
        // A client that did not stream has been sent nothing while its
        // answer is assembled: the route's stall, cut or malformed stream
        // may still move it, once, to the fallback.
        while self.last && assembling(&reached) {
            record.status = Status::from_http(reached.status.as_u16());
            let unread = match self.assembled(record, *reached, *spent, held).await {
                Ok(stage) => return stage,
                Err((kept, unread)) => {
                    record = kept;
                    unread
                }
            };
            let at_ms = self.elapsed_ms();
            let movable = unread.route == self.route
                && matches!(
                    unread.ending,
                    Ending::Stalled | Ending::UpstreamCut | Ending::Malformed
                );
            let fallback = movable
                .then(|| self.fallback_for(self.arrival_ms + at_ms, FallbackMove::AfterAttempt));
            match fallback {
                Some(Ok(fallback)) => {
                    self.abandoned_mid_answer(&record, &unread, at_ms, &fallback);
                    let reason = Reason::Fallback(if unread.ending == Ending::Stalled {
                        Move::Deadline
                    } else {
                        Move::Error
                    });
                    reached = match self.moved(&mut record, &fallback, reason).await {
                        Ok(reached) => reached,
                        Err(stage) => return stage,
                    };
                }
                stayed => {
                    if let Some(Err(stay)) = stayed
                        && let Some(reason) = stay.reason()
                    {
                        record.reason = Some(reason);
                    }
                    return self.unassembled(record, unread);
                }
            }
        }
        let Reached {
            route,
            upstream,
            status,
            content_type,
            limits,
            expected_bytes,
            source,
            slot,
            ttft_ms,
            hedged,
        } = *reached;
        let sse = is_sse(content_type.as_ref());
        record.status = Status::from_http(status.as_u16());
        let mut finishing = self.finishing(&route, upstream.clone(), *spent);
        finishing.sse = sse.then(Framer::default);
        finishing.expected_bytes = expected_bytes;
        let assembling = sse && !self.client_streams();
        if self.last {
            // The first byte's time is the one the breaker learned.
            finishing.first_byte = Some(ttft_ms);
            hold(&mut finishing, held, slot, hedged);
            finishing.record = Some(record);
            return Stage::Answered(pass_through(
                finishing,
                status,
                content_type,
                self.headers(&route, limits),
                source,
            ));
        }
        // A cascade stage before the last: its answer is read whole and
        // verified before the client sees any of it.
        let total_deadline = tokio::time::Instant::from_std(self.started) + self.app.timeouts.total;
        let bytes = match tokio::time::timeout_at(total_deadline, read_whole(source)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(problem)) => return self.failed_reason(record, Reason::UpstreamCut, &problem),
            Err(_) => {
                return self
                    .failed(record, &route, Failure::Deadline { by_breaker: false })
                    .await;
            }
        };
        let (score, own, verifier_cost) = match self
            .verdict(&mut record, &bytes, sse, &upstream, total_deadline)
            .await
        {
            Ok(verdict) => verdict,
            Err(stage) => return stage,
        };
        *spent += own + verifier_cost;
        if self.decided.plan.escalates_from(self.stage, score) {
            return Stage::Escalated(Box::new(record));
        }
        let (bytes, content_type) = if assembling {
            finishing.sse = None;
            let completion = super::assemble::completion_of(&bytes);
            (
                completion,
                Some(HeaderValue::from_static("application/json")),
            )
        } else {
            (bytes, content_type)
        };
        finishing.spent_before = *spent - own;
        finishing.record = Some(record);
        hold(&mut finishing, held, slot, hedged);
        Stage::Answered(pass_through(
            finishing,
            status,
            content_type,
            self.headers(&route, limits),
            Source::Buffered(bytes),
        ))
    }
}

/// An answer that could not be assembled: its route and first byte's
/// time (ms after the request arrived), how its stream ended and why.
struct Unread {
    route: String,
    ttft_ms: f64,
    ending: Ending,
    message: String,
}

/// An upstream's status as `routeval_upstream_responses_total` counts it.
fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        429 => "429",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// The request's slots (`held`: in total and its tenant's), its route's and
/// a hedged copy's, given back with the answer's last byte.
fn hold(finishing: &mut Finishing, held: &mut Vec<Slot>, slot: Slot, hedged: Option<Hedged>) {
    finishing.slots.append(held);
    finishing.slots.push(slot);
    finishing.slots.extend(hedged.map(|hedged| hedged.slot));
}

impl StageCall<'_> {
    /// The verifier's verdict on a cascade stage's whole answer `bytes`,
    /// into the record's score: the score, what the stage's call and the
    /// verifier's cost, or the client's response when the verifier failed.
    async fn verdict(
        &self,
        record: &mut ServedRecord,
        bytes: &[u8],
        sse: bool,
        upstream: &Upstream,
        deadline: tokio::time::Instant,
    ) -> Result<(f64, f64, f64), Stage> {
        let answer = if sse {
            let mut answer = Answer::keeping_text();
            answer.feed_sse(bytes);
            answer
        } else {
            Answer::of_json(bytes)
        };
        let own = upstream.cost(
            answer.input_tokens.unwrap_or(0),
            answer.cached_input_tokens.unwrap_or(0),
            answer.output_tokens.unwrap_or(0),
        );
        let Plan::Cascade { verifier, .. } = &self.decided.plan else {
            unreachable!("only a cascade has stages before the last")
        };
        let verdict = verify(self.app, self.decided, verifier, &answer.text, deadline).await;
        match verdict {
            Ok((score, verifier_cost)) => {
                record.score = Some(score);
                Ok((score, own, verifier_cost))
            }
            Err(problem) => {
                record.score = None;
                Err(self.failed_reason(record.clone(), Reason::VerifierFailed, &problem))
            }
        }
    }

    /// A streamed answer read whole for a client that did not stream, and
    /// answered as the non-streamed completion, the request's slots (`held`)
    /// then kept until it is sent. Or, when the route's stream stalled, was
    /// cut, was malformed or too long to assemble: the record, how it ended,
    /// the route and its first byte's time, the route's slots given back.
    async fn assembled(
        &self,
        record: ServedRecord,
        reached: Reached,
        spent_before: f64,
        held: &mut Vec<Slot>,
    ) -> Result<Stage, (ServedRecord, Unread)> {
        let Reached {
            route,
            upstream,
            status,
            limits,
            source,
            slot,
            ttft_ms,
            hedged,
            ..
        } = reached;
        let mut assembly = Assembly::default();
        let mut answer = Answer::default();
        let read = read_events(
            &route,
            source,
            self.started,
            self.app.timeouts,
            &mut assembly,
            &mut answer,
        )
        .await;
        if let Err((ending, message)) = read {
            let unread = Unread {
                route,
                ttft_ms,
                ending,
                message,
            };
            return Err((record, unread));
        }
        let completion = serde_json::to_vec(&assembly.completion()).expect("JSON serialises");
        let mut finishing = self.finishing(&route, upstream, spent_before);
        finishing.answer = answer;
        // The first byte's time is the one the breaker learned.
        finishing.first_byte = Some(ttft_ms);
        finishing.body_unread = true;
        finishing.expected_bytes = Some(completion.len() as u64);
        finishing.record = Some(record);
        hold(&mut finishing, held, slot, hedged);
        let source = Source::Stream {
            first: Some(Bytes::from(completion)),
            rest: futures_util::stream::empty().boxed(),
        };
        Ok(Stage::Answered(pass_through(
            finishing,
            status,
            Some(HeaderValue::from_static("application/json")),
            self.headers(&route, limits),
            source,
        )))
    }

    /// The client's error for an answer that could not be assembled and
    /// could not move: 504 for a stall or the total deadline, 502 for a
    /// cut, a malformed or an overlong stream.
    fn unassembled(&self, mut record: ServedRecord, unread: Unread) -> Stage {
        let (code, kind, record_status, finish_reason) = match unread.ending {
            Ending::Stalled => (
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                Status::Timeout,
                "stall",
            ),
            Ending::PastTotal => (
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                Status::Timeout,
                "total_deadline",
            ),
            Ending::Malformed => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                Status::Error,
                "upstream_malformed",
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                Status::Error,
                "upstream_cut",
            ),
        };
        record.status = record_status;
        record.finish_reason = Some(finish_reason.into());
        record.ttft_ms = Some(unread.ttft_ms);
        Stage::Answered(refused_as_recorded(
            self.app,
            record,
            self.started,
            error(code, kind, None, &unread.message),
        ))
    }

    /// The record of a route left after its first byte, while serve was
    /// assembling its answer (`<id>-attempt-1`), and the log line.
    fn abandoned_mid_answer(
        &self,
        record: &ServedRecord,
        unread: &Unread,
        at_ms: f64,
        fallback: &str,
    ) {
        let stalled = unread.ending == Ending::Stalled;
        let mut attempt = record.clone();
        attempt.id = format!("{}{}", record.id, crate::records::ATTEMPT_ID_SUFFIX).into();
        attempt.route = self.route.to_owned().into();
        attempt.status = if stalled {
            Status::Timeout
        } else {
            Status::Error
        };
        attempt.reason = Some(Reason::Abandoned(if stalled {
            Cause::Deadline
        } else {
            Cause::Error
        }));
        attempt.finish_reason = Some(
            match unread.ending {
                Ending::Stalled => "stall",
                Ending::Malformed => "upstream_malformed",
                _ => "upstream_cut",
            }
            .into(),
        );
        attempt.ttft_ms = Some(unread.ttft_ms);
        attempt.total_ms = Some(at_ms);
        self.app.finish_attempt(attempt);
        self.app
            .log
            .event(
                Level::Warn,
                "upstream_failed",
                format!(
                    "{} before serve had sent the client anything; the request moved to {fallback:?}",
                    unread.message
                ),
            )
            .field("request_id", self.decided.request_id.clone())
            .field("route", self.route)
            .field("failure", if stalled { "stall" } else { "cut" })
            .field("at_ms", at_ms)
            .field("fallback", Some(fallback))
            .emit();
    }
}

/// A stage's whole answer, from its first chunk on.
async fn read_whole(source: Source) -> Result<Vec<u8>, String> {
    match source {
        Source::Buffered(bytes) => Ok(bytes),
        Source::Stream { first, mut rest } => {
            let mut bytes: Vec<u8> = first.map(|chunk: Bytes| chunk.to_vec()).unwrap_or_default();
            while let Some(chunk) = rest.next().await {
                let chunk = chunk.map_err(|problem| super::forward::without_url(&problem))?;
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        }
    }
}

/// The most of an upstream's error body read, and how long it may take.
const MAX_ERROR_BODY_BYTES: usize = 64 << 10;
const ERROR_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The body a client gets for `route`'s error `status`: the upstream's own
/// when it is an OpenAI-style error that carries neither the route's key
/// nor its address, else serve's, naming the route and the status.
async fn upstream_error_body(
    route: &str,
    upstream: &Upstream,
    status: StatusCode,
    response: reqwest::Response,
    total: tokio::time::Instant,
) -> Vec<u8> {
    let deadline = total.min(tokio::time::Instant::now() + ERROR_BODY_WAIT);
    let mut chunks = response.bytes_stream();
    let mut body = Vec::new();
    while body.len() <= MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout_at(deadline, chunks.next()).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let whole = body.len() <= MAX_ERROR_BODY_BYTES;
    let is_openai_error = whole
        && serde_json::from_slice::<serde_json::Value>(&body)
            .is_ok_and(|value| value.get("error").is_some_and(serde_json::Value::is_object));
    let contains = |needle: &str| {
        !needle.is_empty()
            && body
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
    };
    let host = reqwest::Url::parse(&upstream.chat_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default();
    let secret = upstream.api_key.as_deref().is_some_and(contains)
        || contains(&upstream.chat_url)
        || contains(&host);
    if is_openai_error && !secret {
        return body;
    }
    let why = if secret {
        "its body was withheld: it carried the route's credentials or address"
    } else {
        "its body was not an OpenAI-style error"
    };
    let kind = if status == StatusCode::TOO_MANY_REQUESTS {
        "rate_limit_error"
    } else {
        "upstream_error"
    };
    serde_json::to_vec(&serde_json::json!({
        "error": {
            "message": format!("route {route:?} answered {status}; {why}"),
            "type": kind,
            "param": null,
            "code": status.as_u16().to_string(),
        }
    }))
    .expect("JSON serialises")
}
