//! The drift statistics: a two-proportion z-test, the population stability
//! index over a baseline's deciles, and the two-sample Kolmogorov–Smirnov
//! test.

use statrs::distribution::{ContinuousCDF, Normal};
use statrs::stats_tests::NaNPolicy;
use statrs::stats_tests::ks_test::{KSTwoSampleAlternativeMethod, ks_twosample};

/// Two-sided p-value that `x1 / n1` and `x0 / n0` are the same proportion
/// (pooled z-test). `None` when either sample is empty.
pub fn two_proportion_z(x1: u64, n1: u64, x0: u64, n0: u64) -> Option<(f64, f64)> {
    if n1 == 0 || n0 == 0 {
        return None;
    }
    let (p1, p0) = (x1 as f64 / n1 as f64, x0 as f64 / n0 as f64);
    let pooled = (x1 + x0) as f64 / (n1 + n0) as f64;
    let spread = (pooled * (1.0 - pooled) * (1.0 / n1 as f64 + 1.0 / n0 as f64)).sqrt();
    if spread == 0.0 {
        return Some((0.0, 1.0));
    }
    let z = (p1 - p0) / spread;
    let normal = Normal::standard();
    Some((z, 2.0 * (1.0 - normal.cdf(z.abs()))))
}

/// Population stability index of `fresh` against `baseline`, binned at the
/// baseline's deciles (fewer bins where the baseline has ties). Empty bins
/// count as 0.0001 of a sample, as is customary.
pub fn psi(baseline: &[f64], fresh: &[f64]) -> Option<f64> {
    if baseline.is_empty() || fresh.is_empty() {
        return None;
    }
    let mut sorted = baseline.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut cuts: Vec<f64> = (1..10)
        .map(|decile| sorted[(decile * sorted.len() / 10).min(sorted.len() - 1)])
        .collect();
    cuts.dedup();
    let shares = |values: &[f64]| -> Vec<f64> {
        let mut counts = vec![0usize; cuts.len() + 1];
        for value in values {
            counts[cuts.partition_point(|cut| cut <= value)] += 1;
        }
        counts
            .into_iter()
            .map(|count| (count as f64 / values.len() as f64).max(1e-4))
            .collect()
    };
    let (expected, actual) = (shares(baseline), shares(fresh));
    Some(
        expected
            .iter()
            .zip(&actual)
            .map(|(expected, actual)| (actual - expected) * (actual / expected).ln())
            .sum(),
    )
}

/// The two-sample KS statistic and its asymptotic two-sided p-value.
pub fn ks_two_sample(baseline: &[f64], fresh: &[f64]) -> Option<(f64, f64)> {
    if baseline.len() < 2 || fresh.len() < 2 {
        return None;
    }
    let test =
        |method| ks_twosample(baseline.to_vec(), fresh.to_vec(), method, NaNPolicy::Error).ok();
    // statrs's two-sided asymptotic series never ends at D = 0 and does not
    // converge for tiny D; there the p-value is 1 to twelve digits (the
    // Kolmogorov distribution is below 1e-12 at λ = 0.2), so the one-sided
    // statistics decide whether to ask for it.
    let (d_plus, _) = test(KSTwoSampleAlternativeMethod::GreaterAsymptotic)?;
    let (d_minus, _) = test(KSTwoSampleAlternativeMethod::LessAsymptotic)?;
    let statistic = d_plus.max(d_minus);
    let (n, m) = (baseline.len() as f64, fresh.len() as f64);
    let lambda = statistic * (n * m / (n + m)).sqrt();
    if lambda < 0.2 {
        return Some((statistic, 1.0));
    }
    test(KSTwoSampleAlternativeMethod::TwoSidedAsymptotic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_test_matches_a_hand_computation() {
        // 60/200 against 40/200: pooled 0.25, se = sqrt(0.25 * 0.75 * 0.01) = 0.0433.
        let (z, p) = two_proportion_z(60, 200, 40, 200).unwrap();
        assert!((z - 0.1 / (0.25f64 * 0.75 * 0.01).sqrt()).abs() < 1e-12);
        assert!((p - 0.0209).abs() < 0.0005, "{p}");
        assert_eq!(two_proportion_z(5, 0, 1, 10), None);
    }

    #[test]
    fn psi_is_zero_for_the_same_distribution_and_grows_with_shift() {
        let baseline: Vec<f64> = (0..1000).map(|i| f64::from(i) / 1000.0).collect();
        assert!(psi(&baseline, &baseline).unwrap() < 1e-9);
        let shifted: Vec<f64> = baseline.iter().map(|value| value + 0.05).collect();
        let far: Vec<f64> = baseline.iter().map(|value| value + 0.3).collect();
        let (small, large) = (
            psi(&baseline, &shifted).unwrap(),
            psi(&baseline, &far).unwrap(),
        );
        assert!(small > 0.0 && small < 0.1, "{small}");
        assert!(large > 0.25, "{large}");
    }

    #[test]
    fn psi_copes_with_tied_baselines() {
        let baseline = vec![0.0; 500]
            .into_iter()
            .chain(vec![1.0; 500])
            .collect::<Vec<_>>();
        let fresh = vec![0.0; 800]
            .into_iter()
            .chain(vec![1.0; 200])
            .collect::<Vec<_>>();
        // Two bins: (0.3 − 0.5) ln(0.3/0.5) ... by hand: 0.3·ln(1.6) + (−0.3)·ln(0.4).
        let expected = 0.3 * (0.8f64 / 0.5).ln() + (-0.3) * (0.2f64 / 0.5).ln();
        assert!((psi(&baseline, &fresh).unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn ks_detects_a_shift() {
        let baseline: Vec<f64> = (0..500).map(|i| f64::from(i) / 500.0).collect();
        let same = ks_two_sample(&baseline, &baseline).unwrap();
        assert!(same.0 < 1e-12 && same.1 > 0.99);
        let shifted: Vec<f64> = baseline.iter().map(|value| value + 0.2).collect();
        let (statistic, p) = ks_two_sample(&baseline, &shifted).unwrap();
        assert!(
            (statistic - 0.2).abs() < 0.01 && p < 1e-6,
            "{statistic} {p}"
        );
    }
}
