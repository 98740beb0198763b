//! The off-policy estimators over a group of logged requests (a slice, or
//! all): inverse-propensity (IPS), self-normalised (SNIPS) and doubly
//! robust (DR) estimates of a candidate's quality and cost, the running
//! policy's quality and the paired difference, each quality with a betting
//! confidence sequence (valid at every look, the default) or an
//! empirical-Bernstein interval (one look).
//!
//! Why the intervals hold: the requests are independent draws of the
//! traffic, serve's exploration draws are independent of everything else,
//! and the label draw is Poisson sampling (each request on its own, with a
//! known probability `q`). Each request's IPS term `[labelled]·[matched]·r /
//! (p·q)` is then independent of the others, has the candidate's quality as
//! its mean exactly (every route the candidate needs has a propensity above
//! 0), and lies in [0, W] with `W = 1 / (p_min·q)`, `p_min` the smallest
//! propensity the signed config can give a route, fixed by the design
//! before the first request is read: the conditions of both bounds (the
//! sequence also needs the terms in the order the requests came, which
//! serve's records keep). The DR term is the direct model's value plus the
//! same weight times a residual in [−1, 1], so it lies in [1 − W, W]; SNIPS
//! is the ratio of two such means, bounded by the ratio of their bounds at
//! half the error each.

use crate::schema::{Estimate, Estimators, SliceEstimate};
use crate::stats::{BettingSequence, clopper_pearson_interval, empirical_bernstein_from_moments};

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

/// Which interval every estimate carries: a betting confidence sequence,
/// valid at every look at once (the default: records grow and the figure
/// is read again), or the empirical-Bernstein interval, valid for one look
/// at a sample size fixed in advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bound {
    #[default]
    Sequence,
    Fixed,
}

impl Bound {
    /// The name documents carry and `--bound` takes.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Sequence => "betting_sequence",
            Bound::Fixed => "empirical_bernstein",
        }
    }

    /// How every figure says which it is.
    pub fn holds(self) -> &'static str {
        match self {
            Bound::Sequence => "holds at every look",
            Bound::Fixed => "holds for one look",
        }
    }
}

impl std::str::FromStr for Bound {
    type Err = String;

    fn from_str(given: &str) -> Result<Bound, String> {
        [Bound::Sequence, Bound::Fixed]
            .into_iter()
            .find(|bound| bound.name() == given || bound.name().replace('_', "-") == given)
            .ok_or_else(|| {
                format!("{given:?} is not a bound: betting-sequence (every look) or empirical-bernstein (one look)")
            })
    }
}

/// The running mean and variance of one series of terms (Welford's update).
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
}

/// One series of terms in a range known before the first: its moments, and
/// under [`Bound::Sequence`] the sequence of them in order.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    moments: Moments,
    range: (f64, f64),
    confidence: f64,
    sequence: Option<BettingSequence>,
}

impl Series {
    fn new((low, high): (f64, f64), confidence: f64, bound: Bound) -> Series {
        Series {
            moments: Moments::default(),
            range: (low, high),
            confidence,
            sequence: (bound == Bound::Sequence)
                .then(|| BettingSequence::new(low, high, confidence)),
        }
    }

    fn push(&mut self, value: f64) {
        self.moments.push(value);
        if let Some(sequence) = &mut self.sequence {
            sequence.push(value);
        }
    }

    /// The mean with its interval, clamped to the quantity's own range
    /// `within`.
    fn interval(&self, within: (f64, f64)) -> Estimate {
        let bounds = match &self.sequence {
            Some(sequence) => sequence.interval(within),
            None => {
                let Moments { n, mean, m2 } = self.moments;
                let variance = if n > 1 { m2 / (n - 1) as f64 } else { 0.0 };
                let (low, high) = self.range;
                empirical_bernstein_from_moments(n, mean, variance, low, high, self.confidence)
            }
        };
        let clamp = |value: f64| value.clamp(within.0, within.1);
        Estimate {
            estimate: clamp(self.moments.mean),
            lower: bounds.map(|(lower, _)| clamp(lower)),
            upper: bounds.map(|(_, upper)| clamp(upper)),
        }
    }
}

/// The design a group's terms are bounded by, fixed before its first
/// request: the smallest propensity the signed config can give a route of
/// the group, the label draw, and the interval asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Design {
    pub min_propensity: f64,
    pub labels: LabelDesign,
    pub bound: Bound,
    pub confidence: f64,
}

impl Design {
    /// `W = 1 / (p_min·q)`: the largest weight a request can carry.
    fn max_weight(&self) -> f64 {
        1.0 / (self.min_propensity * self.labels.inclusion)
    }

    /// The range of an IPS term: a weight in [0, W] times a reward in
    /// [lowest, highest] (lowest ≤ 0 < 1 ≤ highest).
    fn term_range(&self) -> (f64, f64) {
        let (lowest, highest) = self.labels.rewards;
        let max_weight = self.max_weight();
        (max_weight * lowest.min(0.0), max_weight * highest.max(1.0))
    }
}

/// What the estimators keep of a group's requests (a slice, or all).
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    design: Design,
    requests: u64,
    labelled: u64,
    matched: u64,
    matched_labelled: u64,
    escalated: u64,
    ips: Series,
    /// SNIPS's numerator and denominator, each at half the error.
    ips_half: Series,
    weights_half: Series,
    running: Series,
    doubly_robust: Series,
    difference: Series,
    escalation: Series,
    cost: Moments,
    cost_weights: Moments,
    cost_doubly_robust: Moments,
}

