//! One route's turn at a request (the only one, or a cascade's stage), and
//! how it leaves a failing route: the route's breaker is asked first; a
//! request it sends on, or one whose route fails before its first byte (an
//! error, a 429, no answer, or a first token past the route's deadline),
//! moves to the table's fallback if the fallback's `rpm`/`tpm` and the retry
//! budget allow; otherwise the client gets the route's failure. After the
//! first byte, a request that did not stream may still move while its
//! answer is assembled (nothing has reached the client yet); a streamed
//! one may not: a stall or a cut is its error, never a second model's
//! text spliced on. This file reaches a route and answers; leaving a failing
//! route is `leaving.rs`, an answer read whole for a client that did not
//! stream `whole.rs`, a hedged call `hedging.rs`, why a route gave no
//! first byte `failure.rs`, and the body of an upstream's error
//! `upstream_error.rs`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use crate::policy::{Admit, CallOutcome, FallbackMove};
use crate::records::{Move, Reason, Status};

use super::admission::{Full, Slot};
use super::answer::Answer;
use super::app::App;
use super::decision::Decided;
use super::deployed::Upstream;
use super::failure::{Failure, status_class};
use super::forward::outgoing_headers;
use super::forward::{
    CallFailed, Called, Ending, Finishing, Source, call, first_chunk, is_sse, pass_through,
};
use super::reply::overloaded;
use super::served::ServedRecord;
use super::sse::Framer;

/// One route's turn at a request: the only one, or a cascade's stage.
pub(super) struct Turn<'a> {
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

/// How a turn ended: the client's response, or (a cascade stage whose
/// answer the verifier rejected) the record, for the next stage's turn.
pub(super) enum TurnEnd {
    Answered(Response),
    Escalated(Box<ServedRecord>),
}

/// A route that gave its first byte in time.
pub(super) struct Reached {
    pub(super) route: String,
    pub(super) upstream: Upstream,
    pub(super) status: StatusCode,
    pub(super) content_type: Option<HeaderValue>,
    /// The upstream's rate-limit headers, passed on.
    pub(super) limits: Vec<(HeaderName, HeaderValue)>,
    /// The body's length, where the upstream said it.
    pub(super) expected_bytes: Option<u64>,
    pub(super) source: Source,
    pub(super) slot: Slot,
    /// Its first byte, ms after the request arrived.
    pub(super) ttft_ms: f64,
    /// Whether a hedged copy was sent, and which answered.
    pub(super) hedged: Option<Hedged>,
}

/// A hedged call: which of the two answered, and when the other was
/// cancelled.
pub(super) struct Hedged {
    pub(super) copy_won: bool,
    pub(super) cancelled_at_ms: f64,
    /// The copy's route slot, given back with the answer.
    pub(super) slot: Slot,
}

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

pub(super) enum Attempt {
    Reached(Box<Reached>),
    /// Failed `at_ms` after the request arrived.
    Failed {
        failure: Failure,
        at_ms: f64,
    },
    Full(Full),
}

impl Turn<'_> {
    /// The decision's headers, then the upstream's rate-limit headers.
    pub(super) fn headers(
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
    pub(super) fn client_streams(&self) -> bool {
        self.decided.request.get("stream") == Some(&serde_json::Value::Bool(true))
    }

    /// Whether `route` is called with streaming though the client did not
    /// stream (serve then assembles the answer).
    pub(super) fn streams_for_client(&self, route: &str) -> bool {
        !self.client_streams()
            && self
                .decided
                .deployed
                .config
                .table
                .route(route)
                .is_some_and(|found| found.stream_upstream)
    }

    pub(super) fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    /// Where this stage's deadlines count from: the request's arrival for
    /// its first stage (the times its record gives), else now.
    pub(super) fn stage_start(&self) -> (Instant, f64) {
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
    pub(super) fn deadline_ms(&self, route: &str) -> (f64, bool) {
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
    pub(super) async fn first_byte(
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

    /// This stage's route, or its fallback: the route that gave a first
    /// byte, or the client's response (already recorded).
    pub(super) async fn reach(&self, record: &mut ServedRecord) -> Result<Box<Reached>, TurnEnd> {
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
                Err(TurnEnd::Answered(overloaded(
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

    pub(super) fn finishing(
        &self,
        route: &str,
        upstream: Upstream,
        spent_before: f64,
    ) -> Finishing {
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

    /// The last stage's answer for a client that did not stream, read and
    /// assembled: nothing has been sent yet, so the route's stall, cut or
    /// malformed stream may still move it, once, to the fallback. `Err`:
    /// the request's end; `Ok`: a route reached whose answer passes on as
    /// it comes.
    async fn assemble_or_move(
        &self,
        mut record: ServedRecord,
        mut reached: Box<Reached>,
        spent: f64,
        held: &mut Vec<Slot>,
    ) -> Result<(ServedRecord, Box<Reached>), TurnEnd> {
        let assembling =
            |reached: &Reached| is_sse(reached.content_type.as_ref()) && !self.client_streams();
        while assembling(&reached) {
            record.status = Status::from_http(reached.status.as_u16());
            let unread = match self.assembled(record, *reached, spent, held).await {
                Ok(stage) => return Err(stage),
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
                        Err(stage) => return Err(stage),
                    };
                }
                stayed => {
                    if let Some(Err(stay)) = stayed
                        && let Some(reason) = stay.reason()
                    {
                        record.reason = Some(reason);
                    }
                    return Err(self.unassembled(record, unread));
                }
            }
        }
        Ok((record, reached))
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
    ) -> TurnEnd {
        let mut reached = match self.reach(&mut record).await {
            Ok(reached) => reached,
            Err(stage) => return stage,
        };
        if self.last {
            (record, reached) = match self.assemble_or_move(record, reached, *spent, held).await {
                Ok(going_on) => going_on,
                Err(stage) => return stage,
            };
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
            return TurnEnd::Answered(pass_through(
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
            return TurnEnd::Escalated(Box::new(record));
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
        TurnEnd::Answered(pass_through(
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
pub(super) struct Unread {
    pub(super) route: String,
    pub(super) ttft_ms: f64,
    pub(super) ending: Ending,
    pub(super) message: String,
}

/// The request's slots (`held`: in total and its tenant's), its route's and
/// a hedged copy's, given back with the answer's last byte.
pub(super) fn hold(
    finishing: &mut Finishing,
    held: &mut Vec<Slot>,
    slot: Slot,
    hedged: Option<Hedged>,
) {
    finishing.slots.append(held);
    finishing.slots.push(slot);
    finishing.slots.extend(hedged.map(|hedged| hedged.slot));
}

/// A stage's whole answer, from its first chunk on.
pub(super) async fn read_whole(source: Source) -> Result<Vec<u8>, String> {
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
