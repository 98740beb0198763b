//! How a request's record begins and ends: begun at arrival with the
//! config that decides it, and ended once (refused, answered, dropped
//! unfinished), counted in `/metrics`, its span ended, logged and
//! journaled; the attempts beside it (an abandoned route, a hedge's
//! cancelled copy) journaled as their own records.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;

use crate::client::estimated_tokens_of_chars;
use crate::records::{Reason, Record, Refusal as Refused, Status, TokenSource};

use super::super::answer::{Answer, message_tokens};
use super::super::app::{App, id_of};
use super::super::deployed::{Deployed, Upstream};
use super::super::log::Level;
use super::super::served::{Ledger, Ledgered, SERVE_ERROR};
use super::ServedRecord;
use super::redaction;

/// The request's record before it is answered, its trace begun, and the
/// ledger that sees it written once.
pub(in crate::serve) fn begin(app: &App, deployed: &Deployed, request: &Request) -> ServedRecord {
    let name = match request.uri().path() {
        "/v1/route" => "POST /v1/route",
        _ => "POST /v1/chat/completions",
    };
    let mut record = Record::new(
        id_of(request),
        app.now_ms(),
        "-".to_owned(),
        "-".to_owned(),
        Status::Error,
    );
    record.logical_model = Some(deployed.config.table.logical_model.clone().into());
    record.config_version = Some(deployed.config.version);
    record.config_sha256 = Some(deployed.sha256.clone().into());
    let ledger = request.extensions().get::<Arc<Ledger>>().cloned();
    let record = ServedRecord {
        record,
        trace: super::super::trace::RequestTrace::begin(
            app.tracing.as_ref(),
            request.headers(),
            name,
        ),
        ledger: Ledgered::of(ledger.clone()),
    };
    if let Some(ledger) = &ledger {
        ledger.arrived(&record);
    }
    record
}

/// How a request refused before any answer reached its client ended.
#[derive(Debug, Clone, Default)]
pub(in crate::serve) struct Refusal {
    /// Its reason; `None`: the one its record gives.
    pub reason: Option<Reason>,
    pub status: Option<Status>,
    pub finish_reason: Option<&'static str>,
    /// Its route's first byte, for an answer that broke after it.
    pub ttft_ms: Option<f64>,
}

impl Refusal {
    /// Refused for `reason`.
    pub fn because(reason: Reason) -> Refusal {
        Refusal {
            reason: Some(reason),
            ..Refusal::default()
        }
    }

    /// Refused for `reason`, with `status`.
    pub fn with_status(reason: Reason, status: Status) -> Refusal {
        Refusal {
            reason: Some(reason),
            status: Some(status),
            ..Refusal::default()
        }
    }
}

/// Writes a request refused before any answer: counted and logged as
/// every request is, and journaled, those refused for want of a valid key
/// at most `UNAUTHORIZED_RECORDS_PER_SECOND` a second.
pub(in crate::serve) fn refused(
    app: &App,
    mut record: ServedRecord,
    refusal: Refusal,
    started: Instant,
) {
    let fields = &mut record.record;
    if let Some(reason) = refusal.reason {
        fields.reason = Some(reason);
    }
    if let Some(status) = refusal.status {
        fields.status = status;
    }
    if let Some(finish_reason) = refusal.finish_reason {
        fields.finish_reason = Some(finish_reason.into());
    }
    if refusal.ttft_ms.is_some() {
        fields.ttft_ms = refusal.ttft_ms;
    }
    fields.total_ms = Some(started.elapsed().as_secs_f64() * 1e3);
    let Some(ledger) = closes_ledger(app, &mut record) else {
        return;
    };
    observe(app, &record);
    let unauthorized = record.reason == Some(Reason::Refused(Refused::Unauthorized));
    if !unauthorized || app.unauthorized.take(record.timestamp_ms) {
        noted(ledger, journal(app, record));
    }
}

/// How an answer that reached its client ended.
pub(in crate::serve) struct AnswerEnd<'a> {
    pub answer: &'a Answer,
    /// How its passing on ended, where not whole: the status and the
    /// finish reason the record gives instead of the answer's.
    pub broken: Option<(Status, &'static str)>,
    pub ttft_ms: Option<f64>,
    pub total_ms: f64,
    /// The route that answered, whose prices its tokens are paid at.
    pub upstream: &'a Upstream,
    /// What earlier calls of a cascade cost.
    pub spent_before: f64,
}

