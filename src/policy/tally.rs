//! Counts of a policy over rows, kept as integers (picodollars for cost)
//! until they are rendered as the rates of [`Metrics`].

use super::money::to_usd;
use super::tiers::Served;
use crate::schema::Metrics;
use crate::stats::{clopper_pearson_lower, percentile};

/// The integer counts of a [`Tally`], without its latencies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub n: u64,
    pub successes: u64,
    /// Picodollars.
    pub cost: i128,
    pub escalated: u64,
    pub false_accepts: u64,
}

/// Rows served under one policy: integer counts and the first-token times.
#[derive(Debug, Default)]
pub struct Tally {
    pub n: u64,
    pub successes: u64,
    /// Picodollars.
    pub cost: i128,
    pub escalated: u64,
    pub false_accepts: u64,
    /// Time to first token of each row that has it, in milliseconds.
    pub latencies: Vec<f64>,
    /// Rows each tier served, for policies over more than two tiers.
    pub served: Vec<u64>,
}

impl Tally {
    pub fn counts(&self) -> Counts {
        Counts {
            n: self.n,
            successes: self.successes,
            cost: self.cost,
            escalated: self.escalated,
            false_accepts: self.false_accepts,
        }
    }

    /// Counts one served row.
    pub fn add(&mut self, served: Served, escalated: bool, first_token_ms: Option<f64>) {
        self.n += 1;
        self.successes += u64::from(served.ok);
        self.cost += i128::from(served.cost);
        self.escalated += u64::from(escalated);
        self.false_accepts += u64::from(served.false_accept);
        if let Some(ms) = first_token_ms {
            self.latencies.push(ms);
        }
    }

    /// Counts one row served at `tier` of a policy over several tiers;
    /// leaving the first tier counts as escalating.
    pub fn add_at(&mut self, served: Served, tier: usize, first_token_ms: Option<f64>) {
        if self.served.len() <= tier {
            self.served.resize(tier + 1, 0);
        }
        self.served[tier] += 1;
        self.add(served, tier > 0, first_token_ms);
    }

    pub fn absorb(&mut self, other: &Tally) {
        if self.served.len() < other.served.len() {
            self.served.resize(other.served.len(), 0);
        }
        for (mine, theirs) in self.served.iter_mut().zip(&other.served) {
            *mine += theirs;
        }
        self.n += other.n;
        self.successes += other.successes;
        self.cost += other.cost;
        self.escalated += other.escalated;
        self.false_accepts += other.false_accepts;
        self.latencies.extend_from_slice(&other.latencies);
    }

    pub fn metrics(mut self, slice: String, cascade: bool, confidence: Option<f64>) -> Metrics {
        let n = self.n.max(1) as f64;
        self.latencies.sort_by(f64::total_cmp);
        Metrics {
            quality: self.successes as f64 / n,
            quality_lower_bound: confidence
                .filter(|_| self.n > 0)
                .map(|confidence| clopper_pearson_lower(self.successes, self.n, 1.0 - confidence)),
            mean_cost: to_usd(self.cost) / n,
            p50_ms: percentile(&self.latencies, 0.50),
            p95_ms: percentile(&self.latencies, 0.95),
            escalation_rate: self.escalated as f64 / n,
            false_accept_rate: cascade.then(|| self.false_accepts as f64 / n),
            served: (!self.served.is_empty())
                .then(|| self.served.iter().map(|&count| count as f64 / n).collect()),
            slice,
            n: self.n,
        }
    }
}
