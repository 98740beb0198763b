//! Many tests in one run: which of a family of p-values to reject so that
//! the run as a whole raises false alarms rarely. Holm's step-down keeps
//! the chance of any false rejection at most δ whatever the tests'
//! dependence; Benjamini and Hochberg's step-up keeps the expected share of
//! false rejections among the rejections at most δ (for independent or
//! positively dependent tests), and when nothing changed it too rejects
//! anything with probability at most δ.

/// Holm's step-down at level `delta`: per p-value, in the given order, the
/// level it was held to (δ over the p-values not yet rejected) and whether
/// it is rejected.
pub fn holm(p_values: &[f64], delta: f64) -> Vec<(f64, bool)> {
    let mut order: Vec<usize> = (0..p_values.len()).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let family = p_values.len();
    let mut result = vec![(0.0, false); family];
    let mut still_rejecting = true;
    for (rank, &index) in order.iter().enumerate() {
        let level = delta / (family - rank) as f64;
        still_rejecting = still_rejecting && super::certifies(p_values[index], level);
        result[index] = (level, still_rejecting);
    }
    result
}

/// Benjamini and Hochberg's step-up at level `delta`: per p-value, in the
/// given order, whether it is rejected.
pub fn benjamini_hochberg(p_values: &[f64], delta: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..p_values.len()).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let family = p_values.len();
    let largest = order
        .iter()
        .enumerate()
        .rev()
        .find(|&(rank, &index)| {
            super::certifies(p_values[index], delta * (rank + 1) as f64 / family as f64)
        })
        .map(|(rank, _)| rank);
    let mut rejected = vec![false; family];
    if let Some(largest) = largest {
        for &index in &order[..=largest] {
            rejected[index] = true;
        }
    }
    rejected
}

/// How a run reads one family of tests: per p-value, `None` when nothing
/// rejects it, `Some(true)` when Holm's step-down does (a family-wise
/// finding, fit for an action) and `Some(false)` when only
/// Benjamini–Hochberg does (a discovery to look at).
pub fn alarms(p_values: &[f64], delta: f64) -> Vec<Option<bool>> {
    holm(p_values, delta)
        .into_iter()
        .zip(benjamini_hochberg(p_values, delta))
        .map(|((_, strong), discovered)| (strong || discovered).then_some(strong))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_steps_down_and_stops_at_the_first_it_keeps() {
        // Levels 0.05/4, 0.05/3, 0.05/2, 0.05.
        let p = [0.04, 0.001, 0.03, 0.012];
        let rejected: Vec<bool> = holm(&p, 0.05)
            .iter()
            .map(|&(_, rejected)| rejected)
            .collect();
        assert_eq!(rejected, [false, true, false, true]);
        assert_eq!(holm(&p, 0.05)[2].0, 0.025);
        assert!(holm(&[], 0.05).is_empty());
    }

    #[test]
    fn benjamini_hochberg_steps_up_past_a_p_value_above_its_level() {
        // Sorted 0.001, 0.012, 0.02, 0.04 against 0.0125, 0.025, 0.0375,
        // 0.05: the largest below its level is the fourth, so all four go.
        let p = [0.04, 0.001, 0.02, 0.012];
        assert_eq!(benjamini_hochberg(&p, 0.05), [true; 4]);
        let p = [0.3, 0.001, 0.2, 0.04];
        assert_eq!(benjamini_hochberg(&p, 0.05), [false, true, false, false]);
    }
}