/// An answered request's end, from what its answer said: its model, its
/// usage (estimated as `run` does when a stream gave none), its cost and
/// its finish reason; its number in the journal's order, if queued.
pub(in crate::serve) fn answered(
    app: &App,
    mut record: ServedRecord,
    end: AnswerEnd<'_>,
) -> Option<u64> {
    let answer = end.answer;
    let fields = &mut record.record;
    fields.total_ms = Some(end.total_ms);
    fields.ttft_ms = end.ttft_ms;
    fields.model = answer.model.clone().map(Into::into).or(fields.model.take());
    let input = answer.input_tokens.or_else(|| {
        answer.model.is_some().then(|| {
            fields.messages.as_deref().map_or(0, |messages| {
                message_tokens(
                    &serde_json::from_str::<Vec<serde_json::Value>>(messages).unwrap_or_default(),
                )
            })
        })
    });
    let output = answer.output_tokens.or_else(|| {
        answer
            .model
            .is_some()
            .then(|| estimated_tokens_of_chars(answer.text_chars))
    });
    fields.token_source = input.zip(output).map(|_| {
        if answer.input_tokens.is_some() && answer.output_tokens.is_some() {
            TokenSource::Provider
        } else {
            TokenSource::Estimated
        }
    });
    fields.input_tokens = input;
    fields.cached_input_tokens = answer.cached_input_tokens.or(input.map(|_| 0));
    fields.output_tokens = output;
    fields.finish_reason = answer.finish_reason.clone().map(Into::into);
    let own = input.zip(output).map(|(input, output)| {
        end.upstream
            .cost(input, answer.cached_input_tokens.unwrap_or(0), output)
    });
    fields.cost_usd = own.map(|own| own + end.spent_before);
    if let Some((status, finish_reason)) = end.broken {
        fields.status = status;
        fields.finish_reason = Some(finish_reason.into());
    }
    let ledger = closes_ledger(app, &mut record)?;
    observe(app, &record);
    noted(ledger, journal(app, record))
}

/// An attempt beside a request (a route abandoned for the fallback, a
/// hedge's cancelled call): counted by route, reason and status, and
/// journaled.
pub(in crate::serve) fn attempt_finished(app: &App, mut record: ServedRecord) {
    record.ledger.release();
    app.metrics.attempt(&record);
    journal(app, record);
}

/// A request whose record was dropped unfinished (its client left before
/// serve called a route, or serve failed while answering), `total_ms`
/// after it arrived: written all the same, ended by `ended_by`, so no
/// request goes unrecorded.
pub(in crate::serve) fn unfinished(
    app: &App,
    mut record: ServedRecord,
    ended_by: &'static str,
    total_ms: f64,
) {
    record.record.status = Status::Error;
    record.record.finish_reason = Some(ended_by.into());
    record.record.total_ms = Some(total_ms);
    if ended_by == SERVE_ERROR {
        app.log
            .event(
                Level::Error,
                "record_unfinished",
                format!(
                    "serve failed while answering request {:?}: its record is written as {SERVE_ERROR}",
                    record.id,
                ),
            )
            .field("request_id", record.id.to_string())
            .emit();
    }
    observe(app, &record);
    journal(app, record);
}

/// `number`, noted in the request's ledger (where the layer that opened it
/// waits for its commit before the response leaves).
fn noted(ledger: Option<Arc<Ledger>>, number: Option<u64>) -> Option<u64> {
    if let (Some(ledger), Some(number)) = (ledger, number) {
        ledger.journaled_as(number);
    }
    number
}

/// Whether `record` is its request's first, with its request's ledger if
/// it has one: a second is a fault of serve's, logged and not written.
fn closes_ledger(app: &App, record: &mut ServedRecord) -> Option<Option<Arc<Ledger>>> {
    let ledger = record.ledger.ledger();
    if record.ledger.close() {
        return Some(ledger);
    }
    app.log
        .event(
            Level::Error,
            "record_finished_twice",
            format!(
                "request {:?} was finished a second time; its first record stands",
                record.id
            ),
        )
        .field("request_id", record.id.to_string())
        .emit();
    None
}

