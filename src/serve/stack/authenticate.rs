//! The layer in front of every route but the public ones
//! ([`super::Access::Public`]): the key's identity goes into the request
//! for its handler. A request without a valid key (the scheme read
//! case-insensitively) gets 401 from its headers alone, before a byte of
//! its body is read; one that asked for a decision also leaves its record,
//! at most `UNAUTHORIZED_RECORDS_PER_SECOND` a second, committed as any
//! other refusal's before the 401 leaves.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::records::{Reason, Refusal};

use super::super::app::App;
use super::super::reply::{error_with_code, refuse};
use super::super::witness::begin;
use super::{Access, Endpoint};

pub(super) async fn key(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .and_then(|matched| Endpoint::at(matched.as_str()));
    // A route serve answers is keyed unless its endpoint says public.
    if endpoint.is_some_and(|endpoint| endpoint.access() == Access::Public) {
        return next.run(request).await;
    }
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
    let response = error_with_code(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        None,
        Some("invalid_api_key"),
        "a valid API key is required (Authorization: Bearer KEY)",
    );
    if !endpoint.is_some_and(Endpoint::decides) {
        return response;
    }
    let ledger = super::ledger::new(&app);
    request.extensions_mut().insert(ledger.clone());
    let record = begin(&app, &app.current(), &request);
    let response = refuse(
        &app,
        record,
        Reason::Refused(Refusal::Unauthorized),
        Instant::now(),
        response,
    );
    super::ledger::committed(&app, &ledger).await;
    response
}
