//! The layer that decides: the body parsed as a chat request for the
//! logical model, the slice, the plan, the score and the draw, by the
//! config the request arrived under ([`super::super::decision`]); a
//! request it cannot decide is refused with the reason its record gives.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::trace::SpanKind;

use super::super::app::App;
use super::super::decision::{decide, decision_attributes};
use super::super::keys::Identity;
use super::super::pending::{put, take};
use super::super::reply::refuse_as;
use super::super::witness::{Event, Refusal, see};

pub(super) async fn plan(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut pending = take(&request);
    let identity = request
        .extensions()
        .get::<Identity>()
        .expect("every path that decides passes the key layer");
    let trace = pending.record.trace.clone();
    let span = trace.child("decide", SpanKind::Internal, Vec::new);
    let decided = decide(
        &app,
        pending.deployed.clone(),
        request.headers(),
        identity,
        &pending.body,
        &mut pending.record,
    );
    match decided {
        Ok(decided) => {
            span.end(|| decision_attributes(&decided), None);
            pending.record.ledger.known_as(&pending.record);
            let event = Event::Decided {
                score: decided.score,
                propensity: decided.propensity,
                draw: decided.draw,
            };
            see(&app, &mut pending.record, event);
            pending.body = Vec::new();
            pending.decided = Some(decided);
            put(&request, pending);
            next.run(request).await
        }
        Err(refused) => {
            span.end(Vec::new, Some(refused.reason.to_string()));
            let refusal = Refusal::because(refused.reason);
            refuse_as(
                &app,
                pending.record,
                refusal,
                pending.started,
                refused.response,
            )
        }
    }
}
