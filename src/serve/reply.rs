//! How a request refused before any answer is told and recorded: the
//! OpenAI-style error body, the record begun at arrival, and the refusal
//! written once (unauthenticated ones at a bounded rate).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::records::{Reason, Status};

use super::admission::Full;
use super::app::{App, id_of};
use super::deployed::Deployed;
use super::served::ServedRecord;
use super::served::{Ledger, Ledgered};

/// An OpenAI-style error body.
pub fn error(status: StatusCode, kind: &str, param: Option<&str>, message: &str) -> Response {
    let body =
        json!({"error": {"message": message, "type": kind, "param": param, "code": Value::Null}});
    (status, axum::Json(body)).into_response()
}

/// The request's record before it is answered, and its trace begun.
pub(super) fn begin(app: &App, deployed: &Deployed, request: &Request) -> ServedRecord {
    let name = match request.uri().path() {
        "/v1/route" => "POST /v1/route",
        _ => "POST /v1/chat/completions",
    };
    let mut record = ServedRecord::arrived(
        id_of(request),
        app.now_ms(),
        &deployed.config.table.logical_model,
    );
    record.config_version = Some(deployed.config.version);
    record.config_sha256 = Some(deployed.sha256.clone().into());
    record.trace = super::trace::RequestTrace::begin(app.tracing.as_ref(), request.headers(), name);
    let ledger = request.extensions().get::<Arc<Ledger>>().cloned();
    if let Some(ledger) = &ledger {
        ledger.arrived(&record);
    }
    record.ledger = Ledgered::of(ledger);
    record
}

/// Writes a request that was refused, for `reason`, before any answer
/// reached the client.
pub(super) fn refuse(
    app: &App,
    mut record: ServedRecord,
    reason: Reason,
    started: Instant,
    response: Response,
) -> Response {
    record.reason = Some(reason);
    refused_as_recorded(app, record, started, response)
}

/// Writes a request that was refused for the reason its record gives.
pub(super) fn refused_as_recorded(
    app: &App,
    mut record: ServedRecord,
    started: Instant,
    response: Response,
) -> Response {
    record.total_ms = Some(started.elapsed().as_secs_f64() * 1e3);
    app.finish_refused(record);
    response
}

/// A 429 with `Retry-After` for a request beyond an admission bound,
/// recorded as rate limited with the bound that refused it.
pub(super) fn overloaded(
    app: &App,
    mut record: ServedRecord,
    started: Instant,
    full: Full,
) -> Response {
    record.status = Status::RateLimited;
    let which = match full {
        Full::Total => "serve has --max-in-flight requests in flight",
        Full::Route => "the route has --max-in-flight-per-route requests in flight",
        Full::Tenant => "the tenant has its max_in_flight requests in flight",
        Full::TenantTokens => "the tenant has reserved its tpm tokens this minute",
    };
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        None,
        &format!("{which}; retry after a second"),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    refuse(app, record, full.reason(), started, response)
}
