//! What the report plots, computed from the graded results with the same
//! sweep `calibrate` uses: each slice's candidate curve under both policies.

use std::collections::BTreeMap;

use crate::calibrate::{Curve, GradedRow, Policy, SliceObservations, Totals};
use crate::schema::GradedTable;

/// One slice's curves and baselines.
#[derive(Debug)]
pub struct SliceCurves {
    pub slice: String,
    pub predictive: Curve,
    pub cascade: Curve,
    pub totals: Totals,
}

pub fn slice_curves(table: &GradedTable) -> Vec<SliceCurves> {
    let mut observations: BTreeMap<String, (SliceObservations, SliceObservations)> =
        BTreeMap::new();
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            let row = GradedRow::from_batch(batch, index);
            let (predictive, cascade) = observations
                .entry(batch.slice.value(index).to_owned())
                .or_default();
            predictive.push(Policy::Predictive, &row);
            cascade.push(Policy::Cascade, &row);
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
