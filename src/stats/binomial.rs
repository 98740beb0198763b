//! Exact binomial tail probabilities and the confidence bounds built on them.
//!
//! Certifying that a policy's quality is at least a target `q` from `n`
//! graded rows with `K` failures is a one-sided test of H0: failure rate ≥
//! α = 1 − q. Its exact p-value is P(Bin(n, α) ≤ K); H0 is rejected, and the
//! target certified, when that is at most δ = 1 − confidence.

use statrs::distribution::{Binomial, DiscreteCDF};
use statrs::function::beta::beta_reg;

/// Relative slack when comparing a p-value with δ. The tail is computed to
/// about 1e-15; without slack, a p-value exactly at δ (as with α = δ = 0.5 and
/// an odd n) would be certified or not depending on the last bit.
pub const P_VALUE_SLACK: f64 = 1e-10;

/// Whether a p-value certifies at level `delta`.
pub fn certifies(p_value: f64, delta: f64) -> bool {
    p_value <= delta * (1.0 + P_VALUE_SLACK)
}

/// P(Bin(m, θ) ≥ k), from the regularised incomplete beta function, which
/// stays accurate far into the tail.
pub fn binomial_upper_tail(m: u64, theta: f64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > m {
        return 0.0;
    }
    if theta >= 1.0 {
        return 1.0;
    }
    if theta <= 0.0 {
        return 0.0;
    }
    beta_reg(k as f64, (m - k) as f64 + 1.0, theta)
}

/// P(Bin(n, p) ≤ k).
pub fn binomial_cdf(n: u64, p: f64, k: u64) -> f64 {
    if k >= n {
        return 1.0;
    }
    Binomial::new(p, n).expect("p is a probability").cdf(k)
}

/// The largest number of failures among `n` rows that still certifies a
/// failure rate below `alpha` at level `delta`: the largest K with
/// P(Bin(n, α) ≤ K) ≤ δ. `None` when not even a flawless sample of `n` rows
/// certifies it.
///
/// The p-value grows with K, so this is found by bisection once per sample
/// size rather than computed for every candidate threshold.
pub fn max_certifiable_failures(n: u64, alpha: f64, delta: f64) -> Option<u64> {
    if n == 0 || !certifies(binomial_cdf(n, alpha, 0), delta) {
        return None;
    }
    let (mut certified, mut refused) = (0u64, n);
    while refused - certified > 1 {
        let middle = certified + (refused - certified) / 2;
        if certifies(binomial_cdf(n, alpha, middle), delta) {
            certified = middle;
        } else {
            refused = middle;
        }
    }
    Some(certified)
}

/// The fewest rows a flawless sample needs to certify quality `target` at
/// level `delta`: the smallest n with target^n ≤ δ. `None` when no sample
/// size can (a target of 1).
pub fn min_rows_to_certify(target: f64, delta: f64) -> Option<u64> {
    if target >= 1.0 {
        return None;
    }
    let mut rows = (delta.ln() / target.ln()).ceil().max(1.0) as u64;
    // Guard against the logarithms rounding across the boundary.
    while rows > 1 && target.powi((rows - 1) as i32) <= delta {
        rows -= 1;
    }
    while target.powi(rows as i32) > delta {
        rows += 1;
    }
    Some(rows)
}

/// The two-sided 1 − δ Clopper–Pearson interval of a share of `successes`
/// in `n`: each end a one-sided bound at δ / 2.
pub fn clopper_pearson_interval(successes: u64, n: u64, delta: f64) -> [f64; 2] {
    [
        clopper_pearson_lower(successes, n, delta / 2.0),
        1.0 - clopper_pearson_lower(n - successes, n, delta / 2.0),
    ]
}

/// The one-sided Clopper–Pearson lower bound, at confidence 1 − δ, on a
/// success probability after `successes` of `n` trials: the p at which
/// P(Bin(n, p) ≥ successes) = δ, i.e. the δ-quantile of Beta(x, n − x + 1).
pub fn clopper_pearson_lower(successes: u64, n: u64, delta: f64) -> f64 {
    assert!(
        successes <= n && n > 0,
        "successes {successes} of {n} trials"
    );
    clopper_pearson_lower_real(successes as f64, n as f64, delta)
}

