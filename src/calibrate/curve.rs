//! The quality–cost curve of one slice over every candidate threshold, from
//! one sort and running sums.

use super::ingest::{SliceObservations, to_usd};

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
        };
        candidates.push(current);
        for group in rows.chunk_by(|a, b| a.score == b.score) {
            for row in group {
                current.escalated += 1;
                current.successes =
                    current.successes + u64::from(row.large_ok) - u64::from(row.small_ok);
                current.cost += i128::from(row.escalation_cost);
            }
            current.threshold = group[0].score;
            candidates.push(current);
        }
        candidates.reverse();
        Curve {
            rows: totals.rows,
            candidates,
        }
    }

    pub fn escalate_all(&self) -> &Candidate {
        self.candidates
            .first()
            .expect("a curve has at least the +inf candidate")
    }
}
