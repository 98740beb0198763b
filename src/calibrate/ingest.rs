//! Turns validated rows into per-slice observations: what escalating each row
//! would change, with costs in exact integer picodollars.

use std::collections::HashMap;

use crate::schema::GradedBatch;

use super::options::{Holdout, Policy, Scope};

/// Costs are summed in integer picodollars (10⁻¹² USD) so that sums do not
/// depend on their order and equal costs compare equal.
pub const PICODOLLARS_PER_USD: f64 = 1.0e12;

pub fn to_picodollars(usd: f64) -> i64 {
    (usd * PICODOLLARS_PER_USD).round() as i64
}

pub fn to_usd(picodollars: i128) -> f64 {
    picodollars as f64 / PICODOLLARS_PER_USD
}

/// One row's outcomes, in USD, as read from the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradedRow {
    pub score: f64,
    pub small_ok: bool,
    pub large_ok: bool,
    pub cost_small: f64,
    pub cost_large: f64,
    pub cost_verifier: f64,
    pub cost_router: f64,
}

impl GradedRow {
    /// Row `index` of a validated batch.
    pub fn from_batch(batch: &GradedBatch, index: usize) -> GradedRow {
        GradedRow {
            score: batch.score.value(index),
            small_ok: batch.small_ok.value(index),
            large_ok: batch.large_ok.value(index),
            cost_small: batch.cost_small.value(index),
            cost_large: batch.cost_large.value(index),
            cost_verifier: batch.cost_verifier.value(index),
            cost_router: batch.cost_router.value(index),
        }
    }
}

/// What escalating one row changes, relative to escalating nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub score: f64,
    /// Extra picodollars the row costs when escalated.
    pub escalation_cost: i64,
    pub small_ok: bool,
    pub large_ok: bool,
}

/// Sums over a slice's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub rows: u64,
    pub small_ok: u64,
    pub large_ok: u64,
    /// Rows where at least one tier was acceptable: what an oracle router gets.
    pub either_ok: u64,
    pub cost_small: i128,
    pub cost_large: i128,
    /// The policy's cost when nothing is escalated.
    pub policy_base: i128,
    /// Cost of the oracle, which escalates exactly the rows the small tier
    /// fails and the large tier gets right, and pays for no router.
    pub oracle_cost: i128,
}

/// The rows of one slice (or of its held-out part) under one policy.
#[derive(Debug, Clone, Default)]
pub struct SliceObservations {
    pub rows: Vec<Observation>,
    pub totals: Totals,
}

impl SliceObservations {
    pub fn push(&mut self, policy: Policy, row: &GradedRow) {
        let cost_small = to_picodollars(row.cost_small);
        let cost_large = to_picodollars(row.cost_large);
        let (base, escalation_cost) = match policy {
            Policy::Predictive => (
                to_picodollars(row.cost_router) + cost_small,
                cost_large - cost_small,
            ),
            Policy::Cascade => (cost_small + to_picodollars(row.cost_verifier), cost_large),
        };
        let totals = &mut self.totals;
        totals.rows += 1;
        totals.small_ok += u64::from(row.small_ok);
        totals.large_ok += u64::from(row.large_ok);
        totals.either_ok += u64::from(row.small_ok || row.large_ok);
        totals.cost_small += i128::from(cost_small);
        totals.cost_large += i128::from(cost_large);
        totals.policy_base += i128::from(base);
        let oracle_escalates = !row.small_ok && row.large_ok;
        totals.oracle_cost += i128::from(if oracle_escalates {
            cost_large
        } else {
            cost_small
        });
        self.rows.push(Observation {
            // Adding zero folds -0.0 into 0.0, which `>=` treats as equal.
            score: row.score + 0.0,
            escalation_cost,
            small_ok: row.small_ok,
            large_ok: row.large_ok,
        });
    }

