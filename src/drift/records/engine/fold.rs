//! The fold: what drift needs from any number of records or aggregates,
//! per slice and per route, overall and per window; workers' folds merge.

use std::collections::{BTreeMap, HashMap};

use super::ttft_of_bin;
use crate::records::Reason;
use crate::stats::nearest_rank;

/// Counts of one slice, overall or in one window.
#[derive(Debug, Clone, Default)]
pub(super) struct SliceCounts {
    pub(super) requests: u64,
    pub(super) decided: u64,
    pub(super) escalated: u64,
}

/// Counts of one route, overall or in one window.
#[derive(Debug, Clone, Default)]
pub(super) struct RouteCounts {
    pub(super) requests: u64,
    /// Requests whose failure is known (every record; an aggregate row
    /// only with its `failures`), and those of them the route failed.
    pub(super) failure_known: u64,
    pub(super) failures: u64,
    pub(super) fallbacks: BTreeMap<String, u64>,
    pub(super) other_version: u64,
    pub(super) versioned: u64,
    pub(super) cost_usd: f64,
    pub(super) costed: u64,
    pub(super) ttft: BTreeMap<i64, u64>,
}

impl RouteCounts {
    /// The share of the requests whose failure is known that failed.
    pub(super) fn failure_share(&self) -> Option<f64> {
        (self.failure_known > 0).then(|| self.failures as f64 / self.failure_known as f64)
    }

    pub(super) fn ttft_quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.ttft.values().sum();
        if total == 0 {
            return None;
        }
        let rank = nearest_rank(total, q);
        let mut seen = 0;
        for (bin, count) in &self.ttft {
            seen += count;
            if seen >= rank {
                return Some(ttft_of_bin(*bin));
            }
        }
        None
    }

    /// How many first tokens came later than `ms`, of how many timed.
    pub(super) fn ttft_over(&self, ms: f64) -> (u64, u64) {
        let timed = self.ttft.values().sum();
        let over = self
            .ttft
            .iter()
            .filter(|&(&bin, _)| ttft_of_bin(bin) > ms)
            .map(|(_, count)| count)
            .sum();
        (over, timed)
    }

    pub(super) fn fallback_total(&self) -> u64 {
        self.fallbacks.values().sum()
    }
}

/// One row of the fold's input: a record, or a pre-aggregated group.
#[derive(Debug, Clone)]
pub(super) struct Group<'a> {
    pub(super) window: i64,
    pub(super) slice: &'a str,
    pub(super) route: &'a str,
    pub(super) reason: Option<&'a str>,
    pub(super) model: Option<&'a str>,
    pub(super) score_bin: Option<i64>,
    /// Escalated, when known exactly (a record's score against the threshold).
    pub(super) escalated: Option<bool>,
    pub(super) ttft_bin: Option<i64>,
    pub(super) requests: u64,
    /// Of `requests`, those the route failed, where the table says.
    pub(super) failures: Option<u64>,
    pub(super) cost_usd: Option<f64>,
}

/// A slice's counts overall and per window, and its score histogram.
#[derive(Debug, Default)]
pub(super) struct SliceFold {
    pub(super) counts: SliceCounts,
    pub(super) windows: BTreeMap<i64, SliceCounts>,
    pub(super) scores: BTreeMap<i64, u64>,
}

/// A route's counts overall and per window.
#[derive(Debug, Default)]
pub(super) struct RouteFold {
    pub(super) counts: RouteCounts,
    pub(super) windows: BTreeMap<i64, RouteCounts>,
}

/// The fold: what drift needs from any number of records.
#[derive(Debug, Default)]
pub(super) struct Fold {
    pub(super) slices: BTreeMap<String, SliceFold>,
    pub(super) routes: BTreeMap<String, RouteFold>,
    /// Requests of another logical model, by its name.
    pub(super) left_out: BTreeMap<String, u64>,
    /// Requests of the logical model served by another config version, by
    /// that version: not judged against this config.
    pub(super) other_versions: BTreeMap<u64, u64>,
    pub(super) first_ms: Option<i64>,
    pub(super) last_ms: Option<i64>,
}

