//! A request for a decision on its way down the stack: its record (begun
//! by the ledger layer), the config that decides it, when it arrived, the
//! slots it holds, its body once read and its decision once made. Each
//! layer takes it, adds what it knows, and puts it back for the next; a
//! layer that refuses the request ends its record.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::Request;

use super::admission::Slot;
use super::decision::Decided;
use super::deployed::Deployed;
use super::served::ServedRecord;

/// What a request for a decision carries down the stack.
pub(super) struct Pending {
    pub record: ServedRecord,
    /// The config as the request arrived: the one that decides it.
    pub deployed: Arc<Deployed>,
    pub started: Instant,
    /// Admission slots, given back with the answer's last byte.
    pub held: Vec<Slot>,
    pub body: Vec<u8>,
    pub decided: Option<Decided>,
}

/// The request extension that carries [`Pending`] from layer to layer.
#[derive(Clone)]
pub(super) struct Carried(Arc<Mutex<Option<Pending>>>);

impl Carried {
    pub(super) fn new(pending: Pending) -> Carried {
        Carried(Arc::new(Mutex::new(Some(pending))))
    }
}

/// Takes the request's [`Pending`] for a layer's work.
pub(super) fn take(request: &Request) -> Pending {
    request
        .extensions()
        .get::<Carried>()
        .and_then(|carried| carried.0.lock().expect("unpoisoned").take())
        .expect("every path that decides passes the ledger layer, and each layer puts back what it took")
}

/// Puts the request's [`Pending`] back for the next layer.
pub(super) fn put(request: &Request, pending: Pending) {
    if let Some(carried) = request.extensions().get::<Carried>() {
        *carried.0.lock().expect("unpoisoned") = Some(pending);
    }
}
