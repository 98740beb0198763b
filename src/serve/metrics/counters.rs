//! What `/metrics` counts between scrapes, and what it reads from the rest
//! of serve at a scrape.

use std::collections::BTreeMap;

use super::super::resilience::BreakerReport;
use crate::records::{Reason, Status};

/// Upper bounds of the first-token histogram, in seconds.
pub(super) const FIRST_TOKEN_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds of the whole-request histogram, in seconds: an answer may
/// take up to `--total-timeout-ms` (10 minutes by default).
pub(super) const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The most (slice, tenant) pairs labelled one by one; requests of any
/// other pair are counted under `slice="_other",tenant="_other"`, so a
/// client that claims a new slice per request (with `--trust-slice-header`)
/// cannot grow `/metrics` without bound.
pub const MAX_SLICE_LABELS: usize = 256;
pub(super) const OTHER: &str = "_other";

#[derive(Debug, Default)]
pub(super) struct Histogram {
    pub(super) counts: Vec<u64>,
    pub(super) count: u64,
    pub(super) sum: f64,
}

impl Histogram {
    pub(super) fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (count, bound) in self.counts.iter_mut().zip(bounds) {
            if value <= *bound {
                *count = count.saturating_add(1);
            }
        }
        self.count = self.count.saturating_add(1);
        self.sum += value;
    }
}

/// Tokens and dollars of the requests a route answered.
#[derive(Debug, Default)]
pub(super) struct Usage {
    pub(super) input: u64,
    pub(super) cached_input: u64,
    pub(super) output: u64,
    pub(super) cost_usd: f64,
}

/// A usage counter: its name, its help, and its value of a route's usage.
pub(super) type UsageFamily = (&'static str, &'static str, fn(&Usage) -> f64);

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests: BTreeMap<(String, Option<Reason>, Status), u64>,
    pub(super) first_token: BTreeMap<String, Histogram>,
    pub(super) duration: BTreeMap<String, Histogram>,
    pub(super) usage: BTreeMap<String, Usage>,
    /// By slice, then tenant.
    pub(super) slices: BTreeMap<String, BTreeMap<String, SliceCounts>>,
    /// The (slice, tenant) pairs labelled one by one.
    pub(super) slice_pairs: usize,
    pub(super) upstream: BTreeMap<(String, &'static str), u64>,
    pub(super) broken: BTreeMap<(String, &'static str), u64>,
    /// Requests an exploration draw sent, by the route it drew.
    pub(super) explored: BTreeMap<String, u64>,
    pub(super) reloads: BTreeMap<&'static str, u64>,
    pub(super) keys_reloads: BTreeMap<&'static str, u64>,
    pub(super) provider_keys_reloads: BTreeMap<&'static str, u64>,
}

/// A slice and tenant's requests by status, and their cost.
#[derive(Debug, Default)]
pub(super) struct SliceCounts {
    pub(super) statuses: BTreeMap<&'static str, u64>,
    pub(super) cost_usd: f64,
}

/// The records writer's state, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsGauges {
    pub writable: bool,
    pub pending: u64,
    pub write_errors: u64,
    pub dropped: u64,
    pub unrecorded_refusals: u64,
}

/// The retry budget, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetGauges {
    /// Extra calls the window allows now, and those it has given.
    pub allowed: u64,
    pub used: u64,
    /// Extra calls taken and refused since start: `[fallback, hedge]`.
    pub taken: [u64; 2],
    pub refused: [u64; 2],
}

/// What `/metrics` reads from the rest of serve at the scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauges<'a> {
    pub config_version: u64,
    pub config_id: &'a str,
    pub expired: bool,
    /// The last reload was refused, and none applied since.
    pub reload_refused: bool,
    /// When the served config expires, seconds since 1970.
    pub expires_at_s: Option<i64>,
    pub in_flight: usize,
    pub breakers: &'a [BreakerReport],
    pub records: RecordsGauges,
    pub budget: BudgetGauges,
    pub log_lines_dropped: u64,
    pub open_connections: usize,
    /// When serve started, seconds since 1970.
    pub started_s: f64,
}
