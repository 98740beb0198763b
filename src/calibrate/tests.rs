//! The calibration arithmetic against a brute-force twin that recomputes
//! every candidate threshold from the raw rows, with its own binomial tail.

use proptest::prelude::*;

use super::select::{frontier, select};
use crate::policy::Curve;
use crate::policy::{GradedRow, SliceObservations, to_picodollars};
use crate::schema::Policy;
use crate::stats::certifies;

/// What the brute force chooses: (threshold, successes, cost, escalated).
type Choice = (f64, u64, i128, u64);

fn brute_force_curve(rows: &[GradedRow], policy: Policy) -> Vec<Choice> {
    let mut thresholds: Vec<f64> = rows.iter().map(|row| row.score).collect();
    thresholds.push(f64::INFINITY);
    thresholds.sort_by(f64::total_cmp);
    thresholds.dedup_by(|a, b| a == b);
    thresholds
        .into_iter()
        .map(|threshold| {
            let mut successes = 0;
            let mut cost = 0i128;
            let mut escalated = 0;
            for row in rows {
                let escalate = row.score >= threshold;
                escalated += u64::from(escalate);
                successes += u64::from(if escalate { row.large_ok } else { row.small_ok });
                let pico = |usd| i128::from(to_picodollars(usd));
                cost += match (policy, escalate) {
                    (Policy::Predictive, true) => pico(row.cost_router) + pico(row.cost_large),
                    (Policy::Predictive, false) => pico(row.cost_router) + pico(row.cost_small),
                    (Policy::Cascade, true) => {
                        pico(row.cost_small) + pico(row.cost_verifier) + pico(row.cost_large)
                    }
                    (Policy::Cascade, false) => pico(row.cost_small) + pico(row.cost_verifier),
                };
            }
            (threshold, successes, cost, escalated)
        })
        .collect()
}

/// P(Bin(n, p) ≤ k) by summing the probability mass directly.
fn binomial_tail(n: u64, p: f64, k: u64) -> f64 {
    let mut total = 0.0;
    let mut choose = 1.0f64;
    for i in 0..=k.min(n) {
        if i > 0 {
            choose *= (n - i + 1) as f64 / i as f64;
        }
        total += choose * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
    }
    total
}

fn brute_force_choice(
    rows: &[GradedRow],
    policy: Policy,
    target: f64,
    confidence: Option<f64>,
) -> Option<Choice> {
    let n = rows.len() as u64;
    let curve = brute_force_curve(rows, policy);
    let eligible: Vec<Choice> = match confidence {
        None => curve
            .into_iter()
            .filter(|&(_, successes, _, _)| successes as f64 / n as f64 >= target)
            .collect(),
        Some(confidence) => curve
            .into_iter()
            .take_while(|&(_, successes, _, _)| {
                certifies(
                    binomial_tail(n, 1.0 - target, n - successes),
                    1.0 - confidence,
                )
            })
            .collect(),
    };
    eligible
        .into_iter()
        .min_by(|a, b| a.2.cmp(&b.2).then(b.1.cmp(&a.1)).then(a.0.total_cmp(&b.0)))
}

fn graded_row() -> impl Strategy<Value = GradedRow> {
    // Few distinct scores and costs, so ties in both are common.
    let cost = (0u32..4).prop_map(|units| f64::from(units) * 0.000_15);
    (
        (0u32..6).prop_map(|step| f64::from(step) / 4.0 - 0.25),
        any::<bool>(),
        any::<bool>(),
        cost.clone(),
        cost.clone(),
        cost.clone(),
        cost,
    )
        .prop_map(
            |(score, small_ok, large_ok, cost_small, cost_large, cost_verifier, cost_router)| {
                GradedRow {
                    score,
                    small_ok,
                    large_ok,
                    cost_small,
                    cost_large,
                    cost_verifier,
                    cost_router,
                }
            },
        )
}

