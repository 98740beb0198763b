//! Prediction-powered inference (Angelopoulos et al., 2023) for a quality
//! measured by a grader that is sometimes wrong. The grader labels every
//! row; a human audits a random subset. The estimate is the grader's
//! quality on all N rows plus the mean of (human − grader) on the n audited
//! rows, which removes the grader's bias.
//!
//! **The bound is exact.** The human quality is q = E[f] + p₊ − p₋, with p₊
//! the share of rows the human accepts and the grader rejects, p₋ the other
//! way round. Each term gets a one-sided Clopper–Pearson bound at δ/3 (the
//! grader's mean from its N rows, p₊ and p₋ from the n audited ones), and
//! L = lower(E[f]) + lower(p₊) − upper(p₋) misses q with probability at most
//! δ by the union bound, at any n. The normal bound of the paper,
//! estimate − z · √(Var(f)/N + Var(h − f)/n), is not: a few dozen audits
//! often see no disagreement where the grader is wrong, the variance
//! estimate collapses to zero, and the bound falls back to the grader's own
//! (27% misses at 30 audits where 10% were claimed). Both assume the
//! audited rows are a uniform random sample of the rows.

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

    /// Audited rows the human accepts and the grader rejects (p₊'s count),
    /// and the other way round (p₋'s).
    fn disagreement_counts(&self) -> (u64, u64) {
        let plus = (self.disagreements as i64 + self.error_sum) / 2;
        let minus = (self.disagreements as i64 - self.error_sum) / 2;
        (plus.max(0) as u64, minus.max(0) as u64)
    }

    /// The one-sided lower bound at confidence 1 − δ: exact, by the union
    /// bound over the grader's mean and the two disagreement shares; 0 with
    /// nothing audited.
    pub fn lower_bound(&self, delta: f64) -> f64 {
        if self.audited == 0 || self.rows == 0 {
            return 0.0;
        }
        let (plus, minus) = self.disagreement_counts();
        bound(
            self.graded_ok.min(self.rows),
            self.rows,
            plus.min(self.audited),
            minus.min(self.audited),
            self.audited,
            delta,
        )
    }

    /// Audited rows that would bring the bound within `half_width` of the
    /// estimate at confidence 1 − δ, at the disagreement rates seen here;
    /// `None` when the grader's share alone is wider, or nothing is audited
    /// yet.
    pub fn audited_rows_for(&self, half_width: f64, delta: f64) -> Option<u64> {
        if self.audited < 2 || self.rows == 0 {
            return None;
        }
        let (plus, minus) = self.disagreement_counts();
        let (plus_rate, minus_rate) = (
            plus as f64 / self.audited as f64,
            minus as f64 / self.audited as f64,
        );
        let graded_ok = self.graded_ok.min(self.rows);
        let width = |audited: u64| {
            let (plus, minus) = (
                ((plus_rate * audited as f64).round() as u64).min(audited),
                ((minus_rate * audited as f64).round() as u64).min(audited),
            );
            let estimate =
                graded_ok as f64 / self.rows as f64 + (plus as f64 - minus as f64) / audited as f64;
            estimate - bound(graded_ok, self.rows, plus, minus, audited, delta)
        };
        const MOST: u64 = 100_000_000;
        if width(MOST) > half_width {
            return None;
        }
        let (mut low, mut high) = (2u64, MOST);
        while low < high {
            let middle = low + (high - low) / 2;
            if width(middle) <= half_width {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        Some(low)
    }
}

/// lower(E[f]) + lower(p₊) − upper(p₋), each one-sided Clopper–Pearson at
/// δ/3.
fn bound(graded_ok: u64, rows: u64, plus: u64, minus: u64, audited: u64, delta: f64) -> f64 {
    use super::binomial::clopper_pearson_lower;
    let third = delta / 3.0;
    let graded = clopper_pearson_lower(graded_ok, rows, third);
    let plus = clopper_pearson_lower(plus, audited, third);
    let minus = 1.0 - clopper_pearson_lower(audited - minus, audited, third);
    (graded + plus - minus).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::binomial::clopper_pearson_lower;

    #[test]
    fn the_bound_is_the_three_exact_bounds_at_a_third_of_delta() {
        // The grader calls 90% acceptable; on 200 audited rows it was 10
        // points too generous: 20 rows it accepted that the human did not.
        let corrected = Corrected {
            rows: 10_000,
            graded_ok: 9_000,
            audited: 200,
            error_sum: -20,
            disagreements: 20,
        };
        assert!((corrected.estimate() - 0.8).abs() < 1e-12);
        let third = 0.05 / 3.0;
        let expected = clopper_pearson_lower(9_000, 10_000, third)
            - (1.0 - clopper_pearson_lower(180, 200, third));
        assert!((corrected.lower_bound(0.05) - expected).abs() < 1e-12);
        let needed = corrected.audited_rows_for(0.04, 0.05).unwrap();
        let wider = corrected.audited_rows_for(0.06, 0.05).unwrap();
        assert!(needed > 200 && wider < needed, "{needed} {wider}");
    }

    /// Issue 25's judge: false accepts rise with difficulty (0.05 + 0.45 ·
    /// difficulty), true quality 0.85 on average, a slice of 2,000 rows
    /// with n audited at random. The bound, at δ = 0.1, must miss the
    /// humans' quality in at most δ of slices at every audit size; the
    /// paper's normal bound missed in up to 27% at 30.
    #[test]
    fn the_bound_holds_at_every_audit_size_routeval_accepts() {
        let mut state = 25u64;
        let mut unit = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let (rows, slices, delta) = (2_000usize, 1_000usize, 0.1);
        for audited in [30usize, 50, 100, 300] {
            let mut misses = 0;
            for _ in 0..slices {
                let mut corrected = Corrected {
                    rows: rows as u64,
                    graded_ok: 0,
                    audited: audited as u64,
                    error_sum: 0,
                    disagreements: 0,
                };
                let mut human_ok = 0u64;
                for row in 0..rows {
                    let difficulty = unit();
                    let truth = unit() >= 0.3 * difficulty;
                    let judged = truth || unit() < 0.05 + 0.45 * difficulty;
                    human_ok += u64::from(truth);
                    corrected.graded_ok += u64::from(judged);
                    // The rows are exchangeable: the first n are a random
                    // sample.
                    if row < audited {
                        let error = i64::from(truth) - i64::from(judged);
                        corrected.error_sum += error;
                        corrected.disagreements += u64::from(error != 0);
                    }
                }
                let quality = human_ok as f64 / rows as f64;
                misses += usize::from(corrected.lower_bound(delta) > quality);
            }
            let rate = misses as f64 / slices as f64;
            // δ plus three standard errors of 1,000 resamples.
            assert!(
                rate <= delta + 0.03,
                "{audited} audits: {rate} of slices missed"
            );
        }
    }
}
