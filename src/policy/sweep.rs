//! A slice's rows as what escalating each would change, and the
//! quality–cost curve over every candidate threshold from one sort and
//! running sums: the sweep `calibrate`, `evaluate` and `report` share.

use super::money::to_usd;
use super::row::GradedRow;
use super::row_outcome::{Priced, serve_row_priced};
use crate::schema::{Policy, escalates};

/// What escalating one row changes, relative to escalating nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub score: f64,
    /// Extra picodollars the row costs when escalated.
    pub escalation_cost: i64,
    pub small_ok: bool,
    pub large_ok: bool,
    /// A human's verdicts on the row's two answers, where audited, and the
    /// weight the row's audit counts with: 1 / its inclusion probability.
    pub audit: Audit,
    pub audit_weight: f32,
}

/// A human's verdicts on one row's small and large answers, packed: bit 0
/// audited, bit 1 the small answer acceptable, bit 2 the large one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Audit(u8);

impl Audit {
    pub const NONE: Audit = Audit(0);

    pub fn of(verdicts: Option<(bool, bool)>) -> Audit {
        verdicts.map_or(Audit::NONE, |(small, large)| {
            Audit(1 | u8::from(small) << 1 | u8::from(large) << 2)
        })
    }

    pub fn verdicts(self) -> Option<(bool, bool)> {
        (self.0 & 1 == 1).then_some((self.0 & 2 != 0, self.0 & 4 != 0))
    }

    /// Human minus grader on the served answer: −1, 0 or 1.
    fn error(self, served_large: bool, small_ok: bool, large_ok: bool) -> f64 {
        match self.verdicts() {
            None => 0.0,
            Some((small, large)) => {
                let (human, grader) = if served_large {
                    (large, large_ok)
                } else {
                    (small, small_ok)
                };
                f64::from(u8::from(human)) - f64::from(u8::from(grader))
            }
        }
    }
}

/// Sums over a slice's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub rows: u64,
    pub small_ok: u64,
    pub large_ok: u64,
    /// Rows where at least one tier was acceptable: what an oracle router gets.
    pub either_ok: u64,
    pub cost_small: i128,
    pub cost_large: i128,
    /// The policy's cost when nothing is escalated.
    pub policy_base: i128,
    /// Cost of the oracle, which escalates exactly the rows the small tier
    /// fails and the large tier gets right, and pays for no router.
    pub oracle_cost: i128,
    /// Rows with a human's verdicts, and the sums of their weights and
    /// squared weights.
    pub audited: u64,
    pub audit_weight: f64,
    pub audit_weight_squared: f64,
    /// Over the audited rows with nothing escalated, weighted: the sum of
    /// human minus grader on the served answer, and of its absolute value.
    pub audit_error: f64,
    pub audit_disagreements: f64,
}

/// The rows of one slice (or of its held-out part) under one policy.
#[derive(Debug, Clone, Default)]
pub struct SliceObservations {
    pub rows: Vec<Observation>,
    pub totals: Totals,
}

impl SliceObservations {
    pub fn push(&mut self, policy: Policy, row: &GradedRow) {
        self.push_audited(policy, row, Audit::NONE, 1.0);
    }