    /// Takes in another set of rows of the same slice.
    pub fn absorb(&mut self, other: SliceObservations) {
        if self.rows.is_empty() {
            self.rows = other.rows;
        } else {
            self.rows.extend(other.rows);
        }
        let (totals, more) = (&mut self.totals, other.totals);
        totals.rows += more.rows;
        totals.small_ok += more.small_ok;
        totals.large_ok += more.large_ok;
        totals.either_ok += more.either_ok;
        totals.cost_small += more.cost_small;
        totals.cost_large += more.cost_large;
        totals.policy_base += more.policy_base;
        totals.oracle_cost += more.oracle_cost;
    }

    /// Escalated rows, successes and total cost at threshold `threshold`, by
    /// a direct scan: for rows that were not swept, such as held-out ones.
    pub fn evaluate_at(&self, threshold: f64) -> (u64, u64, i128) {
        let mut escalated = 0u64;
        let mut successes = self.totals.small_ok;
        let mut cost = self.totals.policy_base;
        for row in self.rows.iter().filter(|row| row.score >= threshold) {
            escalated += 1;
            successes = successes + u64::from(row.large_ok) - u64::from(row.small_ok);
            cost += i128::from(row.escalation_cost);
        }
        (escalated, successes, cost)
    }
}

/// A slice's calibration rows and held-out rows.
#[derive(Debug, Default)]
pub struct SliceData {
    pub name: String,
    pub calibration: SliceObservations,
    pub holdout: SliceObservations,
}

/// The slice name used when one threshold is fitted over every row.
pub const GLOBAL_SLICE: &str = "*";

/// Collects batches into per-slice observations.
#[derive(Debug)]
pub struct Ingest {
    policy: Policy,
    scope: Scope,
    holdout: Option<Holdout>,
    slices: Vec<SliceData>,
    index: HashMap<String, usize, foldhash::fast::RandomState>,
}

impl Ingest {
    pub fn new(policy: Policy, scope: Scope, holdout: Option<Holdout>) -> Ingest {
        Ingest {
            policy,
            scope,
            holdout,
            slices: Vec::new(),
            index: HashMap::default(),
        }
    }

    pub fn add(&mut self, batch: &GradedBatch) {
        // Files are usually grouped by slice, so the previous row's slice is
        // the first guess.
        let mut last: Option<(usize, usize)> = None;
        for index in 0..batch.num_rows() {
            let name = match self.scope {
                Scope::PerSlice => batch.slice.value(index),
                Scope::Global => GLOBAL_SLICE,
            };
            let slice = match (self.scope, last) {
                (Scope::Global, Some((_, slice))) => slice,
                (Scope::PerSlice, Some((previous, slice)))
                    if batch.slice.value(previous) == name =>
                {
                    slice
                }
                _ => self.slice_index(name),
            };
            last = Some((index, slice));
            let row = GradedRow::from_batch(batch, index);
            let held_out = self
                .holdout
                .is_some_and(|holdout| holdout.holds_out(batch.id.value(index)));
            let data = &mut self.slices[slice];
            let target = if held_out {
                &mut data.holdout
            } else {
                &mut data.calibration
            };
            target.push(self.policy, &row);
        }
    }

    fn slice_index(&mut self, name: &str) -> usize {
        if let Some(&index) = self.index.get(name) {
            return index;
        }
        let index = self.slices.len();
        self.index.insert(name.to_owned(), index);
        self.slices.push(SliceData {
            name: name.to_owned(),
            ..SliceData::default()
        });
        index
    }

    /// Adds what another ingest of other rows of the same file collected.
    pub fn merge(&mut self, other: Ingest) {
        for data in other.slices {
            let index = self.slice_index(&data.name);
            let mine = &mut self.slices[index];
            mine.calibration.absorb(data.calibration);
            mine.holdout.absorb(data.holdout);
        }
    }

    /// The slices, sorted by name.
    pub fn finish(mut self) -> Vec<SliceData> {
        self.slices.sort_by(|a, b| a.name.cmp(&b.name));
        self.slices
    }
}
