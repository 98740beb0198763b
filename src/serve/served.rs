//! A served request's record, and the ledger that sees it written exactly
//! once. Each request for a decision leaves exactly one record, whatever
//! happened to it. The `record_once` layer opens a [`Ledger`] for the
//! request; the request's record carries it, and finishing the record
//! closes it. A record finished a second time is not written again, and a
//! request whose every copy of its record was dropped unfinished is written
//! all the same: as a client that left (its connection closed while serve
//! read its body or decided), or as serve's own failure (a panic while
//! answering it). The records never have a hole where a request was.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::records::Record;

/// What an unfinished request's record says ended it when serve failed.
pub const SERVE_ERROR: &str = "serve_error";

/// What it says when the client's connection went first.
pub const CLIENT_DISCONNECTED: &str = "client_disconnected";

/// A served request: its record (the one record type every importer
/// builds too), and what serve keeps beside it that is no records column.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedRecord {
    pub record: Record<'static>,
    /// The request's trace, ended with its record.
    pub trace: super::trace::RequestTrace,
    /// The request's ledger, closed when its record is written.
    pub ledger: Ledgered,
}

impl std::ops::Deref for ServedRecord {
    type Target = Record<'static>;

    fn deref(&self) -> &Record<'static> {
        &self.record
    }
}

impl std::ops::DerefMut for ServedRecord {
    fn deref_mut(&mut self) -> &mut Record<'static> {
        &mut self.record
    }
}

/// What writes a record never finished: the record as it arrived, what
/// ended it, and when (ms after it arrived).
type Unfinished = Box<dyn Fn(ServedRecord, &'static str, f64) + Send + Sync>;

/// Whether a request's record was finished, and the record as it arrived,
/// written when it never was.
pub struct Ledger {
    finished: AtomicBool,
    /// The record's number in the journal once queued; 0 before.
    journaled: AtomicU64,
    arrived: Mutex<Option<(ServedRecord, Instant)>>,
    unfinished: Unfinished,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Ledger")
            .field("finished", &self.finished.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// A ledger that hands a record never finished to `unfinished`.
    pub fn new(unfinished: Unfinished) -> Ledger {
        Ledger {
            finished: AtomicBool::new(false),
            journaled: AtomicU64::new(0),
            arrived: Mutex::new(None),
            unfinished,
        }
    }

    /// Keeps the record as it arrived (without its ledger), the one written
    /// if no other is.
    /// Kept again as the request is known better (its slice, once
    /// decided), timed from its first arrival.
    pub fn arrived(&self, record: &ServedRecord) {
        let mut kept = record.clone();
        kept.ledger = Ledgered::default();
        let mut arrived = self.arrived.lock().expect("unpoisoned");
        let at = arrived.as_ref().map_or_else(Instant::now, |(_, at)| *at);
        *arrived = Some((kept, at));
    }

    /// Notes the record's number in the journal, once it is queued.
    pub fn journaled_as(&self, number: u64) {
        self.journaled.store(number, Ordering::Release);
    }

    /// The record's number in the journal, if it has been queued.
    pub fn journaled(&self) -> Option<u64> {
        Some(self.journaled.load(Ordering::Acquire)).filter(|number| *number > 0)
    }

    /// Closes the ledger: true the first time, false after.
    pub fn close(&self) -> bool {
        !self.finished.swap(true, Ordering::AcqRel)
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        let arrived = self.arrived.get_mut().ok().and_then(Option::take);
        if let Some((record, at)) = arrived {
            // Outside a panic, only the connection's end drops a request
            // before its record is finished.
            let ended_by = if std::thread::panicking() {
                SERVE_ERROR
            } else {
                CLIENT_DISCONNECTED
            };
            (self.unfinished)(record, ended_by, at.elapsed().as_secs_f64() * 1e3);
        }
    }
}

/// The ledger a record carries; records compare equal whatever their
/// ledgers.
#[derive(Debug, Clone, Default)]
pub struct Ledgered(Option<Arc<Ledger>>);

impl PartialEq for Ledgered {
    fn eq(&self, _: &Ledgered) -> bool {
        true
    }
}

impl Ledgered {
    pub fn of(ledger: Option<Arc<Ledger>>) -> Ledgered {
        Ledgered(ledger)
    }

    /// The request's ledger, if the record has one.
    pub fn ledger(&self) -> Option<Arc<Ledger>> {
        self.0.clone()
    }

    /// Whether the record may be written: the first finish of its request
    /// (or a record of no request's ledger); the ledger is let go either
    /// way.
    pub fn close(&mut self) -> bool {
        self.0.take().is_none_or(|ledger| ledger.close())
    }

    /// Keeps `record` (this one's) as the one written if no other is.
    pub fn known_as(&self, record: &ServedRecord) {
        if let Some(ledger) = &self.0 {
            ledger.arrived(record);
        }
    }

    /// Lets the ledger go without closing it: a copy of the request's
    /// record that is not the request's (an abandoned attempt's).
    pub fn release(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Written = Arc<Mutex<Vec<(ServedRecord, &'static str, f64)>>>;

    fn ledger() -> (Arc<Ledger>, Written) {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = written.clone();
        let ledger = Ledger::new(Box::new(move |record, ended_by, total_ms| {
            sink.lock().unwrap().push((record, ended_by, total_ms));
        }));
        let ledger = Arc::new(ledger);
        ledger.arrived(&ServedRecord::for_test("r-1", "billing"));
        (ledger, written)
    }

    #[test]
    fn a_record_finished_is_written_once_and_no_other() {
        let (ledger, written) = ledger();
        let mut first = Ledgered::of(Some(ledger.clone()));
        let mut second = first.clone();
        drop(ledger);
        assert!(first.close());
        assert!(!second.close(), "a second finish of the request");
        assert!(written.lock().unwrap().is_empty());
    }

    #[test]
    fn a_record_dropped_unfinished_is_written_as_a_client_that_left() {
        let (ledger, written) = ledger();
        let mut attempt = Ledgered::of(Some(ledger.clone()));
        let request = Ledgered::of(Some(ledger));
        // An attempt's copy lets go without closing; the request's copy is
        // dropped with the connection.
        attempt.release();
        assert!(written.lock().unwrap().is_empty());
        drop(request);
        let written = written.lock().unwrap();
        assert_eq!(written.len(), 1);
        let (record, ended_by, total_ms) = &written[0];
        assert_eq!(record.id, "r-1");
        assert_eq!(*ended_by, CLIENT_DISCONNECTED);
        assert!(*total_ms >= 0.0);
    }

    #[test]
    fn a_record_dropped_by_a_panic_is_written_as_serve_s_failure() {
        let (ledger, written) = ledger();
        let request = Ledgered::of(Some(ledger));
        let answering = std::thread::spawn(move || {
            let _request = request;
            panic!("serve failed while answering");
        });
        assert!(answering.join().is_err());
        let written = written.lock().unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].1, SERVE_ERROR);
    }
}
