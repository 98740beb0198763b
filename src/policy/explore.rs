//! Exploration a signed config may declare: a share of a slice's requests
//! answered at a tier drawn uniformly among the plan's tiers instead of the
//! policy's, so that every tier's outcome is observed on production traffic
//! with a known probability. The probability of each tier is exact (the
//! policy is deterministic given the score), which is what an off-policy
//! estimate divides by; and what exploring costs, at the gate's own
//! measurements of the policy and of each tier alone.

use crate::routes::{Explore, ResolvedPolicy, ResolvedTable, TierThresholds};
use crate::schema::{ExplorationPrice, GradedTable, Metrics, Threshold};

use super::table::{Evaluation, TieredRows, evaluate_table};

/// What a request's draw chose: the tier, whether exploration chose it, and
/// the probability that the config answers this request at that tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drawn {
    pub tier: usize,
    pub explored: bool,
    pub propensity: f64,
}

/// The probability that a request the policy sends to `policy_tier` of
/// `tiers` is answered at `tier`, when a `share` of requests goes to a tier
/// drawn uniformly: `(1 − share)·[tier = policy_tier] + share / tiers`.
pub fn propensity(share: f64, tiers: usize, policy_tier: usize, tier: usize) -> f64 {
    let uniform = share / tiers as f64;
    if tier == policy_tier {
        (1.0 - share) + uniform
    } else {
        uniform
    }
}

/// The tier a request is answered at, from two independent uniform numbers
/// in [0, 1): the first decides whether the request explores, the second
/// which tier it explores.
pub fn draw(share: f64, tiers: usize, policy_tier: usize, explore: f64, pick: f64) -> Drawn {
    let explored = share > 0.0 && tiers > 1 && explore < share;
    let tier = if explored {
        ((pick * tiers as f64) as usize).min(tiers - 1)
    } else {
        policy_tier
    };
    let propensity = if tiers > 1 {
        propensity(share, tiers, policy_tier, tier)
    } else {
        1.0
    };
    Drawn {
        tier,
        explored,
        propensity,
    }
}

/// How many tiers a policy that may explore answers at: a predictive
/// policy's; `None` for a policy with no tier to draw.
pub fn tier_count(policy: &ResolvedPolicy) -> Option<usize> {
    match policy {
        ResolvedPolicy::Predictive { .. } => Some(2),
        ResolvedPolicy::PredictiveTiers { tiers, .. } => Some(tiers.len()),
        _ => None,
    }
}

/// `table` with every request sent to its policy's tier `tier` whatever
/// its score (thresholds of −∞ below the tier and +∞ from it), so the
/// gate measures each tier alone with the same evaluation as the policy.
/// `None` for a policy with no tiers to draw.
pub fn alone_at(table: &ResolvedTable, tier: usize) -> Option<ResolvedTable> {
    let levels = |count: usize| -> Vec<Threshold> {
        (0..count)
            .map(|index| {
                Threshold(if index < tier {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                })
            })
            .collect()
    };
    let policy = match &table.policy {
        ResolvedPolicy::Predictive {
            small,
            large,
            score,
            thresholds,
        } => {
            let [level] = levels(1)[..] else {
                unreachable!("one threshold")
            };
            let mut thresholds = thresholds.clone();
            thresholds.default = Some(level);
            thresholds
                .slices
                .values_mut()
                .for_each(|value| *value = level);
            ResolvedPolicy::Predictive {
                small: small.clone(),
                large: large.clone(),
                score: score.clone(),
                thresholds,
            }
        }
        ResolvedPolicy::PredictiveTiers {
            tiers,
            score,
            thresholds,
        } => ResolvedPolicy::PredictiveTiers {
            tiers: tiers.clone(),
            score: score.clone(),
            thresholds: TierThresholds {
                default: Some(levels(tiers.len() - 1)),
                slices: thresholds
                    .slices
                    .keys()
                    .map(|slice| (slice.clone(), levels(tiers.len() - 1)))
                    .collect(),
            },
        },
        _ => return None,
    };
    Some(ResolvedTable {
        policy,
        ..table.clone()
    })
}

/// The price of exploring one slice at `share`: the policy's metrics and
/// each tier's alone (every request of the slice sent to it), cheapest
/// first. Exploring answers a `share` of requests at a uniform tier.
pub fn price(share: f64, policy: &Metrics, tiers_alone: &[&Metrics]) -> ExplorationPrice {
    let tiers = tiers_alone.len() as f64;
    let uniform_cost = tiers_alone.iter().map(|tier| tier.mean_cost).sum::<f64>() / tiers;
    let uniform_quality = tiers_alone.iter().map(|tier| tier.quality).sum::<f64>() / tiers;
    let mean_cost_exploring = (1.0 - share) * policy.mean_cost + share * uniform_cost;
    ExplorationPrice {
        slice: policy.slice.clone(),
        n: policy.n,
        share,
        mean_cost: policy.mean_cost,
        mean_cost_exploring,
        added_cost_share: added_share(policy.mean_cost, mean_cost_exploring),
        quality: policy.quality,
        quality_exploring: (1.0 - share) * policy.quality + share * uniform_quality,
    }
}

