//! Two policies scored on the same rows: is the candidate worse than the
//! deployed baseline by more than a margin? The comparison is paired, so
//! only the discordant rows carry evidence: `b` rows the baseline got right
//! and the candidate wrong, `c` rows the other way round.
//!
//! **The test.** H0: the candidate's quality is at most `margin` below the
//! baseline's (p_b − p_c = p10 − p01 ≤ Δ); H1: it is more than `margin`
//! below. With Δ = 0 it is McNemar's exact test: given the m = b + c
//! discordant rows, b ~ Bin(m, ½) on the boundary, and the p-value is
//! P(Bin(m, ½) ≥ b). With Δ > 0 no split of the discordant rows is known
//! under the null (it depends on the discordance ψ = p10 + p01, which is
//! not), so the p-value is the exact unconditional one of Tango's score
//! statistic, its supremum over every ψ the null allows (`paired_score`):
//! at most δ of true nulls are rejected at every n and ψ, the case ψ = Δ (a
//! candidate that never wins a row) included.
//!
//! **Power.** A slice is *too small to tell* when the test would detect a
//! regression of Δ + max(Δ, 2 points) beyond the baseline less than 80% of
//! the time at the observed discordance (at least that regression's size),
//! computed exactly for the test's own rejection region. Then a p-value
//! above δ is no evidence that the candidate is fine.
//!
//! **Intervals.** The quality difference p_c − p_b gets Bonett and Price's
//! adjusted Wald interval for paired proportions (2012); the mean cost
//! difference gets a normal interval from the paired per-row differences.
//! Both are two-sided at 1 − δ.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use super::binomial::binomial_upper_tail;
use super::paired_score::{score_p_value, score_rejection_rate};

/// The outcomes of the same rows under the baseline and the candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Paired {
    pub n: u64,
    /// Rows the baseline served acceptably and the candidate did not.
    pub baseline_only: u64,
    /// Rows the candidate served acceptably and the baseline did not.
    pub candidate_only: u64,
}

impl Paired {
    pub fn add(&mut self, baseline_ok: bool, candidate_ok: bool) {
        self.n += 1;
        self.baseline_only += u64::from(baseline_ok && !candidate_ok);
        self.candidate_only += u64::from(candidate_ok && !baseline_ok);
    }

    fn discordant(&self) -> u64 {
        self.baseline_only + self.candidate_only
    }
}

/// What the data say about one slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse by more than the margin, with p < δ.
    Regressed,
    /// No evidence of a regression beyond the margin, with power to see one.
    NotWorse,
    /// No evidence either way: too few rows for the test to have power.
    TooSmallToTell,
}

impl Verdict {
    /// The verdict in words that fit the direction of the difference: a
    /// candidate the data show `better` ([`shows_better`]) is called so,
    /// whatever the test's power against a regression; one that lost
    /// nothing on these rows is not called untellable.
    pub fn reading(self, better: bool, difference: f64) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            _ if better => "better",
            Verdict::NotWorse => "not worse",
            Verdict::TooSmallToTell if difference >= 0.0 => {
                "no drop seen, too few rows to rule one out"
            }
            Verdict::TooSmallToTell => "not enough rows to tell",
        }
    }
}

/// Whether the data show the candidate better than the baseline: McNemar's
/// exact one-sided test of "no better" at level δ/2, the side of the
/// two-sided 1 − δ interval shown beside it. Given the discordant rows the
/// candidate's wins are at most Bin(m, ½) when it is no better, so one that
/// is no better is called better with probability at most δ/2, at any n.
pub fn shows_better(paired: Paired, delta: f64) -> bool {
    paired.candidate_only > 0
        && crate::stats::certifies(
            binomial_upper_tail(paired.discordant(), 0.5, paired.candidate_only),
            delta / 2.0,
        )
}

/// The test's result for one slice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedTest {
    pub p_value: f64,
    /// θ0: the share of discordant rows the baseline wins on the boundary
    /// of H0, at the discordance where the null is hardest (½ for McNemar).
    pub boundary_share: f64,
    /// The power at the detectable regression, in [0, 1].
    pub power: f64,
    pub verdict: Verdict,
    /// Whether the data show the candidate better ([`shows_better`]).
    pub better: bool,
    /// p_c − p_b and its interval.
    pub difference: f64,
    pub interval: (f64, f64),
}

/// The smallest regression beyond the margin the power is judged against.
pub fn detectable_regression(margin: f64) -> f64 {
    margin + margin.max(0.02)
}

