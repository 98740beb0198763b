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
///
/// Each audited row counts with its weight, 1 / its inclusion probability
/// (1 for audits with no recorded draw), so rows drawn with unequal
/// probabilities estimate the slice's disagreement shares without bias
/// (Hájek). The bound uses the weighted shares at Kish's effective sample
/// size, (Σw)² / Σw², which is the audited count itself when the weights are
/// equal, as in `routeval sample --audit`'s draw: the exact bound above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Corrected {
    /// Rows the grader labelled, and how many it called acceptable.
    pub rows: u64,
    pub graded_ok: u64,
    /// Audited rows, and the sums of their weights and squared weights.
    pub audited: u64,
    pub weight: f64,
    pub weight_squared: f64,
    /// Over the audited rows, weighted: the sum of human − grader (each −1,
    /// 0 or 1), and of the rows where the two disagree.
    pub error_sum: f64,
    pub disagreements: f64,
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
        if self.audited == 0 || self.weight <= 0.0 {
            0.0
        } else {
            self.error_sum / self.weight
        }
    }

    /// Kish's effective number of audited rows.
    fn effective_audited(&self) -> f64 {
        if self.weight_squared <= 0.0 {
            0.0
        } else {
            self.weight * self.weight / self.weight_squared
        }
    }

    /// The weighted shares of audited rows the human accepts and the grader
    /// rejects (p₊), and the other way round (p₋).
    fn disagreement_shares(&self) -> (f64, f64) {
        if self.weight <= 0.0 {
            return (0.0, 0.0);
        }
        let plus = (self.disagreements + self.error_sum) / 2.0 / self.weight;
        let minus = (self.disagreements - self.error_sum) / 2.0 / self.weight;
        (plus.clamp(0.0, 1.0), minus.clamp(0.0, 1.0))
    }

    /// The one-sided lower bound at confidence 1 − δ: exact, by the union
    /// bound over the grader's mean and the two disagreement shares; 0 with
    /// nothing audited.
    pub fn lower_bound(&self, delta: f64) -> f64 {
        if self.audited == 0 || self.rows == 0 || self.weight <= 0.0 {
            return 0.0;
        }
        let (plus, minus) = self.disagreement_shares();
        bound(
            self.graded_ok.min(self.rows),
            self.rows,
            plus,
            minus,
            self.effective_audited(),
            delta,
        )
    }

    /// Audited rows that would bring the bound within `half_width` of the
    /// estimate at confidence 1 − δ, at the disagreement rates seen here;
    /// `None` when the grader's share alone is wider, or nothing is audited
    /// yet.
    pub fn audited_rows_for(&self, half_width: f64, delta: f64) -> Option<u64> {
        if self.audited < 2 || self.rows == 0 || self.weight <= 0.0 {
            return None;
        }
        let (plus, minus) = self.disagreement_shares();
        let graded_ok = self.graded_ok.min(self.rows);
        let graded_mean = graded_ok as f64 / self.rows as f64;
        let width = |audited: u64| {
            // Whole counts at the observed rates, as a sample of this size
            // would have them.
            let audited_rows = audited as f64;
            let (plus, minus) = (
                (plus * audited_rows).round() / audited_rows,
                (minus * audited_rows).round() / audited_rows,
            );
            graded_mean + plus
                - minus
                - bound(graded_ok, self.rows, plus, minus, audited_rows, delta)
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
/// δ/3, the shares' at `audited` (effective) rows.
fn bound(graded_ok: u64, rows: u64, plus: f64, minus: f64, audited: f64, delta: f64) -> f64 {
    use super::binomial::{clopper_pearson_lower, clopper_pearson_lower_real};
    let third = delta / 3.0;
    let graded = clopper_pearson_lower(graded_ok, rows, third);
    let plus = clopper_pearson_lower_real(plus * audited, audited, third);
    let minus = 1.0 - clopper_pearson_lower_real((1.0 - minus) * audited, audited, third);
    (graded + plus - minus).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::binomial::clopper_pearson_lower;
    use crate::stats::random::{Random, finalise};
    use crate::stats::stratified::draw_stratified;

    /// Unit weights: the audited rows counted once each.
    fn unweighted(
        rows: u64,
        graded_ok: u64,
        audited: u64,
        error_sum: i64,
        disagreements: u64,
    ) -> Corrected {
        Corrected {
            rows,
            graded_ok,
            audited,
            weight: audited as f64,
            weight_squared: audited as f64,
            error_sum: error_sum as f64,
            disagreements: disagreements as f64,
        }
    }

    #[test]
    fn the_bound_is_the_three_exact_bounds_at_a_third_of_delta() {
        // The grader calls 90% acceptable; on 200 audited rows it was 10
        // points too generous: 20 rows it accepted that the human did not.
        let corrected = unweighted(10_000, 9_000, 200, -20, 20);
        assert!((corrected.estimate() - 0.8).abs() < 1e-12);
        let third = 0.05 / 3.0;
        let expected = clopper_pearson_lower(9_000, 10_000, third)
            - (1.0 - clopper_pearson_lower(180, 200, third));
        assert!((corrected.lower_bound(0.05) - expected).abs() < 1e-12);
        let needed = corrected.audited_rows_for(0.04, 0.05).unwrap();
        let wider = corrected.audited_rows_for(0.06, 0.05).unwrap();
        assert!(needed > 200 && wider < needed, "{needed} {wider}");
    }

    #[test]
    fn equal_weights_of_any_size_give_the_unweighted_bound() {
        let plain = unweighted(5_000, 4_300, 60, -4, 8);
        // Each row drawn with probability 60 / 5,000.
        let weight = 5_000.0 / 60.0;
        let weighted = Corrected {
            weight: 60.0 * weight,
            weight_squared: 60.0 * weight * weight,
            error_sum: -4.0 * weight,
            disagreements: 8.0 * weight,
            ..plain
        };
        assert!((weighted.estimate() - plain.estimate()).abs() < 1e-12);
        assert!((weighted.lower_bound(0.1) - plain.lower_bound(0.1)).abs() < 1e-9);
    }

    /// Issue 25's judge: false accepts rise with difficulty (0.05 + 0.45 ·
    /// difficulty), true quality 0.85 on average, slices of 2,000 rows.
    /// Each row: the router's score (difficulty plus noise), the human's
    /// verdict, the judge's.
    fn judged_slice(random: &mut Random, rows: usize) -> Vec<(f64, bool, bool)> {
        (0..rows)
            .map(|_| {
                let difficulty = random.unit();
                let truth = random.unit() >= 0.3 * difficulty;
                let judged = truth || random.unit() < 0.05 + 0.45 * difficulty;
                (difficulty + 0.2 * random.unit(), truth, judged)
            })
            .collect()
    }

    /// The share of 1,000 slices whose bound at δ = 0.1 exceeds the humans'
    /// quality, when `audit` picks the audited rows and their weights.
    fn miss_rate(seed: u64, audit: impl Fn(&[(f64, bool, bool)], u64) -> Vec<(usize, f64)>) -> f64 {
        let mut random = Random::new(seed);
        let (slices, delta) = (1_000u64, 0.1);
        let mut misses = 0;
        for slice in 0..slices {
            let rows = judged_slice(&mut random, 2_000);
            let mut corrected = Corrected {
                rows: rows.len() as u64,
                graded_ok: rows.iter().filter(|row| row.2).count() as u64,
                audited: 0,
                weight: 0.0,
                weight_squared: 0.0,
                error_sum: 0.0,
                disagreements: 0.0,
            };
            for (index, weight) in audit(&rows, slice) {
                let (_, truth, judged) = rows[index];
                let error = f64::from(u8::from(truth)) - f64::from(u8::from(judged));
                corrected.audited += 1;
                corrected.weight += weight;
                corrected.weight_squared += weight * weight;
                corrected.error_sum += weight * error;
                corrected.disagreements += weight * error.abs();
            }
            let quality = rows.iter().filter(|row| row.1).count() as f64 / rows.len() as f64;
            misses += u64::from(corrected.lower_bound(delta) > quality);
        }
        misses as f64 / slices as f64
    }

    /// δ plus three standard errors of 1,000 resamples.
    const MOST_MISSES: f64 = 0.1 + 0.03;

    /// At every audit size routeval accepts, with rows audited at random or
    /// drawn as `sample --audit` draws them, the bound misses the humans'
    /// quality in at most δ of slices; the paper's normal bound missed in
    /// up to 27% at 30.
    #[test]
    fn the_bound_holds_at_every_audit_size_routeval_accepts() {
        for audited in [30usize, 50, 100, 300] {
            // The rows are exchangeable: the first n are a random sample.
            let random = miss_rate(25, |_, _| (0..audited).map(|index| (index, 1.0)).collect());
            assert!(
                random <= MOST_MISSES,
                "{audited} random audits: {random} missed"
            );
            let drawn = miss_rate(26, |rows, slice| {
                let keys: Vec<u64> = (0..rows.len() as u64).map(finalise).collect();
                let scores: Vec<f64> = rows.iter().map(|row| row.0).collect();
                let draw = draw_stratified(&keys, &scores, audited, 10, slice, slice);
                let weight = 1.0 / draw.inclusion_probability;
                draw.chosen
                    .iter()
                    .map(|&(index, _)| (index, weight))
                    .collect()
            });
            assert!(
                drawn <= MOST_MISSES,
                "{audited} drawn audits: {drawn} missed"
            );
            eprintln!("{audited} audits: {random} of slices missed at random, {drawn} drawn");
        }
    }

    /// Audits drawn with unequal probabilities (here the easiest third of
    /// the scores six times as often, where the judge rarely errs)
    /// understate the grader's error unless each row counts 1 / its
    /// probability.
    #[test]
    fn weights_undo_an_unequal_draw() {
        let easy_first = |weighted: bool| {
            move |rows: &[(f64, bool, bool)], slice: u64| -> Vec<(usize, f64)> {
                let mut random = Random::new(slice ^ 0x77);
                let easy = {
                    let mut scores: Vec<f64> = rows.iter().map(|row| row.0).collect();
                    scores.sort_by(f64::total_cmp);
                    scores[scores.len() / 3]
                };
                rows.iter()
                    .enumerate()
                    .filter_map(|(index, row)| {
                        let probability = if row.0 < easy { 0.3 } else { 0.05 };
                        random
                            .chance(probability)
                            .then_some((index, if weighted { 1.0 / probability } else { 1.0 }))
                    })
                    .collect()
            }
        };
        let unweighted = miss_rate(27, easy_first(false));
        let weighted = miss_rate(27, easy_first(true));
        assert!(weighted <= MOST_MISSES, "weighted: {weighted} missed");
        eprintln!("unequal draw: {unweighted} of slices missed unweighted, {weighted} weighted");
        assert!(
            unweighted > 2.0 * weighted.max(0.1),
            "unweighted: {unweighted} missed"
        );
    }
}
