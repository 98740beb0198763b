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
use crate::stats::{clopper_pearson_interval, empirical_bernstein_from_moments};

/// One request the signed config decided, as the estimators read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
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

/// The running mean and variance of one series of terms (Welford's update),
/// so a group of any size is held in a few numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Moments {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Moments {
    fn push(&mut self, value: f64) {
        self.n += 1;
        let delta = value - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (value - self.mean);
    }

    fn sum(&self) -> f64 {
        self.mean * self.n as f64
    }

    /// The interval of the mean of terms in [`low`, `high`], at
    /// `confidence`, then clamped to the quantity's own range `within`.
    fn interval(&self, low: f64, high: f64, within: (f64, f64), confidence: f64) -> Estimate {
        let variance = if self.n > 1 {
            self.m2 / (self.n - 1) as f64
        } else {
            0.0
        };
        let bounds =
            empirical_bernstein_from_moments(self.n, self.mean, variance, low, high, confidence);
        let clamp = |value: f64| value.clamp(within.0, within.1);
        Estimate {
            estimate: clamp(self.mean),
            lower: bounds.map(|(lower, _)| clamp(lower)),
            upper: bounds.map(|(_, upper)| clamp(upper)),
        }
    }
}

/// What the estimators keep of a group's requests (a slice, or all), in
/// memory that does not grow with them.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    requests: u64,
    labelled: u64,
    matched: u64,
    matched_labelled: u64,
    escalated: u64,
    /// The smallest propensity any route of a request could have.
    min_propensity: f64,
    ips: Moments,
    weights: Moments,
    running: Moments,
    doubly_robust: Moments,
    difference: Moments,
    cost: Moments,
    cost_weights: Moments,
    cost_doubly_robust: Moments,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            requests: 0,
            labelled: 0,
            matched: 0,
            matched_labelled: 0,
            escalated: 0,
            min_propensity: 1.0,
            ips: Moments::default(),
            weights: Moments::default(),
            running: Moments::default(),
            doubly_robust: Moments::default(),
            difference: Moments::default(),
            cost: Moments::default(),
            cost_weights: Moments::default(),
            cost_doubly_robust: Moments::default(),
        }
    }
}

impl Tally {
    /// Counts one request, its label drawn with probability `inclusion`.
    pub fn add(&mut self, row: &Logged, inclusion: f64) {
        let label_weight = |matched: bool| match row.reward {
            Some(_) if matched => 1.0 / (row.propensity * inclusion),
            _ => 0.0,
        };
        let reward = row.reward.unwrap_or(0.0);
        let (weight, running_weight) =
            (label_weight(row.matched), label_weight(row.running_matched));
        self.requests += 1;
        self.labelled += u64::from(row.reward.is_some());
        self.matched += u64::from(row.matched);
        self.matched_labelled += u64::from(row.matched && row.reward.is_some());
        self.escalated += u64::from(row.escalates);
        self.min_propensity = self.min_propensity.min(row.min_propensity);
        self.ips.push(weight * reward);
        self.weights.push(weight);
        self.running.push(running_weight * reward);
        self.doubly_robust
            .push(row.model_quality + weight * (reward - row.model_quality));
        self.difference
            .push(weight * reward - running_weight * reward);
        // Every request's cost is known: no label enters.
        let cost_weight = if row.matched {
            1.0 / row.propensity
        } else {
            0.0
        };
        self.cost.push(cost_weight * row.cost);
        self.cost_weights.push(cost_weight);
        self.cost_doubly_robust
            .push(row.model_cost + cost_weight * (row.cost - row.model_cost));
    }