    /// [`SliceObservations::push`] with a human's verdicts on the row,
    /// counted with `weight` (1 / the row's inclusion probability in the
    /// audit, or 1 where the draw is not recorded).
    pub fn push_audited(&mut self, policy: Policy, row: &GradedRow, audit: Audit, weight: f32) {
        let priced = Priced::of(row);
        let (cost_small, cost_large) = (priced.small, priced.large);
        let base = serve_row_priced(policy, row, &priced, false).cost;
        let escalation_cost = serve_row_priced(policy, row, &priced, true).cost - base;
        let totals = &mut self.totals;
        totals.rows += 1;
        totals.small_ok += u64::from(row.small_ok);
        totals.large_ok += u64::from(row.large_ok);
        totals.either_ok += u64::from(row.small_ok || row.large_ok);
        totals.cost_small += i128::from(cost_small);
        totals.cost_large += i128::from(cost_large);
        totals.policy_base += i128::from(base);
        let oracle_escalates = !row.small_ok && row.large_ok;
        totals.oracle_cost += i128::from(if oracle_escalates {
            cost_large
        } else {
            cost_small
        });
        if audit.verdicts().is_some() {
            let (error, weight) = (
                audit.error(false, row.small_ok, row.large_ok),
                f64::from(weight),
            );
            totals.audited += 1;
            totals.audit_weight += weight;
            totals.audit_weight_squared += weight * weight;
            totals.audit_error += weight * error;
            totals.audit_disagreements += weight * error.abs();
        }
        self.rows.push(Observation {
            // Adding zero folds -0.0 into 0.0, which `>=` treats as equal.
            score: row.score + 0.0,
            escalation_cost,
            small_ok: row.small_ok,
            large_ok: row.large_ok,
            audit,
            audit_weight: weight,
        });
    }

    /// Takes in another set of rows of the same slice.
    pub fn absorb(&mut self, other: SliceObservations) {
        if self.rows.is_empty() {
            self.rows = other.rows;
        } else {
            self.rows.extend(other.rows);
        }
        let (totals, more) = (&mut self.totals, other.totals);
        totals.rows += more.rows;
        totals.small_ok += more.small_ok;
        totals.large_ok += more.large_ok;
        totals.either_ok += more.either_ok;
        totals.cost_small += more.cost_small;
        totals.cost_large += more.cost_large;
        totals.policy_base += more.policy_base;
        totals.oracle_cost += more.oracle_cost;
        totals.audited += more.audited;
        totals.audit_weight += more.audit_weight;
        totals.audit_weight_squared += more.audit_weight_squared;
        totals.audit_error += more.audit_error;
        totals.audit_disagreements += more.audit_disagreements;
    }

    /// Escalated rows, successes and total cost at threshold `threshold`, by
    /// a direct scan: for rows that were not swept, such as held-out ones.
    pub fn evaluate_at(&self, threshold: f64) -> (u64, u64, i128) {
        let mut escalated = 0u64;
        let mut successes = self.totals.small_ok;
        let mut cost = self.totals.policy_base;
        for row in self
            .rows
            .iter()
            .filter(|row| escalates(row.score, threshold))
        {
            escalated += 1;
            successes = successes + u64::from(row.large_ok) - u64::from(row.small_ok);
            cost += i128::from(row.escalation_cost);
        }
        (escalated, successes, cost)
    }
}

/// One candidate threshold and what it does to the slice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Rows with `score >= threshold` are escalated; `+inf` escalates none.
    pub threshold: f64,
    pub escalated: u64,
    /// Rows whose served answer was acceptable.
    pub successes: u64,
    /// Total cost in picodollars.
    pub cost: i128,
    /// Over the audited rows, weighted: the sum of human minus grader on the
    /// served answer, and of the rows where they disagree.
    pub audit_error: f64,
    pub audit_disagreements: f64,
}

impl Candidate {
    pub fn quality(&self, rows: u64) -> f64 {
        self.successes as f64 / rows as f64
    }

    pub fn failures(&self, rows: u64) -> u64 {
        rows - self.successes
    }

    pub fn mean_cost(&self, rows: u64) -> f64 {
        to_usd(self.cost) / rows as f64
    }

    pub fn escalation_rate(&self, rows: u64) -> f64 {
        self.escalated as f64 / rows as f64
    }

    /// The selection order: cheaper first, then higher quality, then the
    /// lower threshold.
    pub fn preferred_over(&self, other: &Candidate) -> bool {
        (self.cost, std::cmp::Reverse(self.successes))
            .cmp(&(other.cost, std::cmp::Reverse(other.successes)))
            .then(self.threshold.total_cmp(&other.threshold))
            .is_lt()
    }
}

