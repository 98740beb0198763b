//! What `calibrate --holdout` says, against the truth: on a population
//! whose quality at any threshold is known in closed form (the router's
//! score s uniform on [0, 1]; the small tier right with probability 1 − s,
//! the large with 0.985 − 0.05 s), how often the held-out interval misses
//! the chosen threshold's true quality, and how often a slice judged
//! `below_within_noise` truly misses the target.

use std::path::{Path, PathBuf};

use routeval::schema::{CalibrationDocument, HoldoutVerdict};

use crate::common::population::{true_quality, write_draws};
use crate::common::{Random, routeval};

const TARGET: f64 = 0.85;
const CONFIDENCE: f64 = 0.95;
const SLICES: usize = 25;
/// Rows a slice, a quarter of them held out.
const ROWS: usize = 400;
const FILES: usize = 24;

fn graded_file(directory: &Path, file: usize, random: &mut Random) -> PathBuf {
    let path = directory.join(format!("graded-{file}.csv"));
    write_draws(&path, &format!("f{file}"), SLICES, ROWS, random);
    path
}

#[test]
fn held_out_intervals_and_verdicts_against_the_true_quality() {
    let directory = tempfile::tempdir().unwrap();
    let mut random = Random::new(4);
    let (mut intervals, mut missed) = (0usize, 0usize);
    let (mut within_noise, mut within_noise_truly_below) = (0usize, 0usize);
    let (mut meets, mut meets_truly_below) = (0usize, 0usize);
    for file in 0..FILES {
        let graded = graded_file(directory.path(), file, &mut random);
        let output = routeval()
            .args(["calibrate", "--json", "--results"])
            .arg(&graded)
            .args(["--target", &TARGET.to_string(), "--holdout", "0.25"])
            .args(["--seed", &file.to_string()])
            .output()
            .unwrap();
        assert!(
            output.status.code().unwrap() < 2,
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let document: CalibrationDocument = serde_json::from_slice(&output.stdout).unwrap();
        for slice in &document.slices {
            let (Some(threshold), Some(holdout)) = (slice.threshold, slice.holdout.as_ref()) else {
                continue;
            };
            let truth = true_quality(threshold.0);
            let [low, high] = holdout.quality_interval.unwrap();
            intervals += 1;
            missed += usize::from(truth < low || truth > high);
            match holdout.verdict.unwrap() {
                HoldoutVerdict::BelowWithinNoise => {
                    within_noise += 1;
                    within_noise_truly_below += usize::from(truth < TARGET);
                }
                HoldoutVerdict::MeetsTarget => {
                    meets += 1;
                    meets_truly_below += usize::from(truth < TARGET);
                }
                HoldoutVerdict::BelowTarget => {}
            }
        }
    }
    let nominal = intervals as f64 * (1.0 - CONFIDENCE);
    let share = |part: usize, whole: usize| part as f64 / whole.max(1) as f64;
    eprintln!(
        "{intervals} held-out intervals at {CONFIDENCE}: {missed} missed the true quality ({:.2} of S·(1 − C) = {nominal:.1})",
        missed as f64 / nominal
    );
    eprintln!(
        "below_within_noise: {within_noise} slices, {:.1}% truly below {TARGET}; meets_target: {meets} slices, {:.1}% truly below",
        100.0 * share(within_noise_truly_below, within_noise),
        100.0 * share(meets_truly_below, meets)
    );
    assert!(intervals >= FILES * SLICES * 9 / 10);
    // A two-sided Clopper–Pearson interval misses with probability at most
    // 1 − C: the misses stay under S·(1 − C) plus three standard errors.
    assert!(
        (missed as f64) < nominal + 3.0 * nominal.sqrt(),
        "{missed} of {intervals}"
    );
    // A plain threshold sits where its sample barely met the target, so a
    // slice held out below it, within noise, most often truly misses it:
    // `below_within_noise` is no sign that the slice is fine.
    assert!(within_noise >= 30, "{within_noise}");
    assert!(
        share(within_noise_truly_below, within_noise) > 0.5,
        "{within_noise_truly_below} of {within_noise}"
    );
    assert!(share(within_noise_truly_below, within_noise) > share(meets_truly_below, meets));
}
