//! The layer that refuses requests (503) while the records cannot be
//! written, with `--records-fail closed`: no request is answered that
//! would leave no record.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

use crate::records::{Reason, Refusal};

use super::super::app::App;
use super::super::keys::Identity;
use super::super::pending::take;
use super::super::reply::{error, refuse};
use super::super::witness::{Event, see};

pub(super) async fn or_refuse(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    if !app.settings.records_fail_closed || app.journal.health.problem().is_none() {
        return next.run(request).await;
    }
    let mut pending = take(&request);
    keyed(&app, &mut pending.record, &request);
    let response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        None,
        "serve cannot write its records now, and --records-fail closed refuses requests until it can",
    );
    refuse(
        &app,
        pending.record,
        Reason::Refused(Refusal::RecordsFailing),
        pending.started,
        response,
    )
}

/// What the request's key says of a request refused before its body was
/// read: its tenant, and the key's slice where it has one.
pub(super) fn keyed(app: &App, record: &mut super::super::served::ServedRecord, request: &Request) {
    if let Some(identity) = request.extensions().get::<Identity>() {
        see(app, record, Event::Keyed(identity));
    }
}
