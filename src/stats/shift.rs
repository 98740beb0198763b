//! Whether a rate or a distribution moved: a two-proportion z-test and the
//! Wilson interval, the population stability index over a baseline's deciles
//! judged against its own null, and the two-sample Kolmogorov–Smirnov test
//! with the Kolmogorov distribution's tail.

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

/// The population stability index and what it means at these sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PsiTest {
    pub psi: f64,
    /// What PSI averages when nothing changed: (bins − 1)(1/n₀ + 1/n₁).
    pub null: f64,
    /// Pearson's χ² test that both samples fill the bins alike.
    pub p_value: f64,
}

/// PSI's bias when nothing changed, for `bins` bins of `n0` and `n1` rows:
/// each side's sampling noise adds (bins − 1)/n to the expected value (0.18
/// at 100 rows a side over deciles), which fixed bands read as a shift.
pub fn psi_null(bins: usize, n0: u64, n1: u64) -> f64 {
    bins.saturating_sub(1) as f64 * (1.0 / n0 as f64 + 1.0 / n1 as f64)
}

/// Pearson's χ² test of homogeneity of two samples' counts over the same
/// bins (`None` with fewer than two bins holding rows).
pub fn homogeneity_p_value(bins: &[(u64, u64)]) -> Option<f64> {
    use statrs::distribution::ChiSquared;
    let held: Vec<(f64, f64)> = bins
        .iter()
        .filter(|(a, b)| a + b > 0)
        .map(|&(a, b)| (a as f64, b as f64))
        .collect();
    if held.len() < 2 {
        return None;
    }
    let (n0, n1) = held
        .iter()
        .fold((0.0, 0.0), |(n0, n1), (a, b)| (n0 + a, n1 + b));
    if n0 == 0.0 || n1 == 0.0 {
        return None;
    }
    let total = n0 + n1;
    let statistic: f64 = held
        .iter()
        .map(|(a, b)| {
            let column = a + b;
            let (e0, e1) = (column * n0 / total, column * n1 / total);
            (a - e0).powi(2) / e0 + (b - e1).powi(2) / e1
        })
        .sum();
    let distribution = ChiSquared::new((held.len() - 1) as f64).ok()?;
    Some(distribution.sf(statistic))
}

/// PSI over the given bins of counts, empty shares counting as 0.0001 as is
/// customary, with its null and its test.
pub fn psi_of_bins(bins: &[(u64, u64)]) -> Option<PsiTest> {
    let (n0, n1) = bins
        .iter()
        .fold((0u64, 0u64), |(n0, n1), (a, b)| (n0 + a, n1 + b));
    if n0 == 0 || n1 == 0 {
        return None;
    }
    let floor = 1e-4;
    let psi = bins
        .iter()
        .map(|(a, b)| {
            let expected = (*a as f64 / n0 as f64).max(floor);
            let actual = (*b as f64 / n1 as f64).max(floor);
            (actual - expected) * (actual / expected).ln()
        })
        .sum();
    Some(PsiTest {
        psi,
        null: psi_null(bins.len(), n0, n1),
        p_value: homogeneity_p_value(bins).unwrap_or(1.0),
    })
}

/// [`psi`] with its null and its test.
pub fn psi_test(baseline: &[f64], fresh: &[f64]) -> Option<PsiTest> {
    psi_of_bins(&decile_counts(baseline, fresh)?)
}

/// Population stability index of `fresh` against `baseline`, binned at the
/// baseline's deciles (fewer bins where the baseline has ties). Empty bins
/// count as 0.0001 of a sample, as is customary.
pub fn psi(baseline: &[f64], fresh: &[f64]) -> Option<f64> {
    psi_test(baseline, fresh).map(|test| test.psi)
}

/// Both samples' counts in the bins between the baseline's deciles.
fn decile_counts(baseline: &[f64], fresh: &[f64]) -> Option<Vec<(u64, u64)>> {
    if baseline.is_empty() || fresh.is_empty() {
        return None;
    }
    let mut sorted = baseline.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut cuts: Vec<f64> = (1..10)
        .map(|decile| sorted[(decile * sorted.len() / 10).min(sorted.len() - 1)])
        .collect();
    cuts.dedup();
    let counts = |values: &[f64]| -> Vec<u64> {
        let mut counts = vec![0u64; cuts.len() + 1];
        for value in values {
            counts[cuts.partition_point(|cut| cut <= value)] += 1;
        }
        counts
    };
    Some(counts(baseline).into_iter().zip(counts(fresh)).collect())
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

/// The Wilson score interval of a proportion at 95%.
pub fn wilson(successes: u64, n: u64) -> Option<[f64; 2]> {
    if n == 0 {
        return None;
    }
    let z = 1.959_963_984_540_054_f64;
    let (n, p) = (n as f64, successes as f64 / n as f64);
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    Some([(centre - half).max(0.0), (centre + half).min(1.0)])
}

/// The Kolmogorov distribution's upper tail, P(K > λ).
pub fn kolmogorov_tail(lambda: f64) -> f64 {
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for k in 1..=100 {
        let k = f64::from(k);
        let term = 2.0 * (-1f64).powf(k - 1.0) * (-2.0 * k * k * lambda * lambda).exp();
        sum += term;
        if term.abs() < 1e-12 {
            break;
        }
    }
    sum.clamp(0.0, 1.0)
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
    fn psi_is_judged_against_its_own_null() {
        // Two draws of one uniform population, 100 rows a side: PSI's mean
        // is about 9 · (2/100) = 0.18, above the old 0.1 band, while the χ²
        // test of the same bins is uniform.
        let mut state = 7u64;
        let mut uniform = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut psi_sum, mut rejections, runs) = (0.0, 0, 2000);
        for _ in 0..runs {
            let baseline: Vec<f64> = (0..100).map(|_| uniform()).collect();
            let fresh: Vec<f64> = (0..100).map(|_| uniform()).collect();
            let test = psi_test(&baseline, &fresh).unwrap();
            assert!((test.null - 0.18).abs() < 1e-12);
            psi_sum += test.psi;
            rejections += usize::from(test.p_value < 0.05);
        }
        let mean = psi_sum / f64::from(runs);
        assert!((0.14..0.24).contains(&mean), "mean null PSI {mean}");
        let size = rejections as f64 / f64::from(runs);
        assert!(size < 0.065, "χ² rejected {size} of unchanged samples");
    }

    #[test]
    fn homogeneity_matches_a_hand_computation() {
        // 2×2: 30/70 against 50/50: χ² = 8.333, p = 0.00389 (1 df).
        let p = homogeneity_p_value(&[(30, 50), (70, 50)]).unwrap();
        assert!((p - 0.003_892_5).abs() < 1e-6, "{p}");
        assert_eq!(homogeneity_p_value(&[(5, 5), (0, 0)]), None);
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
