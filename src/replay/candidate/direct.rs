//! The direct model of the doubly-robust estimate: from the graded results
//! a candidate was calibrated on, the share of acceptable answers of each
//! tier by slice and score decile, and each tier's mean cost by slice. It
//! only has to be fixed before the records are read (it is, fitted on other
//! rows), not right: DR stays unbiased when it is wrong, and is tighter the
//! closer it is.

use std::collections::BTreeMap;

use crate::schema::GradedTable;

/// Score bins per slice.
const BINS: usize = 10;

/// A graded row as the model reads it: score, small and large acceptable,
/// small and large cost.
type Row = (f64, bool, bool, f64, f64);

#[derive(Debug, Clone, Default)]
struct SliceModel {
    /// The upper score of each bin but the last.
    edges: Vec<f64>,
    /// Per bin: (small acceptable, large acceptable, rows).
    bins: Vec<(u64, u64, u64)>,
    cost: [f64; 2],
}

/// Acceptable-answer rates and costs of the small (0) and large (1) tier.
#[derive(Debug, Clone, Default)]
pub struct DirectModel {
    slices: BTreeMap<String, SliceModel>,
    all: SliceModel,
}

impl DirectModel {
    pub fn fit(graded: &GradedTable) -> DirectModel {
        let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
        for batch in &graded.batches {
            for index in 0..batch.num_rows() {
                rows.entry(batch.slice.value(index).to_owned())
                    .or_default()
                    .push((
                        batch.score.value(index),
                        batch.small_ok.value(index),
                        batch.large_ok.value(index),
                        batch.cost_small.value(index),
                        batch.cost_large.value(index),
                    ));
            }
        }
        let all: Vec<_> = rows.values().flatten().copied().collect();
        DirectModel {
            all: slice_model(all),
            slices: rows
                .into_iter()
                .map(|(slice, rows)| (slice, slice_model(rows)))
                .collect(),
        }
    }

    /// The expected quality of `tier` (0 small, 1 large) for a request of
    /// `slice` with `score` (none: the slice's rate).
    pub fn quality(&self, slice: &str, tier: usize, score: Option<f64>) -> f64 {
        let model = self.slices.get(slice).unwrap_or(&self.all);
        let bins: Vec<(u64, u64, u64)> = match score {
            Some(score) => vec![model.bins[model.edges.partition_point(|edge| *edge < score)]],
            None => model.bins.clone(),
        };
        let (small, large, rows) = bins.iter().fold((0, 0, 0), |sum, bin| {
            (sum.0 + bin.0, sum.1 + bin.1, sum.2 + bin.2)
        });
        let ok = if tier == 0 { small } else { large };
        // Laplace's rule keeps an empty or one-sided bin inside (0, 1).
        (ok as f64 + 1.0) / (rows as f64 + 2.0)
    }

    pub fn cost(&self, slice: &str, tier: usize) -> f64 {
        self.slices.get(slice).unwrap_or(&self.all).cost[tier.min(1)]
    }
}

fn slice_model(mut rows: Vec<Row>) -> SliceModel {
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bins = BINS.min(rows.len()).max(1);
    let mut model = SliceModel {
        edges: Vec::new(),
        bins: vec![(0, 0, 0); bins],
        cost: [0.0; 2],
    };
    for bin in 1..bins {
        model.edges.push(rows[bin * rows.len() / bins - 1].0);
    }
    for (score, small_ok, large_ok, cost_small, cost_large) in &rows {
        let bin = model.edges.partition_point(|edge| edge < score);
        let entry = &mut model.bins[bin];
        entry.0 += u64::from(*small_ok);
        entry.1 += u64::from(*large_ok);
        entry.2 += 1;
        model.cost[0] += cost_small;
        model.cost[1] += cost_large;
    }
    let count = rows.len().max(1) as f64;
    model.cost = model.cost.map(|total| total / count);
    model
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_holds_the_rates_of_its_scores() {
        // Small answers well below 0.5, large everywhere.
        let rows: Vec<_> = (0..100)
            .map(|i| {
                let score = f64::from(i) / 100.0;
                (score, score < 0.5, true, 1.0, 3.0)
            })
            .collect();
        let model = DirectModel {
            all: slice_model(rows),
            slices: BTreeMap::new(),
        };
        assert_eq!(model.quality("s", 0, Some(0.05)), 11.0 / 12.0);
        assert_eq!(model.quality("s", 0, Some(0.95)), 1.0 / 12.0);
        assert_eq!(model.quality("s", 1, Some(0.95)), 11.0 / 12.0);
        assert_eq!(model.quality("s", 0, None), 51.0 / 102.0);
        assert_eq!((model.cost("s", 0), model.cost("s", 1)), (1.0, 3.0));
    }
}
