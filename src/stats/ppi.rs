//! Prediction-powered inference (Angelopoulos et al., 2023) for a quality
//! measured by a grader that is sometimes wrong. The grader labels every
//! row; a human audits a random subset. The estimate is the grader's
//! quality on all N rows plus the mean of (human − grader) on the n audited
//! rows, which removes the grader's bias; its variance is the sum of the two
//! means' variances, and the one-sided lower bound at level δ is
//! estimate − z₁₋δ · √(Var(f)/N + Var(h − f)/n). The bound is asymptotic
//! (normal), valid when the audited rows are a uniform random sample of the
//! rows.

use statrs::distribution::{ContinuousCDF, Normal};

/// The grader's side and the audit's side of one quality estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Corrected {
    /// Rows the grader labelled, and how many it called acceptable.
    pub rows: u64,
    pub graded_ok: u64,
    /// Audited rows; the sum of human − grader on them (each −1, 0 or 1), and
    /// the number where the two disagree (the sum of squares).
    pub audited: u64,
    pub error_sum: i64,
    pub disagreements: u64,
}

impl Corrected {
    /// The corrected quality estimate.
    pub fn estimate(&self) -> f64 {
        self.rows_mean() + self.error_mean()
    }

    fn rows_mean(&self) -> f64 {
        self.graded_ok as f64 / self.rows.max(1) as f64
    }

    fn error_mean(&self) -> f64 {
        if self.audited == 0 {
            0.0
        } else {
            self.error_sum as f64 / self.audited as f64
        }
    }

    /// The two variances: of the grader's mean over all rows, and of the
    /// mean correction over the audited ones.
    fn variances(&self) -> (f64, f64) {
        let mean = self.rows_mean();
        let graded = mean * (1.0 - mean) / self.rows.max(1) as f64;
        let n = self.audited as f64;
        let correction = if self.audited < 2 {
            f64::INFINITY
        } else {
            let error = self.error_mean();
            ((self.disagreements as f64 - n * error * error) / (n - 1.0)).max(0.0) / n
        };
        (graded, correction)
    }

    /// The one-sided lower bound at confidence 1 − δ.
    pub fn lower_bound(&self, delta: f64) -> f64 {
        let (graded, correction) = self.variances();
        self.estimate() - quantile(1.0 - delta) * (graded + correction).sqrt()
    }

    /// Audited rows that would bring the bound within `half_width` of the
    /// estimate at confidence 1 − δ, with the variances seen here; `None`
    /// when the grader's share alone is wider, or nothing is audited yet.
    pub fn audited_rows_for(&self, half_width: f64, delta: f64) -> Option<u64> {
        if self.audited < 2 {
            return None;
        }
        let (graded, correction) = self.variances();
        let per_row = correction * self.audited as f64;
        let room = (half_width / quantile(1.0 - delta)).powi(2) - graded;
        (room > 0.0).then(|| (per_row / room).ceil().max(2.0) as u64)
    }
}

fn quantile(probability: f64) -> f64 {
    Normal::standard().inverse_cdf(probability)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_correction_removes_a_graders_bias() {
        // The grader calls 90% acceptable; on 200 audited rows it was 10
        // points too generous (20 more "ok" than the human), disagreeing on 20.
        let corrected = Corrected {
            rows: 10_000,
            graded_ok: 9_000,
            audited: 200,
            error_sum: -20,
            disagreements: 20,
        };
        assert!((corrected.estimate() - 0.8).abs() < 1e-12);
        // Var(h − f) = (20 − 200 · 0.01) / 199; the grader's variance is
        // 0.09 / 10,000.
        let variance: f64 = 0.09 / 10_000.0 + (20.0 - 2.0) / 199.0 / 200.0;
        let expected = 0.8 - 1.6448536269514722 * variance.sqrt();
        assert!((corrected.lower_bound(0.05) - expected).abs() < 1e-9);
        let needed = corrected.audited_rows_for(0.01, 0.05).unwrap();
        let wider = corrected.audited_rows_for(0.03, 0.05).unwrap();
        assert!(needed > 200 && wider < needed, "{needed} {wider}");
    }
}
