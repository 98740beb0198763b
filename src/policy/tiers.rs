//! Any number of tiers: which tier serves a row under a predictive policy's
//! k − 1 ordered thresholds on one score, or a cascade's threshold per
//! non-final stage, and what serving it there costs. The two-tier
//! [`serve`](super::serve) is this with k = 2.

use crate::schema::{Policy, escalates};

/// One row served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// The served answer was acceptable.
    pub ok: bool,
    /// Picodollars spent on the row: every call the policy made for it.
    pub cost: i64,
    /// Cascade: the verifier accepted a wrong small answer, which escalation
    /// can never repair.
    pub false_accept: bool,
}

/// One row's outcomes over k tiers, cheapest first, costs in picodollars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TieredOutcomes<'a> {
    pub ok: &'a [bool],
    pub cost: &'a [i64],
    /// Predictive: the router's call.
    pub router: i64,
    /// Cascade: the verifier's call after each non-final stage.
    pub verifier: &'a [i64],
}

/// The tier a predictive router sends a row with `score` to: the number of
/// `thresholds` (ascending) the score is at or above, so below the first
/// goes to tier 0 and at or above the last to tier k − 1.
pub fn predictive_tier(score: f64, thresholds: &[f64]) -> usize {
    thresholds
        .iter()
        .take_while(|&&threshold| escalates(score, threshold))
        .count()
}

/// The stage whose answer a cascade serves: the first whose verifier score
/// is below that stage's threshold, or the last stage.
pub fn cascade_stage(stage_scores: &[f64], thresholds: &[f64]) -> usize {
    stage_scores
        .iter()
        .zip(thresholds)
        .take_while(|&(&score, &threshold)| escalates(score, threshold))
        .count()
}

/// The tier a row of `scores` goes to at `thresholds` under `policy`, and
/// what serving it there does.
#[inline]
pub fn serve_at(
    policy: Policy,
    scores: &[f64],
    thresholds: &[f64],
    row: &TieredOutcomes<'_>,
) -> (usize, Served) {
    let tier = match policy {
        Policy::Predictive => predictive_tier(scores[0], thresholds),
        Policy::Cascade => cascade_stage(scores, thresholds),
    };
    (tier, serve_tier(policy, row, tier))
}

/// What serving the row at `tier` gives under `policy`:
/// - predictive: the router and that tier's call;
/// - cascade: every stage up to and including `tier`, each non-final one
///   followed by its verifier; a wrong answer accepted before the last
///   stage is a false accept, which no later stage can repair.
#[inline]
pub fn serve_tier(policy: Policy, row: &TieredOutcomes<'_>, tier: usize) -> Served {
    let ok = row.ok[tier];
    match policy {
        Policy::Predictive => Served {
            ok,
            cost: row.router + row.cost[tier],
            false_accept: false,
        },
        Policy::Cascade => {
            let last = row.cost.len() - 1;
            let verified = &row.verifier[..(tier + 1).min(last)];
            Served {
                ok,
                cost: row.cost[..=tier].iter().sum::<i64>() + verified.iter().sum::<i64>(),
                false_accept: tier < last && !ok,
            }
        }
    }
}

/// One tier's recorded times, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierLatency {
    pub first_token: f64,
    pub total: f64,
}

/// Time to the first token of the answer served at `tier`: the router and
/// that tier's first token (predictive); or every earlier stage's whole
/// answer and verification, then this stage's first token if it is the
/// last, else its whole answer and verification, since a cascade releases
/// an answer only once it is verified (DOMAIN.md's cascade latency).
pub fn first_token_tier_ms(
    policy: Policy,
    tiers: &[TierLatency],
    verifier_ms: f64,
    router_ms: f64,
    tier: usize,
) -> f64 {
    match policy {
        Policy::Predictive => router_ms + tiers[tier].first_token,
        Policy::Cascade => {
            let earlier: f64 = tiers[..tier]
                .iter()
                .map(|stage| stage.total + verifier_ms)
                .sum();
            let last = tier + 1 == tiers.len();
            earlier
                + if last {
                    tiers[tier].first_token
                } else {
                    tiers[tier].total + verifier_ms
                }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_tier_latency_is_the_k_tier_algebra_with_k_2() {
        use crate::policy::{Latencies, first_token_ms};
        let latencies = Latencies {
            small_total: Some(3000.0),
            small_first_token: Some(250.0),
            large_first_token: Some(900.0),
            verifier: Some(400.0),
            router: Some(20.0),
        };
        let tiers = [
            TierLatency {
                first_token: 250.0,
                total: 3000.0,
            },
            TierLatency {
                first_token: 900.0,
                total: 6000.0,
            },
        ];
        for policy in [Policy::Predictive, Policy::Cascade] {
            for escalate in [false, true] {
                assert_eq!(
                    first_token_ms(policy, &latencies, escalate),
                    Some(first_token_tier_ms(
                        policy,
                        &tiers,
                        400.0,
                        20.0,
                        usize::from(escalate)
                    )),
                    "{policy:?} {escalate}"
                );
            }
        }
        let three = [
            tiers[0],
            TierLatency {
                first_token: 500.0,
                total: 4000.0,
            },
            tiers[1],
        ];
        assert_eq!(
            first_token_tier_ms(Policy::Cascade, &three, 400.0, 20.0, 2),
            3400.0 + 4400.0 + 900.0
        );
    }

    #[test]
    fn ordered_thresholds_split_the_score_into_tiers() {
        let thresholds = [0.3, 0.7];
        assert_eq!(predictive_tier(0.1, &thresholds), 0);
        assert_eq!(
            predictive_tier(0.3, &thresholds),
            1,
            "at a threshold escalates"
        );
        assert_eq!(predictive_tier(0.69, &thresholds), 1);
        assert_eq!(predictive_tier(0.7, &thresholds), 2);
        assert_eq!(predictive_tier(0.9, &[f64::INFINITY, f64::INFINITY]), 0);
    }

    #[test]
    fn a_three_stage_cascade_pays_for_every_stage_it_reaches() {
        let row = TieredOutcomes {
            ok: &[false, true, true],
            cost: &[10, 100, 1000],
            router: 1,
            verifier: &[2, 3],
        };
        let first = serve_tier(Policy::Cascade, &row, 0);
        assert_eq!(
            (first.cost, first.ok, first.false_accept),
            (12, false, true)
        );
        let second = serve_tier(Policy::Cascade, &row, 1);
        assert_eq!(
            (second.cost, second.ok, second.false_accept),
            (115, true, false)
        );
        let third = serve_tier(Policy::Cascade, &row, 2);
        assert_eq!(third.cost, 1115, "the last stage has no verifier");
        assert_eq!(serve_tier(Policy::Predictive, &row, 1).cost, 101);
        assert_eq!(cascade_stage(&[0.9, 0.2], &[0.5, 0.5]), 1);
        assert_eq!(cascade_stage(&[0.9, 0.6], &[0.5, 0.5]), 2);
        assert_eq!(cascade_stage(&[0.1, 0.9], &[0.5, 0.5]), 0);
    }
}