/// McNemar's exact p-value: P(Bin(m, ½) ≥ b).
fn mcnemar_p_value(paired: Paired) -> f64 {
    let m = paired.discordant();
    if m == 0 {
        1.0
    } else {
        binomial_upper_tail(m, 0.5, paired.baseline_only)
    }
}

/// The power of McNemar's level-δ test on `n` rows against a regression
/// `difference` at discordance `discordance`.
fn mcnemar_power(n: u64, delta: f64, discordance: f64, difference: f64) -> f64 {
    let region: Vec<u64> = (0..=n)
        .map(|m| {
            // The smallest count whose tail under H0 is at most δ; the tail
            // falls as the count grows.
            let (mut low, mut high) = (0, m + 1);
            while low < high {
                let middle = low + (high - low) / 2;
                if crate::stats::certifies(binomial_upper_tail(m, 0.5, middle), delta) {
                    high = middle;
                } else {
                    low = middle + 1;
                }
            }
            low
        })
        .collect();
    super::paired_score::rejection_probability(&region, discordance, difference)
}

/// Tests H1 "the candidate is worse than the baseline by more than
/// `margin`" at level `delta`.
pub fn worse_by_more_than(paired: Paired, margin: f64, delta: f64) -> PairedTest {
    let n = paired.n.max(1);
    let observed = paired.discordant() as f64 / n as f64;
    let (p_value, boundary_share) = if margin <= 0.0 {
        (mcnemar_p_value(paired), 0.5)
    } else {
        let (p_value, hardest) =
            score_p_value(paired.baseline_only, paired.candidate_only, n, margin);
        (p_value, ((hardest + margin) / (2.0 * hardest)).min(1.0))
    };
    let regression = detectable_regression(margin);
    // Power at the observed discordance, but never below what the
    // detectable regression itself needs.
    let discordance = observed.max(regression).min(1.0);
    let power = if margin <= 0.0 {
        mcnemar_power(n, delta, discordance, regression)
    } else {
        score_rejection_rate(n, margin, delta, discordance, regression)
    };
    let verdict = if crate::stats::certifies(p_value, delta) {
        Verdict::Regressed
    } else if power >= 0.8 {
        Verdict::NotWorse
    } else {
        Verdict::TooSmallToTell
    };
    let (b, c) = (paired.baseline_only as f64, paired.candidate_only as f64);
    let difference = (c - b) / n as f64;
    PairedTest {
        p_value,
        boundary_share,
        power,
        verdict,
        better: shows_better(paired, delta),
        difference,
        interval: bonett_price(b, c, n as f64, delta),
    }
}

/// Bonett and Price's adjusted Wald interval for p_c − p_b.
fn bonett_price(b: f64, c: f64, n: f64, delta: f64) -> (f64, f64) {
    let z = normal_quantile(1.0 - delta / 2.0);
    let (p10, p01) = ((b + 1.0) / (n + 2.0), (c + 1.0) / (n + 2.0));
    let center = p01 - p10;
    let spread = z * ((p10 + p01 - center * center) / (n + 2.0)).sqrt();
    ((center - spread).max(-1.0), (center + spread).min(1.0))
}