impl Tally {
    pub fn new(design: Design) -> Tally {
        let (low, high) = design.term_range();
        let (confidence, bound) = (design.confidence, design.bound);
        let half = 1.0 - (1.0 - confidence) / 2.0;
        let series = |range: (f64, f64), confidence: f64| Series::new(range, confidence, bound);
        Tally {
            design,
            requests: 0,
            labelled: 0,
            matched: 0,
            matched_labelled: 0,
            escalated: 0,
            ips: series((low, high), confidence),
            ips_half: series((low, high), half),
            weights_half: series((0.0, design.max_weight()), half),
            running: series((low, high), confidence),
            // A DR term adds the model's value, in [0, 1], times one minus
            // the weight.
            doubly_robust: series((1.0 - design.max_weight() + low, high), confidence),
            difference: series((low - high, high - low), confidence),
            escalation: series((0.0, 1.0), confidence),
            cost: Moments::default(),
            cost_weights: Moments::default(),
            cost_doubly_robust: Moments::default(),
        }
    }

    /// Counts one request, its label drawn with the design's probability.
    pub fn add(&mut self, row: &Logged) {
        let inclusion = self.design.labels.inclusion;
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
        self.ips.push(weight * reward);
        self.ips_half.push(weight * reward);
        self.weights_half.push(weight);
        self.running.push(running_weight * reward);
        self.doubly_robust
            .push(row.model_quality + weight * (reward - row.model_quality));
        self.difference
            .push(weight * reward - running_weight * reward);
        self.escalation.push(f64::from(u8::from(row.escalates)));
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

    /// The group's estimates, with intervals at the design's confidence.
    pub fn estimate(&self, slice: &str) -> SliceEstimate {
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
        let escalation_rate = match self.design.bound {
            Bound::Sequence => self.escalation.interval((0.0, 1.0)),
            Bound::Fixed => {
                let [lower, upper] = clopper_pearson_interval(
                    self.escalated,
                    self.requests,
                    1.0 - self.design.confidence,
                );
                Estimate {
                    estimate: ratio(self.escalated as f64, self.requests as f64),
                    lower: Some(lower),
                    upper: Some(upper),
                }
            }
        };
        SliceEstimate {
            slice: slice.to_owned(),
            requests: self.requests,
            labelled: self.labelled,
            matched: self.matched,
            matched_labelled: self.matched_labelled,
            max_weight: self.design.max_weight(),
            quality: Estimators {
                ips: self.ips.interval(quality),
                snips: self.self_normalised(),
                dr: self.doubly_robust.interval(quality),
            },
            // Point estimates only: a cost has no range known in advance.
            mean_cost: Estimators {
                ips: point(self.cost.mean),
                snips: point(ratio(self.cost.sum(), self.cost_weights.sum())),
                dr: point(self.cost_doubly_robust.mean),
            },
            escalation_rate,
            running_quality: self.running.interval(quality),
            quality_difference: self.difference.interval((-1.0, 1.0)),
        }
    }

    /// SNIPS: the weighted rewards over the weights. The ratio of their
    /// means' expectations is the quality (the weights' mean is 1), so
    /// their intervals at half the error each bound it.
    fn self_normalised(&self) -> Estimate {
        let weights = self.weights_half.moments.sum();
        let estimate = if weights > 0.0 {
            self.ips_half.moments.sum() / weights
        } else {
            0.0
        };
        let numerator = self.ips_half.interval(self.ips_half.range);
        let denominator = self.weights_half.interval(self.weights_half.range);
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
#[path = "looks.rs"]
mod looks;

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

    fn tally(rows: &[Logged], inclusion: f64, bound: Bound, confidence: f64) -> Tally {
        let mut tally = Tally::new(Design {
            min_propensity: rows[0].min_propensity,
            labels: LabelDesign {
                inclusion,
                rewards: (0.0, 1.0),
            },
            bound,
            confidence,
        });
        for row in rows {
            tally.add(row);
        }
        tally
    }

    /// The candidate's true quality: ∫₀^0.3 (1 − x) dx + 0.7 · 0.9; the
    /// running policy's: ∫₀^0.5 (1 − x) dx + 0.5 · 0.9.
    const CANDIDATE_QUALITY: f64 = 0.3 - 0.045 + 0.63;
    const RUNNING_QUALITY: f64 = 0.5 - 0.125 + 0.45;

    #[test]
    fn every_interval_covers_the_truth_at_least_at_its_confidence() {
        for bound in [Bound::Sequence, Bound::Fixed] {
            every_interval_covers(bound);
        }
    }

    fn every_interval_covers(bound: Bound) {
        let mut random = Random::new(17);
        let trials = 300;
        let mut missed = [0; 4];
        for _ in 0..trials {
            let rows = logged(4_000, 0.3, 0.5, &mut random);
            let found = tally(&rows, 0.5, bound, 0.9).estimate("s");
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
            "{bound:?}: misses of ips, snips, dr, difference in {trials}: {missed:?}"
        );
    }

    #[test]
    fn the_estimates_center_on_the_truth_and_cost_is_weighted_too() {
        let mut random = Random::new(5);
        let rows = logged(200_000, 0.5, 1.0, &mut random);
        let found = tally(&rows, 1.0, Bound::Sequence, 0.95).estimate("s");
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
