//! The layer in front of the paths that decide: each request gets its
//! [`Ledger`] and its record, begun with the config that will decide it,
//! before anything past its key may refuse it, so it leaves exactly one
//! record whatever happens. A response whose record was written before it
//! left (a refusal, an error, an answer passed on whole) leaves once its
//! record is as durable as the journal promises, as a streamed answer's
//! last bytes do: what a kill can lose is bounded whatever the status.

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
    let ledger = new(&app);
    request.extensions_mut().insert(ledger.clone());
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
    let response = next.run(request).await;
    committed(&app, &ledger).await;
    response
}

/// A request's ledger: a record never finished is written as it arrived.
pub(super) fn new(app: &Arc<App>) -> Arc<Ledger> {
    let writer = app.clone();
    Arc::new(Ledger::new(Box::new(move |record, ended_by, total_ms| {
        unfinished(&writer, record, ended_by, total_ms);
    })))
}

/// Waits for the commit of the request's record, if it is written yet and
/// the journal asks answers to wait (`super::super::journal::Journal::committed`).
pub(super) async fn committed(app: &App, ledger: &Ledger) {
    if let Some(number) = ledger.journaled() {
        app.journal.committed(number).await;
    }
}
