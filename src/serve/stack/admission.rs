//! The admission layers: a slot among `--max-in-flight` requests and one
//! among the key's tenant's `max_in_flight` (where the signed config names
//! it), both taken before the body is read, so requests beyond a bound
//! cost serve their headers only, whatever they upload; and, once decided,
//! the tenant's `tpm`. A request beyond any is refused at once with a 429
//! (`super::super::reply::overloaded`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::super::app::App;
use super::super::keys::Identity;
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

/// The tenant's slot, where its signed `max_in_flight` bounds it: taken
/// from the key's tenant before the body is read, so a tenant's uploads
/// hold no more than its own slots.
pub(super) async fn tenant_slot(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(identity) = request.extensions().get::<Identity>() else {
        return next.run(request).await;
    };
    let mut pending = take(&request);
    if let Some(limit) = pending.deployed.serving.tenant_limit(&identity.tenant) {
        match app.admission.tenant_slot(&identity.tenant, limit) {
            Ok(slot) => pending.held.extend(slot),
            Err(full) => {
                keyed(&app, &mut pending.record, &request);
                return overloaded(&app, pending.record, pending.started, full);
            }
        }
    }
    put(&request, pending);
    next.run(request).await
}

/// The tenant's tokens this minute, where its signed `tpm` bounds them,
/// reserved once the request is decided and its tokens known.
pub(super) async fn tenant_tokens(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let pending = take(&request);
    let decided = pending
        .decided
        .as_ref()
        .expect("the tenant's tokens are reserved after the decision");
    if let Some(limit) = decided.deployed.serving.tenant_limit(&decided.tenant) {
        let (prompt, most) = requested_tokens(&decided.request);
        let arrival_ms = pending.record.timestamp_ms as f64;
        let reserved = app.admission.tenant_tokens(
            &decided.tenant,
            limit,
            arrival_ms,
            prompt.saturating_add(most),
        );
        if let Err(full) = reserved {
            return overloaded(&app, pending.record, pending.started, full);
        }
    }
    put(&request, pending);
    next.run(request).await
}
