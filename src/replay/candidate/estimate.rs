//! The off-policy estimators over a group of logged requests (a slice, or
//! all): inverse-propensity (IPS), self-normalised (SNIPS) and doubly
//! robust (DR) estimates of a candidate's quality and cost, the running
//! policy's quality and the paired difference, each quality with an
//! empirical-Bernstein interval.
//!
//! Why the intervals hold: the requests are independent draws of the
//! traffic, serve's exploration draws are independent of everything else,
//! and the label draw is Poisson sampling (each request on its own, with a
//! known probability `q`). Each request's IPS term `[labelled]·[matched]·r /
//! (p·q)` is then independent of the others, has the candidate's quality as
//! its mean exactly (every route the candidate needs has a propensity above
//! 0), and lies in [0, W] with `W = 1 / (p_min·q)`, `p_min` the smallest
//! propensity the signed config can give a route: the empirical-Bernstein
//! theorem's conditions. The DR term is the direct model's value plus the
//! same weight times a residual in [−1, 1], so it lies in [1 − W, W]; SNIPS
//! is the ratio of two such means, bounded by the ratio of their bounds at
//! half the error each.

use crate::schema::{Estimate, Estimators, SliceEstimate};
use crate::stats::{clopper_pearson_interval, empirical_bernstein_interval};

/// One request the signed config decided, as the estimators read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    pub slice: String,
    /// The decided route is the one the candidate would choose.
    pub matched: bool,
    /// The decided route is the one the running policy would choose.
    pub running_matched: bool,
    /// The decided route's probability under the signed config.
    pub propensity: f64,
    /// The smallest probability the config could give any route of this
    /// request: the design's, not the draw's.
    pub min_propensity: f64,
    /// The label of the logged answer, for a request in the label set: 1 or
    /// 0, or a judge's corrected by an audit (which may lie outside [0, 1]
    /// and is right on average).
    pub reward: Option<f64>,
    pub cost: f64,
    /// The direct model's quality and cost of the candidate's route here.
    pub model_quality: f64,
    pub model_cost: f64,
    /// The candidate sends it past its cheapest tier.
    pub escalates: bool,
}

/// What the labels are: drawn each with probability `inclusion`, each
/// reward within `rewards` ([0, 1], or wider where an audit corrects a
/// judge).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelDesign {
    pub inclusion: f64,
    pub rewards: (f64, f64),
}

/// The candidate's estimates on `rows`, labelled by `design`, with
/// intervals at `confidence`.
pub fn estimate_group(
    slice: &str,
    rows: &[&Logged],
    design: LabelDesign,
    confidence: f64,
) -> SliceEstimate {
    let LabelDesign {
        inclusion,
        rewards: (lowest, highest),
    } = design;
    let n = rows.len();
    let p_min = rows
        .iter()
        .map(|row| row.min_propensity)
        .fold(1.0, f64::min);
    let max_weight = 1.0 / (p_min * inclusion);
    let label_weight = |row: &Logged, matched: bool| -> f64 {
        match row.reward {
            Some(_) if matched => 1.0 / (row.propensity * inclusion),
            _ => 0.0,
        }
    };
    let reward = |row: &Logged| row.reward.unwrap_or(0.0);
    let ips_terms: Vec<f64> = rows
        .iter()
        .map(|row| label_weight(row, row.matched) * reward(row))
        .collect();
    let weights: Vec<f64> = rows
        .iter()
        .map(|row| label_weight(row, row.matched))
        .collect();
    let running_terms: Vec<f64> = rows
        .iter()
        .map(|row| label_weight(row, row.running_matched) * reward(row))
        .collect();
    let dr_terms: Vec<f64> = rows
        .iter()
        .map(|row| {
            row.model_quality + label_weight(row, row.matched) * (reward(row) - row.model_quality)
        })
        .collect();
    let differences: Vec<f64> = ips_terms
        .iter()
        .zip(&running_terms)
        .map(|(candidate, running)| candidate - running)
        .collect();
    // Each interval is of the terms' mean in their range, then of the
    // quantity in its own: a quality in [0, 1], a difference in [−1, 1].
    let interval = |values: &[f64], low: f64, high: f64, within: (f64, f64)| {
        let bounds = empirical_bernstein_interval(values, low, high, confidence);
        let clamp = |value: f64| value.clamp(within.0, within.1);
        Estimate {
            estimate: clamp(mean(values)),
            lower: bounds.map(|(lower, _)| clamp(lower)),
            upper: bounds.map(|(_, upper)| clamp(upper)),
        }
    };
    // A term is a weight in [0, W] times a reward in [lowest, highest]
    // (lowest ≤ 0 < 1 ≤ highest); a DR term adds the model's value, in
    // [0, 1], times one minus the weight.
    let (low, high) = (max_weight * lowest.min(0.0), max_weight * highest.max(1.0));
    let ips = interval(&ips_terms, low, high, (0.0, 1.0));
    let dr = interval(&dr_terms, 1.0 - max_weight + low, high, (0.0, 1.0));
    let snips = self_normalised(&ips_terms, &weights, (low, high, max_weight), confidence);

    let mean_cost = cost_estimates(rows);

    let escalated = rows.iter().filter(|row| row.escalates).count() as u64;
    let [escalated_low, escalated_high] =
        clopper_pearson_interval(escalated, n as u64, 1.0 - confidence);
    SliceEstimate {
        slice: slice.to_owned(),
        requests: n as u64,
        labelled: rows.iter().filter(|row| row.reward.is_some()).count() as u64,
        matched: rows.iter().filter(|row| row.matched).count() as u64,
        matched_labelled: rows
            .iter()
            .filter(|row| row.matched && row.reward.is_some())
            .count() as u64,
        max_weight,
        quality: Estimators { ips, snips, dr },
        mean_cost,
        escalation_rate: Estimate {
            estimate: escalated as f64 / n.max(1) as f64,
            lower: Some(escalated_low),
            upper: Some(escalated_high),
        },
        running_quality: interval(&running_terms, low, high, (0.0, 1.0)),
        quality_difference: interval(&differences, low - high, high - low, (-1.0, 1.0)),
    }
}

