//! Choosing a threshold from a slice's curve: the plain fit, the certified
//! choice, and the Pareto frontier that reports plot.

use crate::stats::max_certifiable_failures;

use crate::policy::{Candidate, Curve, fixed_sequence};

/// Which candidate a slice gets, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Index of the chosen candidate in `Curve::candidates`; `None` when the
    /// slice is infeasible.
    pub chosen: Option<usize>,
    /// With a confidence level: the most failures that certify the target on
    /// this slice, `None` when even a flawless slice of this size does not.
    pub max_certifiable_failures: Option<u64>,
    /// The slice has audited rows, so certification used the corrected
    /// (prediction-powered) bound rather than the grader's labels alone.
    pub corrected: bool,
}

/// Fewest audited rows a slice needs before its corrected bound is used:
/// the bound is normal-approximate, and its variance estimate needs rows.
pub const MIN_AUDITED_ROWS: u64 = 30;

/// Picks the cheapest eligible candidate. Without `confidence`, eligible means
/// measured quality ≥ `target`. With it, candidates are tested in order from
/// escalate-all towards escalate-none with the exact binomial test of
/// H0: failure rate ≥ 1 − target at level δ = 1 − confidence, and the eligible
/// ones are those certified before the first that is not (fixed-sequence
/// testing, which controls the error without splitting δ: the kernel's
/// [`fixed_sequence`], as k tiers use it along an order of their own).
pub fn select(curve: &Curve, target: f64, confidence: Option<f64>) -> Selection {
    let rows = curve.rows;
    let cheapest = |eligible: &mut dyn Iterator<Item = (usize, &Candidate)>| {
        eligible
            .reduce(|best, next| {
                if next.1.preferred_over(best.1) {
                    next
                } else {
                    best
                }
            })
            .map(|(index, _)| index)
    };
    match confidence {
        Some(confidence) if curve.audited > 0 => {
            // The grader's labels are corrected by the audited rows; too few
            // of them certify nothing rather than trust the grader.
            let delta = 1.0 - confidence;
            let chosen = (curve.audited >= MIN_AUDITED_ROWS)
                .then(|| {
                    cheapest(&mut fixed_sequence(
                        curve.candidates.iter().enumerate(),
                        |(_, candidate)| curve.corrected(candidate).lower_bound(delta) >= target,
                    ))
                })
                .flatten();
            Selection {
                chosen,
                max_certifiable_failures: None,
                corrected: true,
            }
        }
        None => Selection {
            chosen: cheapest(
                &mut curve
                    .candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, candidate)| candidate.quality(rows) >= target),
            ),
            max_certifiable_failures: None,
            corrected: false,
        },
        Some(confidence) => {
            let limit = max_certifiable_failures(rows, 1.0 - target, 1.0 - confidence);
            let chosen = limit.and_then(|limit| {
                cheapest(&mut fixed_sequence(
                    curve.candidates.iter().enumerate(),
                    |(_, candidate)| candidate.failures(rows) <= limit,
                ))
            });
            Selection {
                chosen,
                max_certifiable_failures: limit,
                corrected: false,
            }
        }
    }
}

/// Indices of the candidates no other candidate beats on both cost and
/// quality, cheapest first.
pub fn frontier(curve: &Curve) -> Vec<usize> {
    let mut order: Vec<usize> = (0..curve.candidates.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (&curve.candidates[a], &curve.candidates[b]);
        a.cost
            .cmp(&b.cost)
            .then(b.successes.cmp(&a.successes))
            .then(a.threshold.total_cmp(&b.threshold))
    });
    let mut best_successes = None;
    order
        .into_iter()
        .filter(|&index| {
            let successes = curve.candidates[index].successes;
            let improves = best_successes.is_none_or(|best| successes > best);
            if improves {
                best_successes = Some(successes);
            }
            improves
        })
        .collect()
}
