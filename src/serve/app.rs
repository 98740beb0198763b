//! What every request of one serve shares ([`App`]): the deployed config,
//! the keys, the journal, the metrics, admission and resilience; and how a
//! request's record ends (counted, logged, journaled).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::Request;

use crate::clock::Clock;
use crate::records::{Reason, Refusal};

use super::admission::Admission;
use super::deployed::Deployed;
use super::journal::Journal;
use super::keys::Keys;
use super::log::{Level, Log};
use super::metrics::Metrics;
use super::resilience::Resilience;
use super::served::ServedRecord;

/// What every request shares.
pub struct App {
    pub deployed: RwLock<Arc<Deployed>>,
    /// The `--shadow` candidate, decided for every request and never served.
    pub shadow: Option<Arc<Deployed>>,
    /// The clients' keys, replaced whole when the file reloads.
    pub keys: RwLock<Arc<Keys>>,
    pub trust_slice_header: bool,
    pub strict_expiry: bool,
    pub clock: Arc<dyn Clock + Send + Sync>,
    pub http: reqwest::Client,
    pub journal: Journal,
    /// `--max-body-bytes`.
    pub max_body_bytes: usize,
    /// `--records-fail closed`: no request is answered while the records
    /// cannot be written.
    pub records_fail_closed: bool,
    /// How many refusals for want of a valid key are journaled.
    pub unauthorized: RecordRate,
    pub metrics: Metrics,
    pub admission: Admission,
    pub timeouts: Timeouts,
    pub resilience: Resilience,
    pub requests: AtomicU64,
    /// The random numbers of exploration draws.
    pub draws: super::draws::Draws,
    /// Distinguishes this process's request ids from another's.
    pub started_ms: i64,
    /// What a record keeps of the conversation.
    pub records_prompts: super::RecordsPrompts,
    pub log: Arc<Log>,
    /// `--otlp-endpoint`: where traces go, if anywhere.
    pub tracing: Option<super::trace::Tracing>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

impl App {
    pub fn current(&self) -> Arc<Deployed> {
        self.deployed.read().expect("unpoisoned").clone()
    }

    pub fn keys(&self) -> Arc<Keys> {
        self.keys.read().expect("unpoisoned").clone()
    }

    /// A request's end: counted in `/metrics`, logged (with
    /// `--log-requests`, or when its answer broke) and journaled; its number
    /// in the journal's order.
    pub(super) fn finish(&self, mut record: ServedRecord) -> Option<u64> {
        if !self.closes_ledger(&mut record) {
            return None;
        }
        self.observe(&record);
        self.journal(record)
    }

    /// Whether `record` is its request's first: a second is a fault of
    /// serve's, logged and not written.
    fn closes_ledger(&self, record: &mut ServedRecord) -> bool {
        if record.ledger.close() {
            return true;
        }
        self.log
            .event(
                Level::Error,
                "record_finished_twice",
                format!(
                    "request {:?} was finished a second time; its first record stands",
                    record.id
                ),
            )
            .field("request_id", record.id.clone())
            .emit();
        false
    }

    /// A request whose record was dropped unfinished (its client left
    /// before serve called a route, or serve failed while answering):
    /// written all the same, so no request goes unrecorded.
    pub(super) fn finish_unfinished(&self, record: ServedRecord) {
        if record.finish_reason.as_deref() == Some(super::served::SERVE_ERROR) {
            self.log
                .event(
                    Level::Error,
                    "record_unfinished",
                    format!(
                        "serve failed while answering request {:?}: its record is written as {}",
                        record.id,
                        super::served::SERVE_ERROR
                    ),
                )
                .field("request_id", record.id.clone())
                .emit();
        }
        self.observe(&record);
        self.journal(record);
    }

    /// An attempt beside a request (a route abandoned for the fallback, a
    /// hedge's cancelled call): counted by route, reason and status, and
    /// journaled.
    pub(super) fn finish_attempt(&self, mut record: ServedRecord) {
        record.ledger.release();
        self.metrics.attempt(&record);
        self.journal(record);
    }