/// Journals `record`, every value its readers would refuse made unknown
/// and logged first: one odd value from a route or a client must not stop
/// the journal rolling or the records being read.
fn journal(app: &App, mut record: ServedRecord) -> Option<u64> {
    redaction::keep(app.settings.records_prompts, &mut record);
    for change in crate::records::normalise(&mut record.record) {
        app.log
            .event(
                Level::Warn,
                "record_normalised",
                format!(
                    "request {:?}'s {} was recorded as unknown: {}",
                    record.id, change.field, change.problem
                ),
            )
            .field("request_id", record.id.to_string())
            .field("field", change.field)
            .emit();
    }
    app.journal.write(record)
}

/// A request's end, counted in `/metrics`, its span ended, and logged
/// (with `--log-requests`, or when its answer broke).
fn observe(app: &App, record: &ServedRecord) {
    record
        .trace
        .finish(&record.record, record.tenant.as_deref());
    app.metrics.request(record, record.tenant.as_deref());
    let broken = matches!(
        record.finish_reason.as_deref(),
        Some("upstream_cut" | "upstream_malformed" | "upstream_error" | "stall" | "total_deadline")
    );
    if broken {
        app.log
            .event(
                Level::Warn,
                "answer_broken",
                format!(
                    "route {:?} gave its first byte, then its answer ended in {}; the client got an error, never another model's text",
                    record.route,
                    record.finish_reason.as_deref().unwrap_or_default()
                ),
            )
            .field("request_id", record.id.to_string())
            .field("route", record.route.to_string())
            .field("finish_reason", record.finish_reason.as_ref().map(ToString::to_string))
            .field("ttft_ms", record.ttft_ms)
            .field("total_ms", record.total_ms)
            .emit();
    }
    if app.log.logs_requests() {
        log_request(app, record);
    }
}

/// The `request` line of `--log-requests`.
fn log_request(app: &App, record: &ServedRecord) {
    let reason = record.reason.as_ref().map(Reason::to_string);
    app.log
        .event(
            Level::Info,
            "request",
            format!(
                "{} by {} ({})",
                record.status.name(),
                record.route,
                reason.clone().unwrap_or_default()
            ),
        )
        .field("request_id", record.id.to_string())
        .field("slice", record.slice.to_string())
        .field("tenant", record.tenant.clone())
        .field("route", record.route.to_string())
        .field("model", record.model.as_ref().map(ToString::to_string))
        .field("reason", reason)
        .field("status", record.status.name())
        .field("score", record.score)
        .field("ttft_ms", record.ttft_ms)
        .field("total_ms", record.total_ms)
        .field("input_tokens", record.input_tokens)
        .field("cached_input_tokens", record.cached_input_tokens)
        .field("output_tokens", record.output_tokens)
        .field("cost_usd", record.cost_usd)
        .field(
            "finish_reason",
            record.finish_reason.as_ref().map(ToString::to_string),
        )
        .field("config_version", record.config_version)
        .emit();
}

#[cfg(test)]
impl ServedRecord {
    /// An answered request's record, `id` of `slice`, for unit tests.
    pub(in crate::serve) fn for_test(id: &str, slice: &str) -> ServedRecord {
        let mut record = Record::new(
            id.to_owned(),
            1_764_000_000_000,
            slice.to_owned(),
            "a".to_owned(),
            Status::Ok,
        );
        record.logical_model = Some("m".into());
        record.reason = Some(Reason::Routed {
            tier: "small".to_owned(),
        });
        record.input_tokens = Some(3);
        record.cached_input_tokens = Some(0);
        record.output_tokens = Some(2);
        record.ttft_ms = Some(10.0);
        record.total_ms = Some(20.0);
        record.cost_usd = Some(0.5);
        record.config_version = Some(1);
        record.config_sha256 = Some("0".repeat(64).into());
        ServedRecord {
            record,
            trace: super::super::trace::RequestTrace::default(),
            ledger: Ledgered::default(),
        }
    }
}
