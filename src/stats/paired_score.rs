//! The exact unconditional test of a paired regression beyond a margin:
//! H0 p10 − p01 ≤ Δ against H1 p10 − p01 > Δ, for Δ > 0, where p10 is the
//! share of rows only the baseline serves acceptably and p01 the share only
//! the candidate does.
//!
//! **The statistic** is Tango's score statistic (1998),
//! T = (b − c − nΔ) / √(n (2 q̃ + Δ − Δ²)), with q̃ the maximum-likelihood
//! p01 under p10 − p01 = Δ: its variance comes from the null, not from the
//! observed discordance, which is what made the conditional test of earlier
//! versions reject up to 41% of true nulls at δ = 0.05.
//!
//! **The p-value** is the largest probability of a statistic at least as
//! large over every discordance ψ = p10 + p01 the null allows,
//! sup over ψ in [Δ, 1] of P_ψ(T ≥ t), each probability exact: given m
//! discordant rows (M ~ Bin(n, ψ)), the statistic grows with b, so
//! T ≥ t is b ≥ k(m) and P_ψ(T ≥ t) = Σ P(M = m) P(Bin(m, θ) ≥ k(m)),
//! θ = (ψ + Δ) / 2ψ. The supremum is taken over a grid denser near ψ = Δ
//! (where a candidate that never wins a row sits, the hardest null), refined
//! around its largest value; discordances inside the null (p10 − p01 < Δ)
//! give smaller probabilities, so the boundary is enough. Both are checked
//! by enumeration in the tests.

use std::collections::HashMap;
use std::sync::Mutex;

use super::binomial::binomial_upper_tail;

/// Points of the first pass over the discordance.
const GRID: usize = 40;
/// Golden-section steps around the grid's largest probability.
const REFINE: usize = 16;
/// Binomial standard deviations of M kept on each side of its mean; the
/// mass beyond counts as rejected, so the probability never falls short.
const SPREAD: f64 = 12.0;

/// Tango's score statistic of `b` rows won by the baseline and `c` by the
/// candidate out of `n`, for the margin Δ.
pub fn score_statistic(b: u64, c: u64, n: u64, margin: f64) -> f64 {
    let (b, c, n) = (b as f64, c as f64, n as f64);
    let rest = n - b - c;
    let linear = b * (1.0 - margin) + c * (1.0 - 3.0 * margin) - 2.0 * rest * margin;
    let discriminant = linear * linear + 8.0 * n * c * margin * (1.0 - margin);
    let restricted_p01 = ((linear + discriminant.sqrt()) / (4.0 * n)).max(0.0);
    let variance = n * (2.0 * restricted_p01 + margin - margin * margin);
    let excess = b - c - n * margin;
    if variance > 0.0 {
        excess / variance.sqrt()
    } else if excess > 0.0 {
        f64::INFINITY
    } else if excess < 0.0 {
        f64::NEG_INFINITY
    } else {
        0.0
    }
}

/// For each m = b + c in 0..=n, the smallest b with T ≥ `at_least`
/// (m + 1 where none is).
fn rejection_region(n: u64, margin: f64, at_least: f64) -> Vec<u64> {
    // Floating point puts equal statistics a few ulps apart; ties reject.
    let at_least = at_least - 1e-12 * at_least.abs().max(1.0);
    (0..=n)
        .map(|m| {
            if score_statistic(m, 0, n, margin) < at_least {
                return m + 1;
            }
            let (mut low, mut high) = (0, m);
            while low < high {
                let middle = low + (high - low) / 2;
                if score_statistic(middle, m - middle, n, margin) >= at_least {
                    high = middle;
                } else {
                    low = middle + 1;
                }
            }
            low
        })
        .collect()
}

