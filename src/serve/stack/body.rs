//! The layer that reads a request's body, only up to `--max-body-bytes`
//! and only until `--body-timeout-ms` after its arrival: one that says or
//! turns out to be longer is refused with 413 without reading the rest,
//! one still arriving at the deadline with 408 (a client that trickles its
//! upload gives its slots back), and one whose connection closed under it
//! is recorded as a client that left.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;

use crate::records::{self, Reason, Status};

use super::super::app::App;
use super::super::pending::{put, take};
use super::super::reply::{error, refuse_as};
use super::super::served::CLIENT_DISCONNECTED;
use super::super::settings::after;
use super::super::witness::Refusal;

pub(super) async fn read(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut pending = take(&request);
    let (parts, body) = request.into_parts();
    let request = Request::from_parts(parts, Body::empty());
    let deadline = after(
        tokio::time::Instant::from_std(pending.started),
        app.settings.body_timeout,
    );
    let read = within_limit(app.settings.max_body_bytes, request.headers(), body);
    let read = match tokio::time::timeout_at(deadline, read).await {
        Ok(read) => read,
        Err(_) => Err(too_slow(app.settings.body_timeout)),
    };
    match read {
        Ok(bytes) => {
            pending.body = bytes;
            put(&request, pending);
            next.run(request).await
        }
        Err((refusal, response)) => {
            refuse_as(&app, pending.record, refusal, pending.started, response)
        }
    }
}

/// The refusal of a body still arriving `timeout` after its request.
fn too_slow(timeout: std::time::Duration) -> (Refusal, Response) {
    let response = error(
        StatusCode::REQUEST_TIMEOUT,
        "invalid_request_error",
        Some("body"),
        &format!(
            "the request body did not arrive whole within --body-timeout-ms ({} ms)",
            timeout.as_millis()
        ),
    );
    let refusal = Refusal {
        status: Some(Status::Timeout),
        finish_reason: Some(BODY_TIMEOUT),
        ..Refusal::because(Reason::Refused(records::Refusal::BadRequest))
    };
    (refusal, response)
}

/// The finish reason of a request whose body came too slowly.
const BODY_TIMEOUT: &str = "body_timeout";

/// The body, or the refusal of one too long or cut.
async fn within_limit(
    most: usize,
    headers: &axum::http::HeaderMap,
    body: Body,
) -> Result<Vec<u8>, (Refusal, Response)> {
    let bad_request = || Refusal::because(Reason::Refused(records::Refusal::BadRequest));
    let too_large = || {
        let response = error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            Some("body"),
            "the request body is larger than --max-body-bytes",
        );
        (bad_request(), response)
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > most as u64) {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        // A body that stops before its length is a connection that closed
        // (or failed) under it: the client left.
        let chunk = chunk.map_err(|problem| {
            let response = error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("body"),
                &format!("the request body could not be read: {problem}"),
            );
            let refusal = Refusal {
                status: Some(Status::Error),
                finish_reason: Some(CLIENT_DISCONNECTED),
                ..bad_request()
            };
            (refusal, response)
        })?;
        if bytes.len().saturating_add(chunk.len()) > most {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