fn observations(rows: &[GradedRow], policy: Policy) -> SliceObservations {
    let mut observations = SliceObservations::default();
    for row in rows {
        observations.push(policy, row);
    }
    observations
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![Just(Policy::Predictive), Just(Policy::Cascade)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sweep_matches_brute_force(rows in prop::collection::vec(graded_row(), 1..60), policy in policy()) {
        let curve = Curve::sweep(&mut observations(&rows, policy));
        let swept: Vec<Choice> = curve
            .candidates
            .iter()
            .map(|candidate| (candidate.threshold, candidate.successes, candidate.cost, candidate.escalated))
            .collect();
        prop_assert_eq!(swept, brute_force_curve(&rows, policy));
    }

    #[test]
    fn selection_matches_brute_force(
        rows in prop::collection::vec(graded_row(), 1..80),
        policy in policy(),
        target in prop_oneof![Just(0.5), Just(0.75), Just(0.9), Just(1.0), 0.01f64..=1.0],
        confidence in prop_oneof![Just(None), Just(Some(0.5)), Just(Some(0.8)), Just(Some(0.95))],
    ) {
        let curve = Curve::sweep(&mut observations(&rows, policy));
        let chosen = select(&curve, target, confidence)
            .chosen
            .map(|index| {
                let candidate = curve.candidates[index];
                (candidate.threshold, candidate.successes, candidate.cost, candidate.escalated)
            });
        prop_assert_eq!(chosen, brute_force_choice(&rows, policy, target, confidence));
    }

    #[test]
    fn frontier_is_exactly_the_undominated_candidates(
        rows in prop::collection::vec(graded_row(), 1..60),
        policy in policy(),
    ) {
        let curve = Curve::sweep(&mut observations(&rows, policy));
        let on_frontier = frontier(&curve);
        for (index, candidate) in curve.candidates.iter().enumerate() {
            let dominated = curve.candidates.iter().any(|other| {
                other.cost <= candidate.cost
                    && other.successes >= candidate.successes
                    && (other.cost < candidate.cost || other.successes > candidate.successes)
            });
            let same_point_earlier = on_frontier.iter().any(|&kept| {
                kept != index
                    && curve.candidates[kept].cost == candidate.cost
                    && curve.candidates[kept].successes == candidate.successes
            });
            prop_assert_eq!(
                on_frontier.contains(&index),
                !dominated && !same_point_earlier,
                "candidate {:?}", candidate
            );
        }
        let costs: Vec<i128> = on_frontier.iter().map(|&index| curve.candidates[index].cost).collect();
        prop_assert!(costs.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn held_out_scan_agrees_with_the_sweep(
        rows in prop::collection::vec(graded_row(), 1..60),
        policy in policy(),
    ) {
        let observations = observations(&rows, policy);
        let curve = Curve::sweep(&mut observations.clone());
        for candidate in &curve.candidates {
            prop_assert_eq!(
                observations.evaluate_at(candidate.threshold),
                (candidate.escalated, candidate.successes, candidate.cost)
            );
        }
    }
}

#[test]
fn certification_stops_at_the_first_failure() {
    // 200 rows in three score groups. Escalating all leaves 12 failures (the
    // most that certify 0.9 at 0.95 with n = 200), escalating from 0.5 up
    // leaves 18, escalating only 1.0 leaves 6. Fixed-sequence testing must
    // stop at 0.5 and never reach the cheaper 1.0 or +inf, which the plain
    // fit picks.
    let row = |score, small_ok, large_ok| GradedRow {
        score,
        small_ok,
        large_ok,
        cost_small: 0.001,
        cost_large: 0.01,
        cost_verifier: 0.0,
        cost_router: 0.0,
    };
    let mut rows = Vec::new();
    rows.extend((0..60).map(|index| row(0.0, index >= 6, true)));
    rows.extend((0..70).map(|index| row(0.5, true, index >= 12)));
    rows.extend((0..70).map(|_| row(1.0, true, true)));
    let curve = Curve::sweep(&mut observations(&rows, Policy::Predictive));
    let failures: Vec<u64> = curve
        .candidates
        .iter()
        .map(|candidate| candidate.failures(curve.rows))
        .collect();
    assert_eq!(failures, [12, 18, 6, 6]);

    let certified = select(&curve, 0.9, Some(0.95)).chosen;
    assert_eq!(
        certified.map(|index| curve.candidates[index].threshold),
        Some(0.0)
    );
    let plain = select(&curve, 0.9, None).chosen;
    assert_eq!(
        plain.map(|index| curve.candidates[index].threshold),
        Some(f64::INFINITY)
    );
}
