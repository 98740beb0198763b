//! What a single `drift` run promises when nothing changed, against the
//! truth: on a population whose quality at any threshold is known in closed
//! form (the router's score s uniform on [0, 1]; the small tier right with
//! probability 1 − s, the large with 0.985 − 0.05 s), configs calibrated
//! plainly and family-wise certified are each checked on fresh draws of the
//! same population. Each slice's deployed threshold is known to meet the
//! target or not, so every alarm is known to be true or false.

use std::path::{Path, PathBuf};

use routeval::schema::{DriftDocument, Verdict};

use crate::common::population::{true_quality, write_draws};
use crate::common::{Random, Workspace, example_routes, routeval};

const TARGET: f64 = 0.85;
const CONFIDENCE: f64 = 0.95;
const SLICES: usize = 10;
const ROWS: usize = 1000;
const CALIBRATIONS: usize = 12;
const RUNS: usize = 5;

fn graded_file(path: &Path, tag: &str, random: &mut Random) {
    write_draws(path, tag, SLICES, ROWS, random);
}

/// What the runs of one way of calibrating came to.
#[derive(Debug, Default)]
struct Tally {
    slices: usize,
    slices_truly_below: usize,
    runs: usize,
    runs_recalibrate: usize,
    runs_watch: usize,
    first_runs_recalibrate: usize,
    /// Runs of configs whose every slice truly meets the target: the runs
    /// the per-run bound is about.
    runs_all_meet: usize,
    runs_all_meet_recalibrate: usize,
    /// Slices flagged `recalibrate` for quality, and of those the ones
    /// whose deployed threshold truly misses the target.
    quality_flags: usize,
    quality_flags_truly_below: usize,
}

fn signed_config(workspace: &Workspace, baseline: &Path, name: &str, certify: &[&str]) -> String {
    let calibration = workspace.path(&format!("{name}.json"));
    let output = routeval()
        .args(["calibrate", "--json", "--target", &TARGET.to_string()])
        .args(certify)
        .arg("--results")
        .arg(baseline)
        .arg("--out")
        .arg(&calibration)
        .output()
        .unwrap();
    assert!(
        output.status.code().unwrap() < 2,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    workspace
        .gate_on(
            baseline,
            &[example_routes("predictive.toml")],
            std::slice::from_ref(&calibration),
            &format!("dist-{name}"),
            &["--target", &TARGET.to_string(), "--allow-unknown-slices"],
        )
        .code(0);
    workspace
        .report(&format!("dist-{name}"))
        .emitted
        .unwrap()
        .config
}

fn drift(config: &str, fresh: &Path, baseline: &Path) -> DriftDocument {
    let output = routeval()
        .args(["drift", "--json", "--config", config, "--results"])
        .arg(fresh)
        .arg("--baseline-results")
        .arg(baseline)
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stderr)))
}

