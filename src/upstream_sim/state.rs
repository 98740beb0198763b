//! What serve-sim is set up with, and what its handlers share: the
//! settings, what it has received (`/sim/stats`) and the refusals a retry
//! is checked against.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde::Serialize;

use super::answer::{Knowledge, SimModel};
use super::faults::{Fault, FaultProfile};

#[derive(Debug, Clone)]
pub struct SimSettings {
    pub models: Vec<SimModel>,
    pub seed: u64,
    pub steepness: f64,
    /// Median time to first token.
    pub ttft_ms: u64,
    /// Median generation speed after the first token; 0 streams at once.
    pub tokens_per_second: f64,
    /// Spread of both around their medians: each request draws a log-normal
    /// factor with this σ (0: every request the same).
    pub latency_sigma: f64,
    pub faults: FaultProfile,
    /// The API key clients must send; none accepts any.
    pub require_key: Option<String>,
    /// How many `GET /v1/models` are refused with 429 and `Retry-After`
    /// (the fault profile's) before one is answered.
    pub models_rate_limited: u64,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            models: SimModel::defaults(),
            seed: 0,
            steepness: 0.05,
            ttft_ms: 0,
            tokens_per_second: 0.0,
            latency_sigma: 0.0,
            faults: FaultProfile::default(),
            require_key: None,
            models_rate_limited: 0,
        }
    }
}

/// What the server received and did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub requests: u64,
    pub by_status: BTreeMap<u16, u64>,
    pub faults: BTreeMap<Fault, u64>,
    /// Completed answers per `model|prompt id|seed`.
    pub completed: BTreeMap<String, u64>,
    /// Requests that repeated a request refused with 429 before its
    /// `Retry-After` had passed.
    pub early_retries: u64,
    /// Requests that repeated a request refused with a status no retry fixes.
    pub retried_non_retryable: u64,
}

pub(super) struct Shared {
    pub(super) settings: SimSettings,
    pub(super) knowledge: Knowledge,
    pub(super) requests: AtomicU64,
    /// While set, no response sends its next piece.
    pub(super) paused: std::sync::atomic::AtomicBool,
    pub(super) stats: Mutex<Stats>,
    /// Per request body: when a retry may come (after a 429), or never
    /// (after a 400).
    pub(super) refusals: Mutex<HashMap<u64, Option<Instant>>>,
    /// `GET /v1/models` refused so far.
    pub(super) models_refusals: AtomicU64,
    /// Tells this server's response ids from another's: ids stay unique
    /// across servers and restarts, as a provider's are.
    pub(super) instance: String,
}

impl Shared {
    pub(super) fn record(&self, status: StatusCode, fault: Option<Fault>) {
        let mut stats = self.stats.lock().expect("unpoisoned");
        stats.requests += 1;
        *stats.by_status.entry(status.as_u16()).or_default() += 1;
        if let Some(fault) = fault {
            *stats.faults.entry(fault).or_default() += 1;
        }
    }

    /// Counts a repeat that came too early or should not have come at all.
    pub(super) fn check_repeat(&self, body: u64) {
        let refusal = self
            .refusals
            .lock()
            .expect("unpoisoned")
            .get(&body)
            .copied();
        match refusal {
            Some(None) => self.stats.lock().expect("unpoisoned").retried_non_retryable += 1,
            Some(Some(not_before)) if Instant::now() < not_before => {
                self.stats.lock().expect("unpoisoned").early_retries += 1;
            }
            _ => {}
        }
    }

    pub(super) fn refused(&self, body: u64, retry_after: Option<Duration>) {
        self.refusals
            .lock()
            .expect("unpoisoned")
            .insert(body, retry_after.map(|wait| Instant::now() + wait));
    }

    pub(super) fn completed(&self, key: String) {
        *self
            .stats
            .lock()
            .expect("unpoisoned")
            .completed
            .entry(key)
            .or_default() += 1;
    }
}
