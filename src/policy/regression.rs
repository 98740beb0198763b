//! A candidate table against the deployed one on the same graded rows, per
//! slice: the paired quality test and the paired cost difference.

use super::money::to_usd;
use super::table::Evaluation;
use crate::schema::SliceRegression;
use crate::stats::{Paired, mean_difference_interval, worse_by_more_than};

/// Per slice, the candidate against the deployed config on the same rows:
/// the paired test of "worse by more than `margin`" at level `delta`, and
/// the paired cost difference.
pub fn regressions(
    evaluation: &Evaluation,
    baseline: &Evaluation,
    margin: f64,
    delta: f64,
) -> Vec<SliceRegression> {
    let mut found = Vec::new();
    for (metrics, outcomes) in evaluation.slices.iter().zip(&evaluation.outcomes) {
        let Some(position) = baseline
            .slices
            .iter()
            .position(|before| before.slice == metrics.slice)
        else {
            continue;
        };
        let before = &baseline.outcomes[position];
        let mut paired = Paired::default();
        let mut cost_differences = Vec::with_capacity(outcomes.len());
        for (&(now_ok, now_cost), &(before_ok, before_cost)) in outcomes.iter().zip(before) {
            paired.add(before_ok, now_ok);
            cost_differences.push(to_usd(i128::from(now_cost) - i128::from(before_cost)));
        }
        let test = worse_by_more_than(paired, margin, delta);
        let (cost_difference, cost_interval) =
            mean_difference_interval(&cost_differences, delta).unwrap_or((0.0, (0.0, 0.0)));
        found.push(SliceRegression {
            slice: metrics.slice.clone(),
            n: paired.n,
            baseline_only: paired.baseline_only,
            candidate_only: paired.candidate_only,
            difference: test.difference,
            difference_interval: [test.interval.0, test.interval.1],
            p_value: test.p_value,
            boundary_share: test.boundary_share,
            power: test.power,
            verdict: test.verdict,
            better: test.better,
            cost_difference,
            cost_difference_interval: [cost_interval.0, cost_interval.1],
        });
    }
    found
}
