//! k tiers without Bonferroni's price, on a population whose truth is known
//! in closed form: the router's score s is uniform on [0, 1], and each tier
//! answers a request of score s acceptably with a probability linear in s.
//! Any assignment's quality and cost are then integrals of lines, so each
//! certified choice is judged against its true quality, not an estimate.

use routeval::calibrate::select;
use routeval::policy::{
    Curve, GradedRow, Policy, SliceObservations, TieredSlice, certify_fixed_sequence,
    certify_in_order, search_tiers,
};
use routeval::stats::max_certifiable_failures;

use crate::common::Random;

/// P(acceptable | s) = intercept − slope · s, and the price, per tier:
/// small, mid, large.
const TIERS: [(f64, f64, f64); 3] = [(1.0, 1.0, 1.0), (0.97, 0.25, 6.0), (0.985, 0.05, 30.0)];
const TARGET: f64 = 0.9;
const DELTA: f64 = 0.1;
const ROWS: usize = 300;
const TRIALS: usize = 300;
/// Picodollars per unit of price.
const UNIT: i64 = 1_000_000;

/// ∫ from x to y of (intercept − slope · s) ds.
fn integral((intercept, slope, _): (f64, f64, f64), x: f64, y: f64) -> f64 {
    intercept * (y - x) - slope * (y * y - x * x) / 2.0
}

/// The true quality and mean price of serving scores below the first
/// threshold by the first of `tiers`, and so on (a threshold is where a
/// tier's range starts; `inf` is past 1).
fn truth(tiers: &[(f64, f64, f64)], thresholds: &[f64]) -> (f64, f64) {
    let mut edges = vec![0.0];
    edges.extend(thresholds.iter().map(|threshold| threshold.clamp(0.0, 1.0)));
    edges.push(1.0);
    let mut quality = 0.0;
    let mut cost = 0.0;
    for (tier, range) in tiers.iter().zip(edges.windows(2)) {
        quality += integral(*tier, range[0], range[1]);
        cost += tier.2 * (range[1] - range[0]);
    }
    (quality, cost)
}

/// The population's cheapest assignment that reaches the target, on a grid
/// of 1,000 steps per threshold.
fn optimum(tiers: &[(f64, f64, f64)]) -> f64 {
    let steps: Vec<f64> = (0..=1000).map(|step| f64::from(step) / 1000.0).collect();
    let mut best = f64::INFINITY;
    if tiers.len() == 2 {
        for &threshold in &steps {
            let (quality, cost) = truth(tiers, &[threshold]);
            if quality >= TARGET {
                best = best.min(cost);
            }
        }
    } else {
        for (index, &first) in steps.iter().enumerate() {
            for &second in &steps[index..] {
                let (quality, cost) = truth(tiers, &[first, second]);
                if quality >= TARGET {
                    best = best.min(cost);
                }
            }
        }
    }
    best
}

/// One slice of `ROWS` requests: scores, and each tier's outcome.
fn draw(random: &mut Random) -> Vec<(f64, [bool; 3])> {
    (0..ROWS)
        .map(|_| {
            let score = (random.unit() * 10_000.0).round() / 10_000.0;
            let ok = TIERS.map(|tier| random.unit() < tier.0 - tier.1 * score);
            (score, ok)
        })
        .collect()
}

fn tiered_slice(rows: &[(f64, [bool; 3])], tiers: &[usize]) -> TieredSlice {
    let mut slice = TieredSlice::new(Policy::Predictive, tiers.len());
    for (score, ok) in rows {
        let ok: Vec<bool> = tiers.iter().map(|&tier| ok[tier]).collect();
        let cost: Vec<i64> = tiers
            .iter()
            .map(|&tier| (TIERS[tier].2 * UNIT as f64) as i64)
            .collect();
        slice.push(&[*score], &ok, &cost, 0, &vec![0; tiers.len() - 1]);
    }
    slice
}

/// The two-tier certification `calibrate --confidence` runs: one threshold,
/// tested from escalate-all towards escalate-none at the full δ.
fn two_tier_certified(rows: &[(f64, [bool; 3])]) -> Option<f64> {
    let mut observations = SliceObservations::default();
    for (score, ok) in rows {
        observations.push(
            Policy::Predictive,
            &GradedRow {
                score: *score,
                small_ok: ok[0],
                large_ok: ok[2],
                cost_small: TIERS[0].2,
                cost_large: TIERS[2].2,
                cost_verifier: 0.0,
                cost_router: 0.0,
            },
        );
    }
    let curve = Curve::sweep(&mut observations);
    select(&curve, TARGET, Some(1.0 - DELTA))
        .chosen
        .map(|index| curve.candidates[index].threshold)
}