    /// A request refused before any answer: counted and logged as every
    /// request is, and journaled, those refused for want of a valid key at
    /// most `UNAUTHORIZED_RECORDS_PER_SECOND` a second.
    pub(super) fn finish_refused(&self, mut record: ServedRecord) {
        if !self.closes_ledger(&mut record) {
            return;
        }
        self.observe(&record);
        let unauthorized = record.reason == Some(Reason::Refused(Refusal::Unauthorized));
        if !unauthorized || self.unauthorized.take(record.timestamp_ms) {
            self.journal(record);
        }
    }

    fn journal(&self, mut record: ServedRecord) -> Option<u64> {
        self.records_prompts.apply(&mut record);
        self.journal.write(record)
    }

    fn observe(&self, record: &ServedRecord) {
        record
            .trace
            .finish(&record.record, record.tenant.as_deref());
        self.metrics.request(record, record.tenant.as_deref());
        let broken = matches!(
            record.finish_reason.as_deref(),
            Some("upstream_cut" | "upstream_malformed" | "stall" | "total_deadline")
        );
        if broken {
            self.log
                .event(
                    Level::Warn,
                    "answer_broken",
                    format!(
                        "route {:?} gave its first byte, then its answer ended in {}; the client got an error, never another model's text",
                        record.route,
                        record.finish_reason.as_deref().unwrap_or_default()
                    ),
                )
                .field("request_id", record.id.clone())
                .field("route", record.route.clone())
                .field("finish_reason", record.finish_reason.clone())
                .field("ttft_ms", record.ttft_ms)
                .field("total_ms", record.total_ms)
                .emit();
        }
        if self.log.logs_requests() {
            self.log
                .event(
                    Level::Info,
                    "request",
                    format!(
                        "{} by {} ({})",
                        record.status.name(),
                        record.route,
                        record
                            .reason
                            .as_ref()
                            .map(Reason::to_string)
                            .unwrap_or_default()
                    ),
                )
                .field("request_id", record.id.clone())
                .field("slice", record.slice.clone())
                .field("tenant", record.tenant.clone())
                .field("route", record.route.clone())
                .field("model", record.model.clone())
                .field("reason", record.reason.as_ref().map(Reason::to_string))
                .field("status", record.status.name())
                .field("score", record.score)
                .field("ttft_ms", record.ttft_ms)
                .field("total_ms", record.total_ms)
                .field("input_tokens", record.input_tokens)
                .field("cached_input_tokens", record.cached_input_tokens)
                .field("output_tokens", record.output_tokens)
                .field("cost_usd", record.cost_usd)
                .field("finish_reason", record.finish_reason.clone())
                .field("config_version", record.config_version)
                .emit();
        }
    }

    pub(super) fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// At most so many records a second; the rest counted as dropped.
#[derive(Debug)]
pub struct RecordRate {
    per_second: u32,
    /// The second being counted, and how many it has journaled.
    window: std::sync::Mutex<(i64, u32)>,
    pub dropped: AtomicU64,
}

impl RecordRate {
    pub fn new(per_second: u32) -> RecordRate {
        RecordRate {
            per_second,
            window: std::sync::Mutex::new((i64::MIN, 0)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether a record made at `now_ms` may be journaled.
    fn take(&self, now_ms: i64) -> bool {
        let mut window = self.window.lock().expect("unpoisoned");
        let second = now_ms.div_euclid(1000);
        if window.0 != second {
            *window = (second, 0);
        }
        if window.1 < self.per_second {
            window.1 += 1;
            true
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// A request's id: the one its client sent in `x-request-id` where it is
/// a plain token, else serve's own, unique in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The id the request-id layer gave a request.
pub(super) fn id_of(request: &Request) -> String {
    request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.0.clone())
        .expect("every request passes the request-id layer")
}

/// The three timers of a call: to its first byte, between bytes, and to
/// its end (from the request's arrival), from `--first-token-timeout-ms`,
/// `--stall-timeout-ms` and `--total-timeout-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub first_token: Duration,
    pub stall: Duration,
    pub total: Duration,
}
