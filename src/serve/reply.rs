//! How a request refused before any answer is told: the OpenAI-style
//! error body, and the refusal handed to the witness, which writes it once
//! (unauthenticated ones at a bounded rate).

use std::time::Instant;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::records::{Reason, Status};

use super::admission::Full;
use super::app::App;
use super::served::ServedRecord;
use super::witness::{Refusal, refused};

/// An OpenAI-style error body with no `code`.
pub fn error(status: StatusCode, kind: &str, param: Option<&str>, message: &str) -> Response {
    error_with_code(status, kind, param, None, message)
}

/// An OpenAI-style error body with the `code` OpenAI gives the same
/// refusal (`invalid_api_key`, `model_not_found`), which SDKs and client
/// retry logic match on.
pub fn error_with_code(
    status: StatusCode,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
    message: &str,
) -> Response {
    let code = code.map_or(Value::Null, Value::from);
    let body = json!({"error": {"message": message, "type": kind, "param": param, "code": code}});
    (status, axum::Json(body)).into_response()
}

/// `response`, for a request refused for `reason` before any answer
/// reached the client.
pub(super) fn refuse(
    app: &App,
    record: ServedRecord,
    reason: Reason,
    started: Instant,
    response: Response,
) -> Response {
    refuse_as(app, record, Refusal::because(reason), started, response)
}

/// `response`, for a request refused as `refusal` says.
pub(super) fn refuse_as(
    app: &App,
    record: ServedRecord,
    refusal: Refusal,
    started: Instant,
    response: Response,
) -> Response {
    refused(app, record, refusal, started);
    response
}

/// A 429 with `Retry-After` for a request beyond an admission bound,
/// recorded as rate limited with the bound that refused it.
pub(super) fn overloaded(
    app: &App,
    record: ServedRecord,
    started: Instant,
    full: Full,
) -> Response {
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
    let refusal = Refusal::with_status(full.reason(), Status::RateLimited);
    refuse_as(app, record, refusal, started, response)
}
