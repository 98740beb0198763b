//! Certifying a threshold assignment over k tiers without Bonferroni's
//! price: fixed-sequence testing. The candidates are put in an order fixed
//! before the rows that test them are looked at, and each is tested at the
//! full level δ; those certified before the first that is not are the
//! certified ones, and the chance that any of them truly misses the target
//! is at most δ (the sequence stops at the first true null it meets, which
//! it rejects with probability at most δ).
//!
//! Two tiers have such an order by nature: thresholds from escalate-all
//! towards escalate-none. k tiers have none, so the slice's rows are split:
//! the order is the cost–quality frontier the search finds on a third of
//! them (the order rows), walked from its best quality towards its
//! cheapest, and the other two thirds (the test rows) test it.

use crate::stats::{clopper_pearson_lower, max_certifiable_failures};

use super::search::{TieredCandidate, TieredSlice, search_tiers};
use super::tiers::{TieredOutcomes, serve_at};
use crate::schema::Policy;

/// The items of `sequence`, in order, certified before the first that is
/// not: fixed-sequence testing, each at the full level.
pub fn fixed_sequence<T>(
    sequence: impl IntoIterator<Item = T>,
    mut certified: impl FnMut(&T) -> bool,
) -> impl Iterator<Item = T> {
    sequence.into_iter().take_while(move |item| certified(item))
}

/// What a fixed-sequence certification of one slice found.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceCertificate {
    /// The cheapest certified assignment, measured on every row of the
    /// slice; `None` when the first in the order is not certified.
    pub chosen: Option<TieredCandidate>,
    /// The chosen one's one-sided lower bound on quality at level δ, from
    /// the test rows.
    pub lower_bound: Option<f64>,
    /// Rows that ordered the candidates, and rows that tested them.
    pub order_rows: u64,
    pub test_rows: u64,
    /// Candidates in the order, and how many were tested (the certified
    /// ones and the first that was not).
    pub ordered: u64,
    pub tested: u64,
}

impl TieredSlice {
    /// The slice's rows in two parts by position alone, never by outcome:
    /// every third row (from the first) orders the candidates, the other
    /// two test them. A third is enough to find the frontier's shape; the
    /// test's power grows with its rows (on the simulated population of
    /// `tests/calibrate_tiers_guarantee.rs`, halves cost 6% more).
    pub fn order_and_test_parts(&self) -> (TieredSlice, TieredSlice) {
        let mut order = self.empty_like();
        let mut test = self.empty_like();
        for row in 0..self.rows() {
            let (scores, ok, cost, router, verifier) = self.row(row);
            let part = if row % 3 == 0 { &mut order } else { &mut test };
            part.push(scores, ok, cost, router, verifier);
        }
        (order, test)
    }

    /// Serves every row at `thresholds` under `policy`.
    pub fn serve_all(&self, policy: Policy, thresholds: &[f64]) -> TieredCandidate {
        let mut candidate = TieredCandidate {
            thresholds: thresholds.to_vec(),
            successes: 0,
            cost: 0,
            served: vec![0; self.tiers()],
            false_accepts: 0,
        };
        for row in 0..self.rows() {
            let (scores, ok, cost, router, verifier) = self.row(row);
            let (tier, outcome) = serve_at(
                policy,
                scores,
                thresholds,
                &TieredOutcomes {
                    ok,
                    cost,
                    router,
                    verifier,
                },
            );
            candidate.successes += u64::from(outcome.ok);
            candidate.cost += i128::from(outcome.cost);
            candidate.served[tier] += 1;
            candidate.false_accepts += u64::from(outcome.false_accept);
        }
        candidate
    }
}

/// Certifies `target` on `slice` at level `delta` by fixed-sequence testing
/// along the order rows' frontier, on the test rows (see the module).
pub fn certify_fixed_sequence(
    slice: &TieredSlice,
    policy: Policy,
    grid: usize,
    target: f64,
    delta: f64,
) -> SequenceCertificate {
    let (order_part, test_part) = slice.order_and_test_parts();
    if order_part.rows() == 0 || test_part.rows() == 0 {
        return SequenceCertificate {
            chosen: None,
            lower_bound: None,
            order_rows: order_part.rows() as u64,
            test_rows: test_part.rows() as u64,
            ordered: 0,
            tested: 0,
        };
    }
    // The order: the order rows' frontier from its best quality down to its
    // cheapest. Only the order rows shaped it.
    let order: Vec<Vec<f64>> = search_tiers(&order_part, policy, grid, |_, _| false)
        .frontier
        .into_iter()
        .rev()
        .map(|candidate| candidate.thresholds)
        .collect();
    let mut certificate = certify_along(slice, &test_part, policy, &order, target, delta);
    certificate.order_rows = order_part.rows() as u64;
    certificate
}

/// Certifies `target` on `slice` at level `delta` by fixed-sequence testing
/// on every row along `order` (assignments, best quality first), fixed
/// before these rows were seen: an earlier calibration's frontier.
pub fn certify_in_order(
    slice: &TieredSlice,
    policy: Policy,
    order: &[Vec<f64>],
    target: f64,
    delta: f64,
) -> SequenceCertificate {
    certify_along(slice, slice, policy, order, target, delta)
}

/// Tests `order` on `test_part` at the full `delta`, stopping at the first
/// assignment that is not certified; the cheapest certified one, measured
/// on every row of `slice`, is the choice.
fn certify_along(
    slice: &TieredSlice,
    test_part: &TieredSlice,
    policy: Policy,
    order: &[Vec<f64>],
    target: f64,
    delta: f64,
) -> SequenceCertificate {
    let test_rows = test_part.rows() as u64;
    let mut certificate = SequenceCertificate {
        chosen: None,
        lower_bound: None,
        order_rows: 0,
        test_rows,
        ordered: order.len() as u64,
        tested: 0,
    };
    let Some(limit) =
        max_certifiable_failures(test_rows, 1.0 - target, delta).filter(|_| test_rows > 0)
    else {
        return certificate;
    };
    let mut tested = 0;
    let certified: Vec<(TieredCandidate, u64)> = fixed_sequence(
        order.iter().map(|thresholds| {
            let tested_on = test_part.serve_all(policy, thresholds);
            (thresholds, tested_on.successes)
        }),
        |(_, successes)| {
            tested += 1;
            test_rows - successes <= limit
        },
    )
    .map(|(thresholds, successes)| (slice.serve_all(policy, thresholds), successes))
    .collect();
    certificate.tested = tested.min(certificate.ordered);
    // Every certified assignment is covered by the one guarantee; the
    // cheapest of them on every row is the choice.
    if let Some((chosen, test_successes)) = certified.into_iter().min_by(|(a, _), (b, _)| {
        (a.cost, std::cmp::Reverse(a.successes)).cmp(&(b.cost, std::cmp::Reverse(b.successes)))
    }) {
        certificate.lower_bound = Some(clopper_pearson_lower(test_successes, test_rows, delta));
        certificate.chosen = Some(chosen);
    }
    certificate
}