    /// The group's estimates, with intervals at `confidence`.
    pub fn estimate(&self, slice: &str, design: LabelDesign, confidence: f64) -> SliceEstimate {
        let (lowest, highest) = design.rewards;
        let max_weight = 1.0 / (self.min_propensity * design.inclusion);
        // A term is a weight in [0, W] times a reward in [lowest, highest]
        // (lowest ≤ 0 < 1 ≤ highest); a DR term adds the model's value, in
        // [0, 1], times one minus the weight.
        let (low, high) = (max_weight * lowest.min(0.0), max_weight * highest.max(1.0));
        let quality = (0.0, 1.0);
        let point = |estimate: f64| Estimate {
            estimate,
            lower: None,
            upper: None,
        };
        let ratio = |numerator: f64, denominator: f64| {
            if denominator > 0.0 {
                numerator / denominator
            } else {
                0.0
            }
        };
        let [escalated_low, escalated_high] =
            clopper_pearson_interval(self.escalated, self.requests, 1.0 - confidence);
        SliceEstimate {
            slice: slice.to_owned(),
            requests: self.requests,
            labelled: self.labelled,
            matched: self.matched,
            matched_labelled: self.matched_labelled,
            max_weight,
            quality: Estimators {
                ips: self.ips.interval(low, high, quality, confidence),
                snips: self.self_normalised((low, high, max_weight), confidence),
                dr: self
                    .doubly_robust
                    .interval(1.0 - max_weight + low, high, quality, confidence),
            },
            // Point estimates only: a cost has no range known in advance.
            mean_cost: Estimators {
                ips: point(self.cost.mean),
                snips: point(ratio(self.cost.sum(), self.cost_weights.sum())),
                dr: point(self.cost_doubly_robust.mean),
            },
            escalation_rate: Estimate {
                estimate: ratio(self.escalated as f64, self.requests as f64),
                lower: Some(escalated_low),
                upper: Some(escalated_high),
            },
            running_quality: self.running.interval(low, high, quality, confidence),
            quality_difference: self.difference.interval(
                low - high,
                high - low,
                (-1.0, 1.0),
                confidence,
            ),
        }
    }

    /// SNIPS: the weighted rewards over the weights. The terms lie in
    /// [`low`, `high`] and the weights in [0, W]; the ratio of their means'
    /// expectations is the quality (the weights' mean is 1), so their
    /// intervals at half the error each bound it.
    fn self_normalised(
        &self,
        (low, high, max_weight): (f64, f64, f64),
        confidence: f64,
    ) -> Estimate {
        let estimate = if self.weights.sum() > 0.0 {
            self.ips.sum() / self.weights.sum()
        } else {
            0.0
        };
        let half = 1.0 - (1.0 - confidence) / 2.0;
        let numerator = self.ips.interval(low, high, (low, high), half);
        let denominator = self
            .weights
            .interval(0.0, max_weight, (0.0, max_weight), half);
        let (lower, upper) = match (numerator, denominator) {
            (
                Estimate {
                    lower: Some(below),
                    upper: Some(above),
                    ..
                },
                Estimate {
                    lower: Some(least),
                    upper: Some(most),
                    ..
                },
            ) if least > 0.0 => {
                // The smallest and largest ratio over the two intervals.
                let ratios = [below / most, below / least, above / most, above / least];
                (
                    ratios.iter().copied().fold(f64::INFINITY, f64::min),
                    ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                )
            }
            (Estimate { lower: Some(_), .. }, Estimate { lower: Some(_), .. }) => (0.0, 1.0),
            _ => {
                return Estimate {
                    estimate: estimate.clamp(0.0, 1.0),
                    lower: None,
                    upper: None,
                };
            }
        };
        Estimate {
            estimate: estimate.clamp(0.0, 1.0),
            lower: Some(lower.clamp(0.0, 1.0)),
            upper: Some(upper.clamp(0.0, 1.0)),
        }
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

    fn tally(rows: &[Logged], inclusion: f64) -> Tally {
        let mut tally = Tally::default();
        for row in rows {
            tally.add(row, inclusion);
        }
        tally
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
            let found = tally(&rows, 0.5).estimate("s", design(0.5), 0.9);
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
        let found = tally(&rows, 1.0).estimate("s", design(1.0), 0.95);
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
