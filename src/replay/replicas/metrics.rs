//! What a replay measures per policy: token counts that stay integers, and
//! latencies in a fixed-size histogram, so memory does not grow with the
//! trace.

use crate::schema::Window;

/// Latencies in buckets 1% wide (relative), from 0 to about 10^8 ms:
/// quantiles within 0.5% of the exact order statistic, in a few kilobytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

const GROWTH: f64 = 1.01;

impl Histogram {
    pub fn record(&mut self, milliseconds: f64) {
        let bucket = ((1.0 + milliseconds.max(0.0)).ln() / GROWTH.ln()) as usize;
        if bucket >= self.counts.len() {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The nearest-rank `quantile` (in [0, 1]), as its bucket's midpoint.
    pub fn quantile(&self, quantile: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((quantile * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return GROWTH.powf(bucket as f64 + 0.5) - 1.0;
            }
        }
        unreachable!("the ranks sum to the total")
    }
}

/// Sums over a window before they are rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowSums {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub ttft_ms: f64,
}

impl WindowSums {
    pub fn render(&self, start_s: f64) -> Window {
        Window {
            start_s,
            requests: self.requests,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            hit_rate: ratio(self.cached_tokens, self.prompt_tokens),
            mean_ttft_ms: if self.requests == 0 {
                0.0
            } else {
                self.ttft_ms / self.requests as f64
            },
        }
    }
}

pub fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_half_a_percent_of_the_order_statistic() {
        let mut histogram = Histogram::default();
        let values: Vec<f64> = (1..=1000).map(|index| f64::from(index) * 7.3).collect();
        for &value in &values {
            histogram.record(value);
        }
        for (quantile, exact) in [(0.5, values[499]), (0.95, values[949]), (0.99, values[989])] {
            let estimate = histogram.quantile(quantile);
            assert!(
                (estimate - exact).abs() <= exact * 0.006,
                "p{quantile}: {estimate} against {exact}"
            );
        }
        assert_eq!(histogram.count(), 1000);
    }
}