/// Bonferroni over every candidate assignment: each tested at δ / M.
fn bonferroni_certified(slice: &TieredSlice) -> Option<Vec<f64>> {
    let rows = slice.rows() as u64;
    search_tiers(slice, Policy::Predictive, 100, |successes, family| {
        max_certifiable_failures(rows, 1.0 - TARGET, DELTA / family as f64)
            .is_some_and(|limit| rows - successes <= limit)
    })
    .chosen
    .map(|chosen| chosen.thresholds)
}

#[derive(Default, Debug)]
struct Tally {
    certified: usize,
    missed: usize,
    cost: f64,
}

impl Tally {
    fn add(&mut self, tiers: &[(f64, f64, f64)], thresholds: Option<&[f64]>) {
        if let Some(thresholds) = thresholds {
            let (quality, cost) = truth(tiers, thresholds);
            self.certified += 1;
            self.missed += usize::from(quality < TARGET);
            self.cost += cost;
        }
    }

    fn line(&self, name: &str, optimum: f64) -> String {
        format!(
            "{name}: certified {:.1}% of slices, missed the target {:.1}% (of all slices), mean true cost {:.2} ({:.2}x the population optimum {optimum:.2})",
            100.0 * self.certified as f64 / TRIALS as f64,
            100.0 * self.missed as f64 / TRIALS as f64,
            self.mean_cost(),
            self.mean_cost() / optimum
        )
    }

    fn mean_cost(&self) -> f64 {
        self.cost / self.certified.max(1) as f64
    }
}

#[test]
fn fixed_sequence_certifies_three_tiers_at_the_full_level_and_beats_two_tiers_on_cost() {
    let three = TIERS.to_vec();
    let two = vec![TIERS[0], TIERS[2]];
    let (three_optimum, two_optimum) = (optimum(&three), optimum(&two));
    let mut random = Random::new(38);
    let (mut sequence, mut bonferroni, mut two_tier, mut pilot) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    for _ in 0..TRIALS {
        let rows = draw(&mut random);
        let slice = tiered_slice(&rows, &[0, 1, 2]);
        // An earlier calibration of the same population orders the
        // candidates, and every row of this one tests them.
        let earlier = tiered_slice(&draw(&mut random), &[0, 1, 2]);
        let order: Vec<Vec<f64>> = search_tiers(&earlier, Policy::Predictive, 100, |_, _| false)
            .frontier
            .into_iter()
            .rev()
            .map(|candidate| candidate.thresholds)
            .collect();
        let in_order = certify_in_order(&slice, Policy::Predictive, &order, TARGET, DELTA);
        pilot.add(
            &three,
            in_order
                .chosen
                .as_ref()
                .map(|chosen| chosen.thresholds.as_slice()),
        );
        let certificate = certify_fixed_sequence(&slice, Policy::Predictive, 100, TARGET, DELTA);
        sequence.add(
            &three,
            certificate
                .chosen
                .as_ref()
                .map(|chosen| chosen.thresholds.as_slice()),
        );
        bonferroni.add(&three, bonferroni_certified(&slice).as_deref());
        two_tier.add(
            &two,
            two_tier_certified(&rows).as_ref().map(std::slice::from_ref),
        );
    }
    eprintln!("n = {ROWS}, target {TARGET}, δ = {DELTA}, {TRIALS} slices:");
    eprintln!(
        "{}",
        pilot.line(
            "three tiers, fixed sequence (an earlier calibration's order)",
            three_optimum
        )
    );
    eprintln!(
        "{}",
        sequence.line("three tiers, fixed sequence (split)", three_optimum)
    );
    eprintln!(
        "{}",
        bonferroni.line("three tiers, Bonferroni", three_optimum)
    );
    eprintln!(
        "{}",
        two_tier.line("two tiers, fixed sequence", two_optimum)
    );
    // The goal: at least 60% of slices certified, the realised miss
    // rate at most δ.
    assert!(sequence.certified * 10 >= TRIALS * 6, "{sequence:?}");
    assert!(
        sequence.missed as f64 <= DELTA * TRIALS as f64,
        "{sequence:?}"
    );
    // An order from an earlier calibration lets every row test: more
    // slices certified, at a lower cost, misses still under δ.
    assert!(pilot.certified > sequence.certified, "{pilot:?}");
    assert!(pilot.missed as f64 <= DELTA * TRIALS as f64, "{pilot:?}");
    assert!(pilot.mean_cost() < sequence.mean_cost(), "{pilot:?}");
    // Bonferroni pays for its family: it certifies fewer slices.
    assert!(bonferroni.certified < sequence.certified, "{bonferroni:?}");
    assert!(bonferroni.missed as f64 <= DELTA * TRIALS as f64);
    // Where the middle tier helps, three certified tiers cost less than two.
    assert!(three_optimum < two_optimum);
    assert!(
        sequence.mean_cost() <= two_tier.mean_cost(),
        "{sequence:?} {two_tier:?}"
    );
}
