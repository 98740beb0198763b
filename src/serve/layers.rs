//! The layers every request passes before a handler: its id, its record's
//! ledger (on the paths that decide), and its key.
//! The paths that need no key are listed in one place ([`PUBLIC_PATHS`]);
//! every other route of serve's is behind [`authenticate`], which reads
//! the headers alone, so a client without a valid key is refused before a
//! byte of its body is read.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::records::{Reason, Refusal};

use super::app::{App, RequestId};
use super::reply::{begin, error, refuse};
use super::served::Ledger;

/// The header that names a request, in both directions and upstream.
pub const REQUEST_ID: &str = "x-request-id";

/// The longest request id a client may give; a longer one, or one with
/// anything but letters, digits and `-_.:`, is replaced by serve's own.
const MAX_REQUEST_ID: usize = 128;

fn client_request_id(headers: &HeaderMap) -> Option<String> {
    let id = headers.get(REQUEST_ID)?.to_str().ok()?.trim();
    let plain = !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte));
    plain.then(|| id.to_owned())
}

/// The layer that names every request: its id goes into the request (for
/// the record and the upstream call) and onto the response, whatever
/// answered it.
pub async fn request_id(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let id = client_request_id(request.headers()).unwrap_or_else(|| {
        let number = app.requests.fetch_add(1, Ordering::Relaxed);
        format!("serve-{}-{number}", app.started_ms)
    });
    let value = HeaderValue::from_str(&id).expect("a request id is a plain token");
    request.extensions_mut().insert(RequestId(id));
    let mut response = next.run(request).await;
    response.headers_mut().insert(REQUEST_ID, value);
    response
}

/// The paths whose refusals are records: requests for a decision.
const DECIDED_PATHS: [&str; 2] = ["/v1/chat/completions", "/v1/route"];

/// The layer in front of the paths that decide: each request gets its
/// [`Ledger`] before anything may refuse it, so it leaves exactly one
/// record whatever happens.
pub async fn record_once(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    if DECIDED_PATHS.contains(&request.uri().path()) {
        let writer = app.clone();
        let ledger = Ledger::new(Box::new(move |record| writer.finish_unfinished(record)));
        request.extensions_mut().insert(Arc::new(ledger));
    }
    next.run(request).await
}

/// The layer in front of every route that needs a key: the key's identity
/// goes into the request for its handler. A request without a valid key
/// (the scheme read case-insensitively) gets 401 from its headers alone;
/// one that asked for a decision also leaves its record, at most
/// `UNAUTHORIZED_RECORDS_PER_SECOND` a second.
pub async fn authenticate(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let identity = app
        .keys()
        .authenticate(
            request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok()),
        )
        .cloned();
    if let Some(identity) = identity {
        request.extensions_mut().insert(identity);
        return next.run(request).await;
    }
    let response = error(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        None,
        "a valid API key is required (Authorization: Bearer KEY)",
    );
    if !DECIDED_PATHS.contains(&request.uri().path()) {
        return response;
    }
    let record = begin(&app, &app.current(), &request);
    refuse(
        &app,
        record,
        Reason::Refused(Refusal::Unauthorized),
        Instant::now(),
        response,
    )
}