/// What `explore` costs `table` on the graded rows: all rows, then each
/// slice, from the policy's `evaluation` and each tier's alone, measured by
/// the same evaluation on the same rows and scores. `None` for a policy
/// with no tiers to draw.
pub fn price_table(
    table: &ResolvedTable,
    explore: &Explore,
    evaluation: &Evaluation,
    graded: &GradedTable,
    scores: &[f64],
    tiered: Option<&TieredRows>,
) -> Option<Vec<ExplorationPrice>> {
    let tiers = tier_count(&table.policy)?;
    let alone: Vec<Evaluation> = (0..tiers)
        .map(|tier| {
            let table = alone_at(table, tier).expect("a policy with tiers");
            evaluate_table(&table, graded, scores, None, tiered)
        })
        .collect();
    let slices: Vec<ExplorationPrice> = evaluation
        .slices
        .iter()
        .enumerate()
        .map(|(index, policy)| {
            let each: Vec<&Metrics> = alone
                .iter()
                .map(|alone| {
                    let metrics = &alone.slices[index];
                    debug_assert_eq!(metrics.slice, policy.slice);
                    metrics
                })
                .collect();
            price(explore.share_for(&policy.slice), policy, &each)
        })
        .collect();
    let mut prices = vec![price_overall(&slices)];
    prices.extend(slices);
    Some(prices)
}

/// The price over every slice, each weighted by its rows: the mix the gate
/// measured on.
pub fn price_overall(slices: &[ExplorationPrice]) -> ExplorationPrice {
    let n: u64 = slices.iter().map(|slice| slice.n).sum();
    let weighted = |value: &dyn Fn(&ExplorationPrice) -> f64| {
        if n == 0 {
            return 0.0;
        }
        slices
            .iter()
            .map(|slice| value(slice) * slice.n as f64)
            .sum::<f64>()
            / n as f64
    };
    let mean_cost = weighted(&|slice| slice.mean_cost);
    let mean_cost_exploring = weighted(&|slice| slice.mean_cost_exploring);
    ExplorationPrice {
        slice: "*".to_owned(),
        n,
        share: weighted(&|slice| slice.share),
        mean_cost,
        mean_cost_exploring,
        added_cost_share: added_share(mean_cost, mean_cost_exploring),
        quality: weighted(&|slice| slice.quality),
        quality_exploring: weighted(&|slice| slice.quality_exploring),
    }
}

fn added_share(before: f64, after: f64) -> f64 {
    if before > 0.0 {
        after / before - 1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(slice: &str, n: u64, quality: f64, mean_cost: f64) -> Metrics {
        Metrics {
            slice: slice.to_owned(),
            n,
            quality,
            quality_lower_bound: None,
            mean_cost,
            p50_ms: None,
            p95_ms: None,
            escalation_rate: 0.0,
            false_accept_rate: None,
            served: None,
        }
    }

    #[test]
    fn the_propensities_of_every_tier_sum_to_one() {
        for tiers in 1..5 {
            for policy_tier in 0..tiers {
                let total: f64 = (0..tiers)
                    .map(|tier| propensity(0.1, tiers, policy_tier, tier))
                    .sum();
                assert!((total - 1.0).abs() < 1e-12, "{tiers} tiers: {total}");
            }
        }
        assert_eq!(propensity(0.0, 2, 1, 1), 1.0);
        assert_eq!(propensity(0.2, 2, 1, 0), 0.1);
        assert_eq!(propensity(0.2, 2, 1, 1), 0.9);
    }

    #[test]
    fn a_draw_explores_below_the_share_and_picks_the_tier_by_the_second_number() {
        let kept = draw(0.1, 3, 2, 0.5, 0.0);
        assert_eq!(
            kept,
            Drawn {
                tier: 2,
                explored: false,
                propensity: 0.9 + 0.1 / 3.0
            }
        );
        let explored = draw(0.1, 3, 2, 0.05, 0.4);
        assert_eq!((explored.tier, explored.explored), (1, true));
        assert_eq!(explored.propensity, 0.1 / 3.0);
        // Exploring may land on the policy's own tier: its probability is
        // the same whichever draw chose it.
        let landed = draw(0.1, 3, 2, 0.05, 0.99);
        assert_eq!((landed.tier, landed.explored), (2, true));
        assert_eq!(landed.propensity, kept.propensity);
        assert_eq!(draw(0.5, 1, 0, 0.0, 0.7).propensity, 1.0);
        assert!(!draw(0.0, 2, 0, 0.0, 0.7).explored);
    }

    #[test]
    fn exploring_costs_the_share_of_the_gap_to_the_uniform_tier() {
        let policy = metrics("a", 100, 0.9, 2.0);
        let small = metrics("a", 100, 0.6, 1.0);
        let large = metrics("a", 100, 0.95, 5.0);
        let priced = price(0.1, &policy, &[&small, &large]);
        // Uniform: cost 3.0, quality 0.775.
        assert!((priced.mean_cost_exploring - 2.1).abs() < 1e-12);
        assert!((priced.added_cost_share - 0.05).abs() < 1e-12);
        assert!((priced.quality_exploring - (0.9 * 0.9 + 0.1 * 0.775)).abs() < 1e-12);
        let other = price(0.0, &metrics("b", 300, 1.0, 1.0), &[&small, &large]);
        let overall = price_overall(&[priced, other]);
        assert_eq!(overall.n, 400);
        assert!((overall.mean_cost - 1.25).abs() < 1e-12);
        assert!((overall.mean_cost_exploring - (2.1 * 100.0 + 300.0) / 400.0).abs() < 1e-12);
        assert!((overall.share - 0.025).abs() < 1e-12);
    }
}