/// Every candidate of a slice, in ascending threshold order: escalate-all
/// first, `+inf` (escalate none) last.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub rows: u64,
    /// Rows with a human's verdicts, and the sums of their weights and
    /// squared weights.
    pub audited: u64,
    pub audit_weight: f64,
    pub audit_weight_squared: f64,
    pub candidates: Vec<Candidate>,
}

impl Curve {
    /// Sorts the observations by descending score (in place) and sweeps the
    /// threshold down through them, one candidate per distinct score.
    pub fn sweep(observations: &mut SliceObservations) -> Curve {
        let rows = &mut observations.rows;
        rows.sort_unstable_by(|a, b| b.score.total_cmp(&a.score));
        let totals = observations.totals;
        let mut candidates = Vec::with_capacity(rows.len() / 2 + 2);
        let mut current = Candidate {
            threshold: f64::INFINITY,
            escalated: 0,
            successes: totals.small_ok,
            cost: totals.policy_base,
            audit_error: totals.audit_error,
            audit_disagreements: totals.audit_disagreements,
        };
        candidates.push(current);
        for group in rows.chunk_by(|a, b| a.score == b.score) {
            for row in group {
                current.escalated += 1;
                current.successes =
                    current.successes + u64::from(row.large_ok) - u64::from(row.small_ok);
                current.cost += i128::from(row.escalation_cost);
                if row.audit.verdicts().is_some() {
                    let weight = f64::from(row.audit_weight);
                    let before = row.audit.error(false, row.small_ok, row.large_ok);
                    let after = row.audit.error(true, row.small_ok, row.large_ok);
                    current.audit_error += weight * (after - before);
                    current.audit_disagreements += weight * (after.abs() - before.abs());
                }
            }
            current.threshold = group[0].score;
            candidates.push(current);
        }
        candidates.reverse();
        Curve {
            rows: totals.rows,
            audited: totals.audited,
            audit_weight: totals.audit_weight,
            audit_weight_squared: totals.audit_weight_squared,
            candidates,
        }
    }

    /// `candidate`'s quality as the grader measured it and as the audited
    /// rows correct it.
    pub fn corrected(&self, candidate: &Candidate) -> crate::stats::Corrected {
        crate::stats::Corrected {
            rows: self.rows,
            graded_ok: candidate.successes,
            audited: self.audited,
            weight: self.audit_weight,
            weight_squared: self.audit_weight_squared,
            error_sum: candidate.audit_error,
            disagreements: candidate.audit_disagreements,
        }
    }

    pub fn escalate_all(&self) -> &Candidate {
        self.candidates
            .first()
            .expect("a curve has at least the +inf candidate")
    }
}

/// At most `limit` of `items` (all when `limit` is 0), evenly spaced along
/// them and always keeping both ends, so documents and charts stay small on
/// slices where nearly every threshold is Pareto-optimal.
pub fn thin<T: Clone>(items: &[T], limit: usize) -> Vec<T> {
    if limit == 0 || items.len() <= limit {
        return items.to_vec();
    }
    if limit == 1 {
        return vec![items[0].clone()];
    }
    let last = items.len() - 1;
    (0..limit)
        .map(|step| items[(step * last + (limit - 1) / 2) / (limit - 1)].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::thin;

    #[test]
    fn thinning_keeps_both_ends_and_spaces_evenly() {
        let points: Vec<usize> = (100..200).collect();
        assert_eq!(thin(&points, 0), points);
        assert_eq!(thin(&points, 500), points);
        assert_eq!(thin(&points, 1), [100]);
        assert_eq!(thin(&points, 2), [100, 199]);
        assert_eq!(thin(&points, 4), [100, 133, 166, 199]);
        let thinned = thin(&points, 10);
        assert_eq!(thinned.len(), 10);
        assert!(
            thinned
                .windows(2)
                .all(|pair| pair[1] - pair[0] >= 10 && pair[1] - pair[0] <= 12)
        );
    }
}