/// P(T ≥ t) where `region` is T ≥ t, at discordance `discordance` and a
/// true p10 − p01 of `difference`.
pub(super) fn rejection_probability(region: &[u64], discordance: f64, difference: f64) -> f64 {
    let n = (region.len() - 1) as u64;
    let baseline_share = if discordance > 0.0 {
        ((discordance + difference) / (2.0 * discordance)).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let rejects = |m: u64| binomial_upper_tail(m, baseline_share, region[m as usize]);
    if discordance >= 1.0 {
        return rejects(n);
    }
    if discordance <= 0.0 {
        return rejects(0);
    }
    let mean = n as f64 * discordance;
    let spread = SPREAD * (mean * (1.0 - discordance)).sqrt() + SPREAD;
    let low = (mean - spread).floor().max(0.0) as u64;
    let high = ((mean + spread).ceil() as u64).min(n);
    // P(M = m), walked up from `low`.
    let odds = discordance / (1.0 - discordance);
    let mut mass = ln_binomial_pmf(n, low, discordance).exp();
    let mut probability = 0.0;
    for m in low..=high {
        if region[m as usize] <= m {
            probability += mass * rejects(m);
        }
        mass *= (n - m) as f64 / (m + 1) as f64 * odds;
    }
    let outside = if low > 0 {
        1.0 - binomial_upper_tail(n, discordance, low)
    } else {
        0.0
    } + if high < n {
        binomial_upper_tail(n, discordance, high + 1)
    } else {
        0.0
    };
    (probability + outside).min(1.0)
}

fn ln_binomial_pmf(n: u64, k: u64, p: f64) -> f64 {
    use statrs::function::gamma::ln_gamma;
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
        + k as f64 * p.ln()
        + (n - k) as f64 * (1.0 - p).ln()
}

/// The largest P(T ≥ t) over the null's boundary, and the discordance at
/// which it is reached.
fn largest_over_the_null(region: &[u64], margin: f64) -> (f64, f64) {
    let at = |step: f64| margin + (1.0 - margin) * step * step;
    let probability = |step: f64| rejection_probability(region, at(step), margin);
    let steps: Vec<f64> = (0..=GRID).map(|index| index as f64 / GRID as f64).collect();
    let values: Vec<f64> = steps.iter().map(|&step| probability(step)).collect();
    let best = (0..values.len())
        .max_by(|&a, &b| values[a].total_cmp(&values[b]))
        .expect("a grid");
    let (mut low, mut high) = (steps[best.saturating_sub(1)], steps[(best + 1).min(GRID)]);
    let (mut best_step, mut best_value) = (steps[best], values[best]);
    let golden = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..REFINE {
        let (left, right) = (high - golden * (high - low), low + golden * (high - low));
        let (left_value, right_value) = (probability(left), probability(right));
        for (step, value) in [(left, left_value), (right, right_value)] {
            if value > best_value {
                (best_step, best_value) = (step, value);
            }
        }
        if left_value >= right_value {
            high = right;
        } else {
            low = left;
        }
    }
    (best_value, at(best_step))
}

/// The exact unconditional p-value of `b` and `c` out of `n` for the margin
/// Δ > 0, and the discordance where the null is hardest.
pub fn score_p_value(b: u64, c: u64, n: u64, margin: f64) -> (f64, f64) {
    let region = rejection_region(n, margin, score_statistic(b, c, n, margin));
    largest_over_the_null(&region, margin)
}

/// The smallest statistic the level-δ test rejects at on `n` rows (to 1e-4),
/// or `None` where no outcome of `n` rows would reject. Depends on `n`, Δ
/// and δ alone, so it is kept for the slices and candidates that share them.
fn critical_statistic(n: u64, margin: f64, delta: f64) -> Option<f64> {
    type Key = (u64, u64, u64);
    static KNOWN: Mutex<Option<HashMap<Key, Option<f64>>>> = Mutex::new(None);
    let key = (n, margin.to_bits(), delta.to_bits());
    if let Some(known) = KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return *known;
    }
    let size =
        |at_least: f64| largest_over_the_null(&rejection_region(n, margin, at_least), margin).0;
    let most = score_statistic(n, 0, n, margin);
    let critical = if size(most) > delta {
        None
    } else {
        let (mut low, mut high) = (f64::min(-1.0, most), most.min(50.0));
        if size(high) > delta {
            high = most;
        }
        while high - low > 1e-4 {
            let middle = (low + high) / 2.0;
            if size(middle) <= delta {
                high = middle;
            } else {
                low = middle;
            }
        }
        Some(high)
    };
    KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(key, critical);
    critical
}

