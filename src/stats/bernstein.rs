//! The empirical-Bernstein interval for the mean of independent values in a
//! known range (Maurer and Pontil, 2009, Theorem 4): with probability at
//! least 1 − δ, the mean is at most `mean + sqrt(2·V·ln(2/δ)/n) +
//! 7·ln(2/δ)/(3(n − 1))` for values in [0, 1], V the unbiased sample
//! variance; the lower side is the same theorem applied to 1 − value. It
//! needs nothing but independence and the range, which is what an
//! inverse-propensity weighted mean has: each term is bounded by the largest
//! weight the design can give, and the terms of independent requests are
//! independent. Its width adapts to the variance, unlike Hoeffding's.

/// The interval holding the mean of `values` (each in [`low`, `high`]) with
/// probability at least `confidence`, each side at half the error; `None`
/// with fewer than two values.
pub fn empirical_bernstein_interval(
    values: &[f64],
    low: f64,
    high: f64,
    confidence: f64,
) -> Option<(f64, f64)> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance = values
        .iter()
        .map(|value| (value - mean).powi(2))
        .sum::<f64>()
        / (n - 1) as f64;
    empirical_bernstein_from_moments(n as u64, mean, variance, low, high, confidence)
}

/// [`empirical_bernstein_interval`] from `n` values' mean and unbiased
/// variance, for a caller that keeps running moments rather than the
/// values.
pub fn empirical_bernstein_from_moments(
    n: u64,
    mean: f64,
    variance: f64,
    low: f64,
    high: f64,
    confidence: f64,
) -> Option<(f64, f64)> {
    if n < 2 || high.partial_cmp(&low) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    let width = high - low;
    let mean = (mean - low) / width;
    let variance = variance / (width * width);
    // Each side errs with δ/2; each side's theorem splits its error in two.
    let log_term = (4.0 / (1.0 - confidence)).ln();
    let margin =
        (2.0 * variance * log_term / n as f64).sqrt() + 7.0 * log_term / (3.0 * (n - 1) as f64);
    let lower = (mean - margin).max(0.0);
    let upper = (mean + margin).min(1.0);
    Some((low + lower * width, low + upper * width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Random;

    #[test]
    fn the_interval_covers_the_mean_at_least_at_its_confidence() {
        // Heavy-tailed weighted terms, as inverse-propensity weights make:
        // 0 mostly, 20 with probability 0.04 (mean 0.8, range [0, 20]).
        let mut random = Random::new(3);
        let trials = 2_000;
        let mut missed = 0;
        for _ in 0..trials {
            let values: Vec<f64> = (0..400)
                .map(|_| if random.unit() < 0.04 { 20.0 } else { 0.0 })
                .collect();
            let (lower, upper) = empirical_bernstein_interval(&values, 0.0, 20.0, 0.9).unwrap();
            missed += usize::from(!(lower..=upper).contains(&0.8));
        }
        // At most 10% may miss; the bound is conservative, so far fewer do.
        assert!(missed <= trials / 10, "{missed} of {trials} missed");
    }

    #[test]
    fn the_interval_narrows_with_more_values_and_stays_in_the_range() {
        let values = |n: usize| -> Vec<f64> { (0..n).map(|i| (i % 2) as f64).collect() };
        let (small_low, small_high) =
            empirical_bernstein_interval(&values(50), 0.0, 1.0, 0.95).unwrap();
        let (large_low, large_high) =
            empirical_bernstein_interval(&values(5_000), 0.0, 1.0, 0.95).unwrap();
        assert!(large_high - large_low < (small_high - small_low) / 5.0);
        assert!(small_low >= 0.0 && small_high <= 1.0);
        assert!(large_low < 0.5 && large_high > 0.5);
        assert_eq!(empirical_bernstein_interval(&[1.0], 0.0, 1.0, 0.95), None);
        let constant = empirical_bernstein_interval(&[2.0; 100], -1.0, 3.0, 0.95).unwrap();
        assert!(constant.0 <= 2.0 && constant.1 >= 2.0);
    }
}
