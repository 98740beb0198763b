//! A request's turn at its routes, after it was decided: each stage (the
//! only one, or a cascade's) calls its route, and leaves it for the
//! table's fallback when its breaker, a failure before the first byte or
//! (for a client that did not stream) a broken answer says so and the
//! fallback's `rpm`/`tpm` and the retry budget allow; otherwise the client
//! gets the route's failure. After the first byte a streamed answer never
//! moves: a stall or a cut is its error, never a second model's text
//! spliced on.
//!
//! - `attempt.rs`: one attempt at a route, to its first byte, as a typed
//!   outcome (no record, breaker or metric touched);
//! - `next.rs`: the pure step after an outcome: answer, move or fail;
//! - `reach.rs`: a stage's route or its fallback, by those two;
//! - `stage.rs`: a stage from its route reached to its answer passed on
//!   (or verified and escalated);
//! - `whole.rs`: an answer read whole, for a cascade's verifier or a
//!   client that did not stream;
//! - `hedge.rs`: a copy raced against a slow call;
//! - `leaving.rs`: what the client is told when its route failed.
//!
//! What happens is told to the witness ([`super::witness`]) as events; it
//! alone writes the record, the metrics, the spans, the breakers and the
//! log.

mod attempt;
mod hedge;
mod leaving;
mod next;
mod reach;
mod stage;
mod whole;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;

use crate::policy::Plan;

use super::admission::Slot;
use super::answer::Answer;
use super::app::App;
use super::connections::Hangup;
use super::decision::{Decided, routes_of};
use super::deployed::Upstream;
use super::ending::Ending;
use super::forward::Source;
use super::passing::Finishing;
use super::served::ServedRecord;
use super::settings::after;
use super::witness::{Billed, Event, see};

/// One route's turn at a request: the only one, or a cascade's stage.
pub(super) struct Turn<'a> {
    pub app: &'a Arc<App>,
    pub decided: &'a Decided,
    pub route: &'a str,
    pub stage: usize,
    pub last: bool,
    pub started: Instant,
    /// The client's connection, closed for an answer it stopped reading.
    pub hangup: Option<Hangup>,
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

/// An answer that could not be assembled: its route and first byte's
/// time (ms after the request arrived), how its stream ended and why.
pub(super) struct Unread {
    pub(super) route: String,
    pub(super) ttft_ms: f64,
    pub(super) ending: Ending,
    pub(super) message: String,
}

/// A decided request's turns: its route's, or a cascade's stages in turn
/// until one is answered. The request's slots (`held`: in total and its
/// tenant's) go with the answer.
pub(super) async fn run(
    app: &Arc<App>,
    decided: &Decided,
    mut record: ServedRecord,
    started: Instant,
    mut held: Vec<Slot>,
    hangup: Option<Hangup>,
) -> Response {
    let (prompt_tokens, most) = requested_tokens(&decided.request);
    app.resilience.request(record.timestamp_ms as f64);
    let (stages, cascade) = match &decided.plan {
        Plan::Cascade { stages, .. } => (stages.clone(), true),
        plan => (vec![routes_of(plan)[decided.tier].to_owned()], false),
    };
    see(app, &mut record, Event::Routed { route: &stages[0] });
    let mut spent = 0.0;
    for (stage, route) in stages.iter().enumerate() {
        let tier = if cascade { stage } else { decided.tier };
        let reason = decided.plan.reason(&decided.deployed.config.table, tier);
        see(app, &mut record, Event::Staged { route, reason });
        let turn = Turn {
            app,
            decided,
            route,
            stage,
            last: stage.saturating_add(1) == stages.len(),
            started,
            hangup: hangup.clone(),
            tokens: prompt_tokens.saturating_add(most),
            prompt_tokens,
            arrival_ms: record.timestamp_ms as f64,
        };
        match turn.answer(record, &mut spent, &mut held).await {
            TurnEnd::Answered(response) => return response,
            TurnEnd::Escalated(kept) => record = *kept,
        }
    }
    unreachable!("the last stage always answers")
}

/// The request's conversation's estimated tokens, and the most it asks to
/// be generated: what a call reserves against a `tpm` is their sum.
pub(super) fn requested_tokens(request: &serde_json::Map<String, serde_json::Value>) -> (u64, u64) {
    let prompt = request
        .get("messages")
        .and_then(serde_json::Value::as_array)
        .map_or(0, |messages| super::answer::message_tokens(messages));
    let most = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|key| request.get(*key).and_then(serde_json::Value::as_u64))
        .unwrap_or(0);
    (prompt, most)
}

impl Turn<'_> {
    /// When `--total-timeout-ms` ends the request.
    pub(super) fn total_deadline(&self) -> tokio::time::Instant {
        after(
            tokio::time::Instant::from_std(self.started),
            self.app.settings.timeouts.total,
        )
    }

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

    /// Whether a streaming client asked for its usage chunk
    /// (`stream_options.include_usage`); serve asks every stream for it.
    pub(super) fn client_asked_usage(&self) -> bool {
        self.decided
            .request
            .get("stream_options")
            .and_then(|options| options.get("include_usage"))
            == Some(&serde_json::Value::Bool(true))
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

    /// What a call of `route` given up bills: the request's prompt, as
    /// estimated, at the route's input price.
    pub(super) fn billed(&self, route: &str) -> Billed {
        let cost_usd = self
            .decided
            .deployed
            .upstreams
            .get(route)
            .map_or(0.0, |upstream| upstream.cost(self.prompt_tokens, 0, 0));
        Billed {
            input_tokens: self.prompt_tokens,
            cost_usd,
        }
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
        let global = self.app.settings.timeouts.first_token.as_secs_f64() * 1e3;
        let table = &self.decided.deployed.config.table;
        let whole = table
            .route(route)
            .is_some_and(|found| !found.stream_upstream && !self.client_streams());
        if whole {
            return (self.app.settings.timeouts.total.as_secs_f64() * 1e3, false);
        }
        match table.route(route).and_then(|found| found.breaker) {
            Some(breaker) if breaker.first_token_deadline_ms < global => {
                (breaker.first_token_deadline_ms, true)
            }
            _ => (global, false),
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
            hangup: self.hangup.clone(),
            slots: Vec::new(),
        }
    }
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

/// A stage's whole answer, from its first chunk on, at most
/// [`super::forward::MAX_ASSEMBLED_BYTES`]: it is held to be verified, so a
/// route cannot make serve hold more.
pub(super) async fn read_whole(source: Source) -> Result<Vec<u8>, String> {
    let most = super::forward::MAX_ASSEMBLED_BYTES;
    let too_long =
        || format!("the stage's answer is longer than the {most} bytes serve reads to verify one");
    match source {
        Source::Buffered(bytes) if bytes.len() > most => Err(too_long()),
        Source::Buffered(bytes) => Ok(bytes),
        Source::Stream { first, mut rest } => {
            let mut bytes: Vec<u8> = first.map(|chunk: Bytes| chunk.to_vec()).unwrap_or_default();
            while let Some(chunk) = rest.next().await {
                let chunk = chunk.map_err(|problem| super::forward::without_url(&problem))?;
                if bytes.len().saturating_add(chunk.len()) > most {
                    return Err(too_long());
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        }
    }
}
