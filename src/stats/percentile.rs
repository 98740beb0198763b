//! The one nearest-rank percentile, over sorted values or over counts.

/// The 1-based nearest rank of the `fraction` quantile among `n` values:
/// the smallest rank whose share of values reaches `fraction`, at least 1.
pub fn nearest_rank(n: u64, fraction: f64) -> u64 {
    ((fraction * n as f64).ceil() as u64).clamp(1, n.max(1))
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], fraction: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = nearest_rank(sorted.len() as u64, fraction) as usize;
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(10.0));
        assert_eq!(percentile(&values, 0.95), Some(19.0));
        assert_eq!(percentile(&[7.0], 0.95), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