impl SliceCounts {
    pub(super) fn absorb(&mut self, other: &SliceCounts) {
        self.requests += other.requests;
        self.decided += other.decided;
        self.escalated += other.escalated;
    }
}

impl RouteCounts {
    pub(super) fn absorb(&mut self, other: RouteCounts) {
        self.requests += other.requests;
        self.failure_known += other.failure_known;
        self.failures += other.failures;
        for (reason, count) in other.fallbacks {
            *self.fallbacks.entry(reason).or_default() += count;
        }
        self.other_version += other.other_version;
        self.versioned += other.versioned;
        self.cost_usd += other.cost_usd;
        self.costed += other.costed;
        for (bin, count) in other.ttft {
            *self.ttft.entry(bin).or_default() += count;
        }
    }
}

impl Fold {
    /// Adds what another worker folded.
    pub(super) fn merge(&mut self, other: Fold) {
        for (name, part) in other.slices {
            let slice = self.slices.entry(name).or_default();
            slice.counts.absorb(&part.counts);
            for (start, window) in part.windows {
                slice.windows.entry(start).or_default().absorb(&window);
            }
            for (bin, count) in part.scores {
                *slice.scores.entry(bin).or_default() += count;
            }
        }
        for (name, part) in other.routes {
            let route = self.routes.entry(name).or_default();
            route.counts.absorb(part.counts);
            for (start, window) in part.windows {
                route.windows.entry(start).or_default().absorb(window);
            }
        }
        for (name, count) in other.left_out {
            *self.left_out.entry(name).or_default() += count;
        }
        for (version, count) in other.other_versions {
            *self.other_versions.entry(version).or_default() += count;
        }
        self.first_ms = match (self.first_ms, other.first_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ms = match (self.last_ms, other.last_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub(super) fn add(&mut self, group: &Group<'_>, pins: &HashMap<String, String>) {
        let entry = match self.slices.get_mut(group.slice) {
            Some(entry) => entry,
            None => self.slices.entry(group.slice.to_owned()).or_default(),
        };
        let (slice, scores) = (&mut entry.counts, &mut entry.scores);
        let window = entry.windows.entry(group.window).or_default();
        let escalated = group
            .reason
            .and_then(|reason| Reason::from(reason).escalation())
            .or(group.escalated);
        for counts in [&mut *slice, window] {
            counts.requests += group.requests;
            if let Some(escalated) = escalated {
                counts.decided += group.requests;
                counts.escalated += if escalated { group.requests } else { 0 };
            }
        }
        if let Some(bin) = group.score_bin {
            *scores.entry(bin).or_default() += group.requests;
        }
        let entry = match self.routes.get_mut(group.route) {
            Some(entry) => entry,
            None => self.routes.entry(group.route.to_owned()).or_default(),
        };
        let route = &mut entry.counts;
        let window = entry.windows.entry(group.window).or_default();
        for counts in [&mut *route, window] {
            counts.requests += group.requests;
            if let Some(failures) = group.failures {
                counts.failure_known += group.requests;
                counts.failures += failures;
            }
            if let Some(reason) = group
                .reason
                .filter(|reason| Reason::from(*reason).is_fallback())
            {
                *counts.fallbacks.entry(reason.to_owned()).or_default() += group.requests;
            }
            if let (Some(model), Some(pinned)) = (group.model, pins.get(group.route)) {
                counts.versioned += group.requests;
                if model != pinned {
                    counts.other_version += group.requests;
                }
            }
            if let Some(cost) = group.cost_usd {
                counts.cost_usd += cost;
                counts.costed += group.requests;
            }
            if let Some(bin) = group.ttft_bin {
                *counts.ttft.entry(bin).or_default() += group.requests;
            }
        }
    }
}
