//! How well a score separates the prompts that need the large tier, with
//! RouteLLM's metrics.
//!
//! Escalating the top x share of prompts by score gives quality q(x). The
//! performance gap recovered is PGR(x) = (q(x) − q_small) / (q_large −
//! q_small). APGR is the area under PGR over x in [0, 1] (prompts with equal
//! scores are escalated together, the curve linear across them); CPT(p) is
//! the smallest share of calls to the large tier with PGR ≥ p. A random
//! router's APGR is 0.5 in expectation.

use super::{Curve, GradedRow, Policy, SliceObservations};
use crate::schema::RoutingQuality;
use crate::stats::Random;

/// One prompt: its score and whether each tier's answer was acceptable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredOutcome {
    pub score: f64,
    pub small_ok: bool,
    pub large_ok: bool,
}

/// The PGR curve's points (share escalated, PGR); `None` when the tiers are
/// equally good, so there is no gap to recover. The points are the policy
/// kernel's sweep: one per distinct score, escalating at or above it.
fn curve(outcomes: &[ScoredOutcome]) -> Option<Vec<(f64, f64)>> {
    let mut observations = SliceObservations::default();
    for outcome in outcomes {
        let row = GradedRow {
            score: outcome.score,
            small_ok: outcome.small_ok,
            large_ok: outcome.large_ok,
            cost_small: 0.0,
            cost_large: 0.0,
            cost_verifier: 0.0,
            cost_router: 0.0,
        };
        observations.push(Policy::Predictive, &row);
    }
    let totals = observations.totals;
    let (n, small, large) = (
        totals.rows as f64,
        totals.small_ok as f64,
        totals.large_ok as f64,
    );
    if n == 0.0 || large == small {
        return None;
    }
    let curve = Curve::sweep(&mut observations);
    Some(
        curve
            .candidates
            .iter()
            .rev()
            .map(|candidate| {
                (
                    candidate.escalated as f64 / n,
                    (candidate.successes as f64 - small) / (large - small),
                )
            })
            .collect(),
    )
}

pub fn routing_quality(outcomes: &[ScoredOutcome]) -> Option<RoutingQuality> {
    let points = curve(outcomes)?;
    let apgr = points
        .windows(2)
        .map(|pair| (pair[1].0 - pair[0].0) * (pair[0].1 + pair[1].1) / 2.0)
        .sum();
    let cpt = |target: f64| {
        points.windows(2).find_map(|pair| {
            let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
            if y0 >= target {
                Some(x0)
            } else if y1 >= target {
                Some(x0 + (x1 - x0) * (target - y0) / (y1 - y0))
            } else {
                None
            }
        })
    };
    Some(RoutingQuality {
        apgr,
        cpt50: cpt(0.5),
        cpt80: cpt(0.8),
    })
}

/// The same outcomes scored at random (seeded).
pub fn random_scores(outcomes: &[ScoredOutcome], seed: u64) -> Vec<ScoredOutcome> {
    let mut random = Random::new(seed);
    outcomes
        .iter()
        .map(|outcome| ScoredOutcome {
            score: random.unit(),
            ..*outcome
        })
        .collect()
}

/// The same outcomes scored by an oracle: prompts the large tier rescues
/// first, prompts it would break last.
pub fn oracle_scores(outcomes: &[ScoredOutcome]) -> Vec<ScoredOutcome> {
    outcomes
        .iter()
        .map(|outcome| ScoredOutcome {
            score: f64::from(u8::from(outcome.large_ok)) - f64::from(u8::from(outcome.small_ok)),
            ..*outcome
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(score: f64, small_ok: bool, large_ok: bool) -> ScoredOutcome {
        ScoredOutcome {
            score,
            small_ok,
            large_ok,
        }
    }

    #[test]
    fn a_perfect_score_recovers_the_gap_at_once() {
        // Two rescued prompts and two that both tiers get right.
        let outcomes = [
            outcome(0.9, false, true),
            outcome(0.8, false, true),
            outcome(0.1, true, true),
            outcome(0.0, true, true),
        ];
        let quality = routing_quality(&outcomes).unwrap();
        // PGR: 0 → 0.5 → 1 → 1 → 1 at x = 0, 0.25, 0.5, 0.75, 1.
        assert!((quality.apgr - (0.0625 + 0.1875 + 0.25 + 0.25)).abs() < 1e-12);
        assert_eq!(quality.cpt50, Some(0.25));
        assert!((quality.cpt80.unwrap() - 0.4).abs() < 1e-12);
    }

    #[test]
    fn ties_are_escalated_together_and_random_is_about_half() {
        let mut random = Random::new(9);
        let outcomes: Vec<ScoredOutcome> = (0..20_000)
            .map(|_| outcome(0.5, random.chance(0.6), random.chance(0.85)))
            .collect();
        // One tie group: the curve is a straight line, APGR exactly 0.5.
        assert!((routing_quality(&outcomes).unwrap().apgr - 0.5).abs() < 1e-12);
        let shuffled = routing_quality(&random_scores(&outcomes, 1)).unwrap();
        assert!((shuffled.apgr - 0.5).abs() < 0.03, "{}", shuffled.apgr);
        assert!(routing_quality(&oracle_scores(&outcomes)).unwrap().apgr > 0.9);
        assert_eq!(routing_quality(&[outcome(1.0, true, true)]), None);
    }
}
