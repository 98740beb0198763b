//! One graded row as the kernel reads it.

use crate::schema::GradedBatch;

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
