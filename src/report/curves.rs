//! What the report plots, computed from the graded results with the same
//! sweep `calibrate` uses: each slice's candidate curve under both policies.

use std::collections::BTreeMap;

use crate::policy::{Curve, GradedRow, SliceObservations, Totals};
use crate::schema::GradedTable;
use crate::schema::Policy;

/// One slice's curves and baselines.
#[derive(Debug)]
pub struct SliceCurves {
    pub slice: String,
    pub predictive: Curve,
    pub cascade: Curve,
    pub totals: Totals,
}

/// Each slice's curves: the predictive one swept over `predictive_scores`
/// (a router's), the cascade one over `cascade_scores` (the verifier's),
/// both in row order.
pub fn slice_curves(
    table: &GradedTable,
    predictive_scores: &[f64],
    cascade_scores: &[f64],
) -> Vec<SliceCurves> {
    let mut observations: BTreeMap<String, (SliceObservations, SliceObservations)> =
        BTreeMap::new();
    let mut scores = predictive_scores.iter().zip(cascade_scores);
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            let (&predictive_score, &cascade_score) = scores.next().expect("a score per row");
            let row = GradedRow::from_batch(batch, index);
            let (predictive, cascade) = observations
                .entry(batch.slice.value(index).to_owned())
                .or_default();
            predictive.push(
                Policy::Predictive,
                &GradedRow {
                    score: predictive_score,
                    ..row
                },
            );
            cascade.push(
                Policy::Cascade,
                &GradedRow {
                    score: cascade_score,
                    ..row
                },
            );
        }
    }
    observations
        .into_iter()
        .map(|(slice, (mut predictive, mut cascade))| SliceCurves {
            slice,
            totals: predictive.totals,
            predictive: Curve::sweep(&mut predictive),
            cascade: Curve::sweep(&mut cascade),
        })
        .collect()
}