/// [`clopper_pearson_lower`] at a weighted sample's effective size and
/// count, which need not be whole: the same Beta quantile.
pub fn clopper_pearson_lower_real(successes: f64, n: f64, delta: f64) -> f64 {
    let successes = successes.clamp(0.0, n);
    if successes <= 0.0 {
        return 0.0;
    }
    let a = successes;
    let b = n - successes + 1.0;
    let (mut low, mut high) = (0.0f64, 1.0f64);
    // The regularised incomplete beta function rises with p; 100 halvings take
    // the bracket below f64 resolution.
    for _ in 0..100 {
        let middle = 0.5 * (low + high);
        if beta_reg(a, b, middle) < delta {
            low = middle;
        } else {
            high = middle;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certifiable_failures_match_the_published_vectors() {
        // Target quality 0.90 (α = 0.10) at confidence 0.95 (δ = 0.05).
        assert_eq!(max_certifiable_failures(200, 0.1, 0.05), Some(12));
        assert_eq!(max_certifiable_failures(500, 0.1, 0.05), Some(38));
        assert_eq!(max_certifiable_failures(1000, 0.1, 0.05), Some(84));
    }

    #[test]
    fn certifiable_failures_sit_on_the_p_value_boundary() {
        for n in [29, 50, 137, 1000, 25_000] {
            let k = max_certifiable_failures(n, 0.1, 0.05).unwrap();
            assert!(binomial_cdf(n, 0.1, k) <= 0.05);
            assert!(binomial_cdf(n, 0.1, k + 1) > 0.05);
        }
    }

    #[test]
    fn too_few_rows_certify_nothing() {
        // 0.9^28 = 0.052 > 0.05, 0.9^29 = 0.047.
        assert_eq!(max_certifiable_failures(28, 0.1, 0.05), None);
        assert_eq!(max_certifiable_failures(29, 0.1, 0.05), Some(0));
        assert_eq!(min_rows_to_certify(0.9, 0.05), Some(29));
        assert_eq!(min_rows_to_certify(1.0, 0.05), None);
        assert_eq!(max_certifiable_failures(1_000, 0.0, 0.05), None);
    }

    #[test]
    fn binomial_cdf_matches_direct_summation() {
        let (n, p) = (40u64, 0.3f64);
        let mut total = 0.0;
        let mut choose = 1.0f64;
        for k in 0..=n {
            if k > 0 {
                choose *= (n - k + 1) as f64 / k as f64;
            }
            total += choose * p.powi(k as i32) * (1.0 - p).powi((n - k) as i32);
            assert!((binomial_cdf(n, p, k) - total).abs() < 1e-12, "k = {k}");
        }
    }

    #[test]
    fn clopper_pearson_has_closed_forms_at_the_edges() {
        for n in [1u64, 10, 200, 5000] {
            // All successes: P(Bin(n, p) ≥ n) = p^n = δ.
            let all = clopper_pearson_lower(n, n, 0.05);
            assert!((all - 0.05f64.powf(1.0 / n as f64)).abs() < 1e-12);
            // One success: P(Bin(n, p) ≥ 1) = 1 − (1 − p)^n = δ.
            let one = clopper_pearson_lower(1, n, 0.05);
            assert!((one - (1.0 - 0.95f64.powf(1.0 / n as f64))).abs() < 1e-12);
        }
        assert_eq!(clopper_pearson_lower(0, 10, 0.05), 0.0);
    }

    #[test]
    fn clopper_pearson_bound_is_where_the_tail_equals_delta() {
        for (successes, n) in [(90u64, 100u64), (180, 200), (9_000, 10_000)] {
            let lower = clopper_pearson_lower(successes, n, 0.05);
            let tail = 1.0 - binomial_cdf(n, lower, successes - 1);
            assert!((tail - 0.05).abs() < 1e-9, "{successes}/{n}: tail {tail}");
            assert!(lower < successes as f64 / n as f64);
        }
    }
}