/// The probability that the level-δ test on `n` rows rejects when the true
/// p10 − p01 is `difference` at discordance `discordance`: its power where
/// the difference exceeds Δ, its size where it does not.
pub fn score_rejection_rate(
    n: u64,
    margin: f64,
    delta: f64,
    discordance: f64,
    difference: f64,
) -> f64 {
    match critical_statistic(n, margin, delta) {
        Some(critical) => rejection_probability(
            &rejection_region(n, margin, critical),
            discordance,
            difference,
        ),
        None => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P(T ≥ t) by brute force over every (b, c): independent of the walk,
    /// the region and the truncation.
    fn brute_force(n: u64, margin: f64, at_least: f64, discordance: f64, difference: f64) -> f64 {
        use statrs::function::gamma::ln_gamma;
        let (p10, p01) = (
            (discordance + difference) / 2.0,
            (discordance - difference) / 2.0,
        );
        let p00 = 1.0 - p10 - p01;
        let mut total = 0.0;
        for b in 0..=n {
            for c in 0..=(n - b) {
                if score_statistic(b, c, n, margin) < at_least - 1e-12 * at_least.abs().max(1.0) {
                    continue;
                }
                let r = n - b - c;
                let term = |count: u64, p: f64| {
                    if count == 0 {
                        0.0
                    } else {
                        count as f64 * p.ln()
                    }
                };
                let ln = ln_gamma(n as f64 + 1.0)
                    - ln_gamma(b as f64 + 1.0)
                    - ln_gamma(c as f64 + 1.0)
                    - ln_gamma(r as f64 + 1.0)
                    + term(b, p10)
                    + term(c, p01)
                    + term(r, p00);
                total += ln.exp();
            }
        }
        total
    }

    #[test]
    fn the_statistic_grows_with_the_baselines_wins_at_every_discordant_count() {
        for n in [7, 20, 57, 200] {
            for margin in [0.005, 0.01, 0.03, 0.1, 0.3] {
                for m in 0..=n {
                    for b in 1..=m {
                        let (before, now) = (
                            score_statistic(b - 1, m - b + 1, n, margin),
                            score_statistic(b, m - b, n, margin),
                        );
                        assert!(
                            now >= before,
                            "n {n}, Δ {margin}, m {m}, b {b}: {before} > {now}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_rejection_probability_is_the_brute_force_sum() {
        for (n, margin, at_least) in [(30, 0.01, 1.2), (60, 0.03, 1.645), (120, 0.1, 0.5)] {
            let region = rejection_region(n, margin, at_least);
            for discordance in [margin, margin + 0.01, 0.2, 0.5, 0.9] {
                for difference in [margin, margin / 2.0, -0.05f64.min(discordance)] {
                    if difference.abs() > discordance {
                        continue;
                    }
                    let walked = rejection_probability(&region, discordance, difference);
                    let brute = brute_force(n, margin, at_least, discordance, difference);
                    assert!(
                        (walked - brute).abs() < 1e-9,
                        "n {n}, Δ {margin}, ψ {discordance}, d {difference}: {walked} against {brute}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_boundary_is_the_hardest_part_of_the_null() {
        for (n, margin) in [(40, 0.03), (100, 0.01)] {
            let critical = critical_statistic(n, margin, 0.05).unwrap();
            let region = rejection_region(n, margin, critical);
            for discordance in [0.05, 0.1, 0.3, 0.7] {
                let boundary = rejection_probability(&region, discordance, margin);
                for inside in [margin - 0.01, 0.0, -0.02] {
                    let probability = rejection_probability(&region, discordance, inside);
                    assert!(
                        probability <= boundary + 1e-12,
                        "n {n}, ψ {discordance}: {probability} inside above {boundary} on the boundary"
                    );
                }
            }
        }
    }

    #[test]
    fn a_candidate_that_never_wins_is_held_to_the_level_exactly() {
        // ψ = Δ: every discordant row is the baseline's, b ~ Bin(n, Δ).
        let (n, margin) = (1000, 0.03);
        let rate = score_rejection_rate(n, margin, 0.05, margin, margin);
        assert!(rate <= 0.05, "{rate}");
        assert!(rate > 0.03, "needlessly weak: {rate}");
    }
}

#[cfg(test)]
mod size {
    //! The size of the gate's regression test, by exact enumeration of its
    //! rejection region, and the conditional test it replaced.

    use super::*;

    const DELTA: f64 = 0.05;

    /// The conditional test of earlier versions: b ≥ k(m) where
    /// P(Bin(m, θ0) ≥ k) ≤ δ, θ0 = (ψ̂ + Δ) / 2ψ̂ at ψ̂ = m / n.
    fn conditional_region(n: u64, margin: f64) -> Vec<u64> {
        (0..=n)
            .map(|m| {
                let observed = m as f64 / n as f64;
                if observed <= margin {
                    return m + 1;
                }
                let theta = ((observed + margin) / (2.0 * observed)).min(1.0);
                (0..=m)
                    .find(|&k| binomial_upper_tail(m, theta, k) <= DELTA)
                    .unwrap_or(m + 1)
            })
            .collect()
    }

    /// The largest rejection rate over a grid of discordances finer than
    /// (and apart from) the test's own, ψ = Δ included.
    fn worst_size(region: &[u64], margin: f64) -> (f64, f64) {
        (0..=150)
            .map(|index| {
                let step = f64::from(index) / 150.0;
                margin + (1.0 - margin) * step.powf(1.7)
            })
            .map(|discordance| {
                (
                    rejection_probability(region, discordance, margin),
                    discordance,
                )
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .expect("a grid")
    }

    #[test]
    fn the_conditional_test_it_replaced_had_the_size_the_issue_measured() {
        // Issue 25's table: n 1000, Δ 0.03, worst ψ: 0.154.
        let (size, at) = worst_size(&conditional_region(1000, 0.03), 0.03);
        assert!((size - 0.154).abs() < 0.002, "{size} at ψ {at}");
        assert!((at - 0.03).abs() < 0.005, "worst at ψ {at}");
    }

    #[test]
    fn the_gates_test_rejects_at_most_delta_of_true_nulls_at_every_n_and_discordance() {
        for n in [20, 50, 200, 1000, 5000] {
            for margin in [0.01, 0.03, 0.1] {
                let Some(critical) = critical_statistic(n, margin, DELTA) else {
                    continue;
                };
                let region = rejection_region(n, margin, critical);
                let (size, at) = worst_size(&region, margin);
                assert!(size <= DELTA, "n {n}, Δ {margin}: size {size} at ψ {at}");
                // The region is the p-value's: just inside it rejects, just
                // outside it does not.
                for m in [n / 10, n / 4, n / 2] {
                    let k = region[m as usize];
                    if k == 0 || k > m {
                        continue;
                    }
                    let inside = score_p_value(k, m - k, n, margin).0;
                    let outside = score_p_value(k - 1, m - k + 1, n, margin).0;
                    assert!(
                        inside <= DELTA + 1e-9 && outside > DELTA - 1e-9,
                        "n {n}, Δ {margin}, m {m}: {inside}, {outside}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_power_figures_in_docs_gate_md_are_the_tests_own() {
        let page = include_str!("../../docs/gate.md");
        let table = page
            .split("<!-- power table: n, Δ, ψ 0.05, ψ 0.1, ψ 0.2 -->")
            .nth(1)
            .expect("docs/gate.md has the power table");
        let rows: Vec<Vec<f64>> = table
            .lines()
            .skip(3)
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                line.split('|')
                    .filter(|cell| !cell.trim().is_empty())
                    .map(|cell| cell.trim().parse().unwrap())
                    .collect()
            })
            .collect();
        assert!(rows.len() >= 6, "{rows:?}");
        for row in rows {
            let (n, margin) = (row[0] as u64, row[1]);
            for (discordance, documented) in [0.05, 0.1, 0.2].into_iter().zip(&row[2..]) {
                let power = score_rejection_rate(n, margin, DELTA, discordance, margin + 0.02);
                assert!(
                    (power - documented).abs() < 0.0005,
                    "n {n}, Δ {margin}, ψ {discordance}: power {power:.3}, docs/gate.md says {documented}"
                );
            }
        }
    }
}