fn tally(workspace: &Workspace, mode: &str, certify: &[&str], random: &mut Random) -> Tally {
    let mut tally = Tally::default();
    for calibration in 0..CALIBRATIONS {
        let baseline: PathBuf = workspace.path(&format!("{mode}-baseline-{calibration}.csv"));
        graded_file(&baseline, &format!("{mode}{calibration}"), random);
        let config = signed_config(
            workspace,
            &baseline,
            &format!("{mode}-{calibration}"),
            certify,
        );
        let mut truly_below = std::collections::BTreeSet::new();
        for run in 0..RUNS {
            let fresh = workspace.path(&format!("{mode}-fresh-{calibration}-{run}.csv"));
            graded_file(&fresh, &format!("{mode}{calibration}run{run}"), random);
            let document = drift(&config, &fresh, &baseline);
            std::fs::remove_file(&fresh).unwrap();
            if run == 0 {
                for slice in &document.slices {
                    let threshold = slice.threshold.expect("a predictive slice").0;
                    if true_quality(threshold) < TARGET {
                        truly_below.insert(slice.slice.clone());
                    }
                }
                tally.slices += document.slices.len();
                tally.slices_truly_below += truly_below.len();
            }
            let recalibrate = document.verdict == Verdict::Recalibrate;
            tally.runs += 1;
            tally.runs_recalibrate += usize::from(recalibrate);
            tally.runs_watch += usize::from(document.verdict == Verdict::Watch);
            tally.first_runs_recalibrate += usize::from(run == 0 && recalibrate);
            if truly_below.is_empty() {
                tally.runs_all_meet += 1;
                tally.runs_all_meet_recalibrate += usize::from(recalibrate);
            }
            for slice in &document.slices {
                let quality_flag = slice.verdict == Verdict::Recalibrate
                    && slice
                        .reasons
                        .iter()
                        .any(|reason| reason.contains("quality"));
                if quality_flag {
                    tally.quality_flags += 1;
                    tally.quality_flags_truly_below +=
                        usize::from(truly_below.contains(&slice.slice));
                }
            }
        }
    }
    eprintln!(
        "{mode}: {} of {} slices truly below the target; {} of {} runs recalibrate ({} of {} first runs), {} watch; \
         runs of configs whose every slice meets the target: {} of {} recalibrate; \
         quality flags: {} of {} on slices truly below",
        tally.slices_truly_below,
        tally.slices,
        tally.runs_recalibrate,
        tally.runs,
        tally.first_runs_recalibrate,
        CALIBRATIONS,
        tally.runs_watch,
        tally.runs_all_meet_recalibrate,
        tally.runs_all_meet,
        tally.quality_flags_truly_below,
        tally.quality_flags,
    );
    tally
}

/// The smallest count the number of runs raising `recalibrate` stays at
/// or below with probability 0.999 when each run does so with probability
/// at most δ.
fn allowed(runs: usize, delta: f64) -> usize {
    (0..=runs)
        .find(|&count| routeval::stats::binomial_cdf(runs as u64, delta, count as u64) >= 0.999)
        .unwrap()
}

#[test]
fn per_run_alarms_against_the_true_quality_of_plain_and_certified_configs() {
    let workspace = Workspace::new();
    let mut random = Random::new(38);
    let delta = 1.0 - CONFIDENCE;
    let certified = tally(
        &workspace,
        "certified",
        &["--confidence", &CONFIDENCE.to_string(), "--familywise"],
        &mut random,
    );
    let plain = tally(&workspace, "plain", &[], &mut random);

    // A family-wise certified config meets the target in every slice with
    // probability 1 − δ, so its runs raise `recalibrate` in at most about
    // δ of runs.
    assert!(
        certified.runs_recalibrate <= allowed(certified.runs, delta),
        "{certified:?}"
    );
    // The bound is about runs of configs whose slices all meet the target.
    assert!(
        certified.runs_all_meet * 4 >= certified.runs * 3,
        "{certified:?}"
    );
    assert!(
        certified.runs_all_meet_recalibrate <= allowed(certified.runs_all_meet, delta),
        "{certified:?}"
    );
    // A plain calibration's threshold sits where its sample barely met the
    // target, so a large share of its slices truly miss it, and hardly any
    // config meets it everywhere: the per-run bound does not cover it.
    assert!(
        plain.slices_truly_below * 4 >= plain.slices,
        "{} of {} plain slices truly below: {plain:?}",
        plain.slices_truly_below,
        plain.slices
    );
    assert!(plain.runs_all_meet * 4 < plain.runs, "{plain:?}");
    assert!(
        certified.slices_truly_below * 10 < certified.slices,
        "{certified:?}"
    );
    // What drift flags for quality on a plain config is mostly true: the
    // slice's deployed threshold does miss the target.
    assert!(
        plain.quality_flags_truly_below * 10 >= plain.quality_flags * 8,
        "{plain:?}"
    );
}
