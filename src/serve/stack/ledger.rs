//! The layer in front of the paths that decide: each request gets its
//! [`Ledger`] and its record, begun with the config that will decide it,
//! before anything past its key may refuse it, so it leaves exactly one
//! record whatever happens.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::super::app::App;
use super::super::pending::{Carried, Pending};
use super::super::served::Ledger;
use super::super::witness::{begin, unfinished};

pub(super) async fn open(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let writer = app.clone();
    let ledger = Ledger::new(Box::new(move |record, ended_by, total_ms| {
        unfinished(&writer, record, ended_by, total_ms);
    }));
    request.extensions_mut().insert(Arc::new(ledger));
    let deployed = app.current();
    let record = begin(&app, &deployed, &request);
    request.extensions_mut().insert(Carried::new(Pending {
        record,
        deployed,
        started: Instant::now(),
        held: Vec::new(),
        body: Vec::new(),
        decided: None,
    }));
    next.run(request).await
}