/// The candidate's mean cost per request: every request's cost is known,
/// so no label enters; matching requests are weighted by their propensity.
/// Point estimates only: a cost has no range known in advance.
fn cost_estimates(rows: &[&Logged]) -> Estimators {
    let cost_weight = |row: &Logged| {
        if row.matched {
            1.0 / row.propensity
        } else {
            0.0
        }
    };
    let terms: Vec<f64> = rows.iter().map(|row| cost_weight(row) * row.cost).collect();
    let weight_sum: f64 = rows.iter().map(|row| cost_weight(row)).sum();
    let doubly_robust: Vec<f64> = rows
        .iter()
        .map(|row| row.model_cost + cost_weight(row) * (row.cost - row.model_cost))
        .collect();
    let point = |estimate: f64| Estimate {
        estimate,
        lower: None,
        upper: None,
    };
    Estimators {
        ips: point(mean(&terms)),
        snips: point(if weight_sum > 0.0 {
            terms.iter().sum::<f64>() / weight_sum
        } else {
            0.0
        }),
        dr: point(mean(&doubly_robust)),
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// SNIPS: the weighted rewards over the weights. The terms lie in
/// [`low`, `high`] and the weights in [0, W]; the ratio of their means'
/// expectations is the quality (the weights' mean is 1), so their
/// intervals at half the error each bound it.
fn self_normalised(
    terms: &[f64],
    weights: &[f64],
    (low, high, max_weight): (f64, f64, f64),
    confidence: f64,
) -> Estimate {
    let weight_sum: f64 = weights.iter().sum();
    let estimate = if weight_sum > 0.0 {
        terms.iter().sum::<f64>() / weight_sum
    } else {
        0.0
    };
    let half = 1.0 - (1.0 - confidence) / 2.0;
    let numerator = empirical_bernstein_interval(terms, low, high, half);
    let denominator = empirical_bernstein_interval(weights, 0.0, max_weight, half);
    let (lower, upper) = match (numerator, denominator) {
        (Some((below, above)), Some((least, most))) => {
            // The smallest and largest ratio over the two intervals.
            let ratio = |value: f64, by: f64| if by > 0.0 { value / by } else { f64::NAN };
            let candidates = [
                ratio(below, most),
                ratio(below, least),
                ratio(above, most),
                ratio(above, least),
            ];
            let lower = if least > 0.0 {
                candidates.iter().copied().fold(f64::INFINITY, f64::min)
            } else {
                0.0
            };
            let upper = if least > 0.0 {
                candidates.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else {
                1.0
            };
            (Some(lower.clamp(0.0, 1.0)), Some(upper.clamp(0.0, 1.0)))
        }
        _ => (None, None),
    };
    Estimate {
        estimate: estimate.clamp(0.0, 1.0),
        lower,
        upper,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Random;

    /// A slice of `n` requests with scores uniform in [0, 1): the running
    /// policy sends scores at or above 0.5 to the large tier, the candidate
    /// those at or above 0.3; small answers well with probability 1 − score,
    /// large with 0.9; exploration `share` over the two tiers; every request
    /// labelled with probability `inclusion`.
    fn logged(n: usize, share: f64, inclusion: f64, random: &mut Random) -> Vec<Logged> {
        (0..n)
            .map(|_| {
                let score = random.unit();
                let running = usize::from(score >= 0.5);
                let candidate = usize::from(score >= 0.3);
                let explored = random.unit() < share;
                let logged = if explored {
                    usize::from(random.unit() < 0.5)
                } else {
                    running
                };
                let propensity = if logged == running {
                    1.0 - share + share / 2.0
                } else {
                    share / 2.0
                };
                let good = |tier: usize| if tier == 1 { 0.9 } else { 1.0 - score };
                let reward = (random.unit() < inclusion)
                    .then(|| f64::from(u8::from(random.unit() < good(logged))));
                Logged {
                    slice: "s".to_owned(),
                    matched: logged == candidate,
                    running_matched: logged == running,
                    propensity,
                    min_propensity: share / 2.0,
                    reward,
                    cost: if logged == 1 { 10.0 } else { 1.0 },
                    model_quality: 0.6,
                    model_cost: 5.0,
                    escalates: candidate == 1,
                }
            })
            .collect()
    }

    fn design(inclusion: f64) -> LabelDesign {
        LabelDesign {
            inclusion,
            rewards: (0.0, 1.0),
        }
    }

    /// The candidate's true quality: ∫₀^0.3 (1 − x) dx + 0.7 · 0.9; the
    /// running policy's: ∫₀^0.5 (1 − x) dx + 0.5 · 0.9.
    const CANDIDATE_QUALITY: f64 = 0.3 - 0.045 + 0.63;
    const RUNNING_QUALITY: f64 = 0.5 - 0.125 + 0.45;

    #[test]
    fn every_interval_covers_the_truth_at_least_at_its_confidence() {
        let mut random = Random::new(17);
        let trials = 300;
        let mut missed = [0; 4];
        for _ in 0..trials {
            let rows = logged(4_000, 0.3, 0.5, &mut random);
            let refs: Vec<&Logged> = rows.iter().collect();
            let found = estimate_group("s", &refs, design(0.5), 0.9);
            let covers = |estimate: &Estimate, truth: f64| {
                estimate.lower.unwrap() <= truth && truth <= estimate.upper.unwrap()
            };
            for (index, (estimate, truth)) in [
                (&found.quality.ips, CANDIDATE_QUALITY),
                (&found.quality.snips, CANDIDATE_QUALITY),
                (&found.quality.dr, CANDIDATE_QUALITY),
                (
                    &found.quality_difference,
                    CANDIDATE_QUALITY - RUNNING_QUALITY,
                ),
            ]
            .into_iter()
            .enumerate()
            {
                missed[index] += usize::from(!covers(estimate, truth));
            }
        }
        assert!(
            missed.iter().all(|&count| count <= trials / 10),
            "misses of ips, snips, dr, difference in {trials}: {missed:?}"
        );
    }

    #[test]
    fn the_estimates_center_on_the_truth_and_cost_is_weighted_too() {
        let mut random = Random::new(5);
        let rows = logged(200_000, 0.5, 1.0, &mut random);
        let refs: Vec<&Logged> = rows.iter().collect();
        let found = estimate_group("s", &refs, design(1.0), 0.95);
        for estimate in [found.quality.ips, found.quality.snips, found.quality.dr] {
            assert!(
                (estimate.estimate - CANDIDATE_QUALITY).abs() < 0.01,
                "{estimate:?} against {CANDIDATE_QUALITY}"
            );
        }
        assert!((found.running_quality.estimate - RUNNING_QUALITY).abs() < 0.01);
        // The candidate's cost: 1 below 0.3, 10 above.
        let cost = 0.3 + 0.7 * 10.0;
        for estimate in [
            found.mean_cost.ips,
            found.mean_cost.snips,
            found.mean_cost.dr,
        ] {
            assert!((estimate.estimate - cost).abs() < 0.1, "{estimate:?}");
        }
        assert!((found.escalation_rate.estimate - 0.7).abs() < 0.01);
        assert_eq!(found.max_weight, 4.0);
    }
}