/// The mean of paired per-row differences and its two-sided 1 − δ normal
/// interval; `None` without rows.
pub fn mean_difference_interval(differences: &[f64], delta: f64) -> Option<(f64, (f64, f64))> {
    if differences.is_empty() {
        return None;
    }
    let n = differences.len() as f64;
    let mean = differences.iter().sum::<f64>() / n;
    let variance = if differences.len() > 1 {
        differences
            .iter()
            .map(|difference| (difference - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0)
    } else {
        0.0
    };
    let spread = normal_quantile(1.0 - delta / 2.0) * (variance / n).sqrt();
    Some((mean, (mean - spread, mean + spread)))
}

fn normal_quantile(probability: f64) -> f64 {
    Normal::standard().inverse_cdf(probability)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paired(n: u64, baseline_only: u64, candidate_only: u64) -> Paired {
        Paired {
            n,
            baseline_only,
            candidate_only,
        }
    }

    #[test]
    fn the_verdict_reads_in_the_direction_of_the_difference() {
        assert_eq!(Verdict::TooSmallToTell.reading(true, 0.06), "better");
        assert_eq!(Verdict::NotWorse.reading(true, 0.06), "better");
        assert_eq!(Verdict::NotWorse.reading(false, 0.0), "not worse");
        assert_eq!(
            Verdict::TooSmallToTell.reading(false, 0.01),
            "no drop seen, too few rows to rule one out"
        );
        assert_eq!(
            Verdict::TooSmallToTell.reading(false, -0.02),
            "not enough rows to tell"
        );
        assert_eq!(Verdict::Regressed.reading(false, -0.05), "regressed");
    }

    /// The exact chance that `shows_better` calls a candidate better: the
    /// multinomial law of (baseline-only, candidate-only) rows summed over
    /// every count it accepts.
    fn chance_called_better(n: u64, baseline_only: f64, candidate_only: f64, delta: f64) -> f64 {
        let concordant = 1.0 - baseline_only - candidate_only;
        let logs: Vec<f64> = std::iter::once(0.0)
            .chain((1..=n).scan(0.0, |sum, i| {
                *sum += (i as f64).ln();
                Some(*sum)
            }))
            .collect();
        let log_factorial = |k: u64| logs[k as usize];
        let mut chance = 0.0;
        for b in 0..=n {
            for c in 0..=(n - b) {
                let paired = Paired {
                    n,
                    baseline_only: b,
                    candidate_only: c,
                };
                if !shows_better(paired, delta) {
                    continue;
                }
                let rest = n - b - c;
                let log_p =
                    log_factorial(n) - log_factorial(b) - log_factorial(c) - log_factorial(rest)
                        + b as f64 * baseline_only.ln()
                        + c as f64 * candidate_only.ln()
                        + if rest > 0 {
                            rest as f64 * concordant.ln()
                        } else {
                            0.0
                        };
                chance += log_p.exp();
            }
        }
        chance
    }

    #[test]
    fn a_candidate_no_better_is_called_better_at_most_half_delta_of_the_time() {
        // Exact truth, no sampling: equal candidates (the hardest case of
        // "no better") at every discordance from 1% to 98% of the rows.
        for delta in [0.05, 0.1] {
            for n in [10, 20, 30, 50, 100, 200] {
                let worst = (1..50)
                    .map(|step| {
                        let each = f64::from(step) / 100.0;
                        chance_called_better(n, each, each, delta)
                    })
                    .fold(0.0_f64, f64::max);
                eprintln!("delta {delta}, n {n}: called better at most {worst:.4}");
                assert!(worst <= delta / 2.0, "n {n}, delta {delta}: {worst}");
            }
        }
        // And it has power: 10% of rows won by the candidate, 2% lost.
        let power = chance_called_better(200, 0.02, 0.10, 0.05);
        eprintln!("an 8-point gain on 200 rows is called better with chance {power:.3}");
        assert!(power > 0.9, "{power}");
    }

    #[test]
    fn without_a_margin_it_is_mcnemars_exact_test() {
        // 9 of 10 discordant rows won by the baseline: 11 / 1024 in the tail.
        let test = worse_by_more_than(paired(1000, 9, 1), 0.0, 0.05);
        assert_eq!(test.boundary_share, 0.5);
        assert!((test.p_value - 11.0 / 1024.0).abs() < 1e-15);
        assert_eq!(test.verdict, Verdict::Regressed);
        assert!((test.difference + 0.008).abs() < 1e-15);
    }

    #[test]
    fn a_margin_wider_than_the_observed_loss_is_not_a_regression() {
        let test = worse_by_more_than(paired(1000, 5, 0), 0.01, 0.05);
        assert!(test.p_value > 0.5, "{test:?}");
        assert_ne!(test.verdict, Verdict::Regressed);
    }

    #[test]
    fn small_slices_are_too_small_to_tell_and_large_ones_are_not() {
        let small = worse_by_more_than(paired(20, 1, 1), 0.01, 0.05);
        assert_eq!(small.verdict, Verdict::TooSmallToTell);
        let large = worse_by_more_than(paired(5000, 60, 55), 0.01, 0.05);
        assert_eq!(large.verdict, Verdict::NotWorse, "{large:?}");
        assert!(large.interval.0 < large.difference && large.difference < large.interval.1);
    }

    #[test]
    fn the_tail_is_accurate_far_out() {
        // P(Bin(200, 0.5) >= 200) = 2^-200.
        let tail = binomial_upper_tail(200, 0.5, 200);
        assert!((tail / 0.5f64.powi(200) - 1.0).abs() < 1e-9);
        assert_eq!(binomial_upper_tail(10, 0.3, 0), 1.0);
        assert_eq!(binomial_upper_tail(10, 0.3, 11), 0.0);
    }
}
