//! A population whose quality at any threshold is known in closed form, for
//! tests that hold routeval's statements against the truth: the router's
//! score s uniform on [0, 1], the small tier right with probability 1 − s,
//! the large with 0.985 − 0.05 s.

use std::fmt::Write as _;
use std::path::Path;

use super::Random;

/// The true quality of escalating every score at or above `threshold`.
pub fn true_quality(threshold: f64) -> f64 {
    let t = threshold.clamp(0.0, 1.0);
    // ∫₀ᵗ (1 − s) ds + ∫ₜ¹ (0.985 − 0.05 s) ds
    (t - t * t / 2.0) + 0.985 * (1.0 - t) - 0.025 * (1.0 - t * t)
}

/// A graded CSV of `rows` fresh draws in each of `slices` slices (`s0`,
/// `s1`, …), ids `{tag}-s{slice}-r{row}`.
pub fn write_draws(path: &Path, tag: &str, slices: usize, rows: usize, random: &mut Random) {
    let mut text = String::from("id,slice,score,small_ok,large_ok,cost_small,cost_large\n");
    for slice in 0..slices {
        for row in 0..rows {
            let score = (random.unit() * 100_000.0).round() / 100_000.0;
            let small_ok = random.unit() < 1.0 - score;
            let large_ok = random.unit() < 0.985 - 0.05 * score;
            writeln!(
                text,
                "{tag}-s{slice}-r{row},s{slice},{score},{small_ok},{large_ok},0.001,0.03"
            )
            .unwrap();
        }
    }
    std::fs::write(path, text).unwrap();
}
