//! The admission layers: a slot among `--max-in-flight` requests, taken
//! before the body is read, so requests beyond the bound cost serve their
//! headers only, whatever they upload; and, once decided, the tenant's
//! `max_in_flight` and `tpm` where the signed config names them. A request
//! beyond either is refused at once with a 429 (`super::super::reply::overloaded`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::super::app::App;
use super::super::pending::{put, take};
use super::super::reply::overloaded;
use super::super::turn::requested_tokens;
use super::records_open::keyed;

pub(super) async fn total(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut pending = take(&request);
    match app.admission.request() {
        Ok(slot) => {
            pending.held.push(slot);
            put(&request, pending);
            next.run(request).await
        }
        Err(full) => {
            keyed(&app, &mut pending.record, &request);
            overloaded(&app, pending.record, pending.started, full)
        }
    }
}

pub(super) async fn tenant(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut pending = take(&request);
    let decided = pending
        .decided
        .as_ref()
        .expect("the tenant's admission comes after the decision");
    if let Some(limit) = decided.deployed.serving.tenant_limit(&decided.tenant) {
        let (prompt, most) = requested_tokens(&decided.request);
        let arrival_ms = pending.record.timestamp_ms as f64;
        match app.admission.tenant(
            &decided.tenant,
            limit,
            arrival_ms,
            prompt.saturating_add(most),
        ) {
            Ok(slot) => pending.held.extend(slot),
            Err(full) => return overloaded(&app, pending.record, pending.started, full),
        }
    }
    put(&request, pending);
    next.run(request).await
}
