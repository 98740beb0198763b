//! The direct model of the doubly-robust estimate: from the graded results
//! a candidate was calibrated on, the share of acceptable answers of each
//! of its tiers by slice and score decile, and each tier's mean cost by
//! slice. It only has to be fixed before the records are read (it is,
//! fitted on other rows), not right: DR stays unbiased when it is wrong,
//! and is tighter the closer it is.

use std::collections::BTreeMap;

use crate::policy::{TieredRows, to_usd};
use crate::schema::GradedTable;

/// Score bins per slice.
const BINS: usize = 10;

/// A graded row as the model reads it: its score, and each tier's
/// acceptable answer and cost, cheapest first.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    score: f64,
    ok: Vec<bool>,
    cost: Vec<f64>,
}

#[derive(Debug, Clone, Default)]
struct SliceModel {
    /// The upper score of each bin but the last.
    edges: Vec<f64>,
    /// Per bin: each tier's acceptable answers, and the rows.
    bins: Vec<(Vec<u64>, u64)>,
    cost: Vec<f64>,
}

/// Acceptable-answer rates and costs of each tier, cheapest first.
#[derive(Debug, Clone, Default)]
pub struct DirectModel {
    slices: BTreeMap<String, SliceModel>,
    all: SliceModel,
}

impl DirectModel {
    /// From two-tier results: the small tier (0) and the large (1).
    pub fn two_tier(graded: &GradedTable) -> DirectModel {
        let mut rows = Vec::new();
        for batch in &graded.batches {
            for index in 0..batch.num_rows() {
                rows.push((
                    batch.slice.value(index).to_owned(),
                    Row {
                        score: batch.score.value(index),
                        ok: vec![batch.small_ok.value(index), batch.large_ok.value(index)],
                        cost: vec![batch.cost_small.value(index), batch.cost_large.value(index)],
                    },
                ));
            }
        }
        DirectModel::fit(rows, 2)
    }

    /// From the rows of a table over more than two tiers, in the order of
    /// its tiers.
    pub fn tiered(graded: &GradedTable, tiered: &TieredRows) -> DirectModel {
        let tiers = tiered.outcomes.tiers();
        let mut rows = Vec::new();
        let mut row = 0;
        for batch in &graded.batches {
            for index in 0..batch.num_rows() {
                let (_, ok, cost, _, _) = tiered.outcomes.row(row);
                rows.push((
                    batch.slice.value(index).to_owned(),
                    Row {
                        score: batch.score.value(index),
                        ok: ok.to_vec(),
                        cost: cost.iter().map(|&pico| to_usd(i128::from(pico))).collect(),
                    },
                ));
                row += 1;
            }
        }
        DirectModel::fit(rows, tiers)
    }

    fn fit(rows: Vec<(String, Row)>, tiers: usize) -> DirectModel {
        let mut by_slice: BTreeMap<String, Vec<Row>> = BTreeMap::new();
        for (slice, row) in rows {
            by_slice.entry(slice).or_default().push(row);
        }
        let all: Vec<Row> = by_slice.values().flatten().cloned().collect();
        DirectModel {
            all: slice_model(all, tiers),
            slices: by_slice
                .into_iter()
                .map(|(slice, rows)| (slice, slice_model(rows, tiers)))
                .collect(),
        }
    }

    /// The expected quality of `tier` (cheapest first) for a request of
    /// `slice` with `score` (none: the slice's rate).
    pub fn quality(&self, slice: &str, tier: usize, score: Option<f64>) -> f64 {
        let model = self.slices.get(slice).unwrap_or(&self.all);
        let bins: Vec<&(Vec<u64>, u64)> = match score {
            Some(score) => vec![&model.bins[model.edges.partition_point(|edge| *edge < score)]],
            None => model.bins.iter().collect(),
        };
        let ok: u64 = bins
            .iter()
            .map(|(ok, _)| ok.get(tier).copied().unwrap_or(0))
            .sum();
        let rows: u64 = bins.iter().map(|(_, rows)| rows).sum();
        // Laplace's rule keeps an empty or one-sided bin inside (0, 1).
        (ok as f64 + 1.0) / (rows as f64 + 2.0)
    }

    pub fn cost(&self, slice: &str, tier: usize) -> f64 {
        let model = self.slices.get(slice).unwrap_or(&self.all);
        model.cost.get(tier).copied().unwrap_or(0.0)
    }
}

fn slice_model(mut rows: Vec<Row>, tiers: usize) -> SliceModel {
    rows.sort_by(|a, b| a.score.total_cmp(&b.score));
    let bins = BINS.min(rows.len()).max(1);
    let mut model = SliceModel {
        edges: Vec::new(),
        bins: vec![(vec![0; tiers], 0); bins],
        cost: vec![0.0; tiers],
    };
    for bin in 1..bins {
        model.edges.push(rows[bin * rows.len() / bins - 1].score);
    }
    for row in &rows {
        let bin = model.edges.partition_point(|edge| *edge < row.score);
        let (ok, count) = &mut model.bins[bin];
        for (tier, acceptable) in row.ok.iter().enumerate() {
            ok[tier] += u64::from(*acceptable);
        }
        *count += 1;
        for (tier, cost) in row.cost.iter().enumerate() {
            model.cost[tier] += cost;
        }
    }
    let count = rows.len().max(1) as f64;
    model.cost.iter_mut().for_each(|total| *total /= count);
    model
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_holds_the_rates_of_its_scores() {
        // Small answers well below 0.5, large everywhere.
        let rows: Vec<(String, Row)> = (0..100)
            .map(|i| {
                let score = f64::from(i) / 100.0;
                (
                    "s".to_owned(),
                    Row {
                        score,
                        ok: vec![score < 0.5, true],
                        cost: vec![1.0, 3.0],
                    },
                )
            })
            .collect();
        let model = DirectModel::fit(rows, 2);
        assert_eq!(model.quality("s", 0, Some(0.05)), 11.0 / 12.0);
        assert_eq!(model.quality("s", 0, Some(0.95)), 1.0 / 12.0);
        assert_eq!(model.quality("s", 1, Some(0.95)), 11.0 / 12.0);
        assert_eq!(model.quality("s", 0, None), 51.0 / 102.0);
        assert_eq!(model.quality("other", 0, None), 51.0 / 102.0);
        assert_eq!((model.cost("s", 0), model.cost("s", 1)), (1.0, 3.0));
    }
}
