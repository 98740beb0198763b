//! The reason `--confidence` exists, shown by resampling: a threshold fitted
//! to barely meet the target on a calibration sample misses it on new traffic
//! about half the time; a certified threshold rarely does.

use routeval::calibrate::select;
use routeval::policy::{Curve, GradedRow, SliceObservations};
use routeval::schema::Policy;

use crate::common::Random;

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Draws `rows` requests from a fixed population: difficulty uniform, each
/// tier solves a request with a probability that falls with difficulty, and
/// the router sees difficulty through noise.
fn sample(random: &mut Random, rows: usize) -> SliceObservations {
    let mut observations = SliceObservations::default();
    for _ in 0..rows {
        let difficulty = random.unit();
        let row = GradedRow {
            score: ((difficulty + 0.1 * random.normal()) * 1000.0).round() / 1000.0,
            small_ok: random.unit() < logistic((0.55 - difficulty) / 0.05),
            large_ok: random.unit() < logistic((0.97 - difficulty) / 0.05),
            cost_small: 0.0004,
            cost_large: 0.008,
            cost_verifier: 0.0,
            cost_router: 0.00002,
        };
        observations.push(Policy::Predictive, &row);
    }
    observations
}

#[test]
fn certified_thresholds_miss_the_target_on_new_traffic_far_less_often() {
    const TRIALS: usize = 200;
    const TARGET: f64 = 0.85;
    let mut random = Random::new(2026);
    let mut plain_misses = 0;
    let mut certified_misses = 0;
    let mut certified_found = 0;
    for _ in 0..TRIALS {
        let mut calibration = sample(&mut random, 1_000);
        let fresh = sample(&mut random, 20_000);
        let curve = Curve::sweep(&mut calibration);
        let quality_on_fresh = |choice: Option<usize>| {
            choice.map(|index| {
                let (_, successes, _) = fresh.evaluate_at(curve.candidates[index].threshold);
                successes as f64 / fresh.totals.rows as f64
            })
        };
        let plain = quality_on_fresh(select(&curve, TARGET, None).chosen)
            .expect("the plain fit is feasible");
        plain_misses += usize::from(plain < TARGET);
        if let Some(certified) = quality_on_fresh(select(&curve, TARGET, Some(0.95)).chosen) {
            certified_found += 1;
            certified_misses += usize::from(certified < TARGET);
        }
    }
    let plain_rate = plain_misses as f64 / TRIALS as f64;
    let certified_rate = certified_misses as f64 / certified_found as f64;
    eprintln!(
        "missed the target on fresh traffic: plain fit {plain_rate:.3}, certified {certified_rate:.3} \
         ({certified_found} of {TRIALS} calibrations certified)"
    );
    assert!(
        certified_found >= TRIALS * 9 / 10,
        "certification is possible on this population"
    );
    assert!(
        plain_rate > 0.25,
        "the plain fit misses often: {plain_rate}"
    );
    assert!(
        certified_rate <= 0.10,
        "the certified threshold rarely misses: {certified_rate}"
    );
    assert!(certified_rate * 4.0 <= plain_rate);
}
