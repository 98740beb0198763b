//! Three tiers through `calibrate`: the simulated three-model population,
//! where three tiers reach the target for less than any two; the same
//! numbers as `simulate --compare`; a certified calibration that rarely
//! misses on fresh traffic; and bad input.

use std::path::{Path, PathBuf};

use routeval::calibrate::acceptable;
use routeval::policy::{Policy, TieredSlice, predictive_tier, search_tiers, to_picodollars};
use routeval::simulate::{Simulation, compare_tiers};

use crate::common::{calibration_and_text, routeval};

fn simulated(directory: &Path, requests: usize, seed: u64) -> std::path::PathBuf {
    let path = directory.join(format!("simulated-{seed}.parquet"));
    routeval()
        .args([
            "simulate",
            "--requests",
            &requests.to_string(),
            "--seed",
            &seed.to_string(),
            "--out",
        ])
        .arg(&path)
        .assert()
        .code(0);
    path
}

/// `routeval gate` of `candidates` on `results` with `flags`, signing with a
/// key made in `directory` (once) and writing to `directory/dist`.
fn gate(
    directory: &Path,
    candidates: &[&Path],
    results: &Path,
    flags: &[&std::ffi::OsStr],
) -> (std::process::Output, PathBuf) {
    let key = directory.join("k.key");
    if !key.exists() {
        routeval()
            .arg("keygen")
            .arg("--out")
            .arg(&key)
            .assert()
            .code(0);
    }
    let out = directory.join("dist");
    let output = routeval()
        .arg("gate")
        .arg("--candidates")
        .args(candidates)
        .arg("--results")
        .arg(results)
        .args(flags)
        .arg("--key")
        .arg(&key)
        .arg("--rubrics")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics"))
        .args(["--serve-url", "http://127.0.0.1:8090/v1"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    (output, out)
}

#[test]
fn three_tiers_calibrate_to_the_numbers_simulate_compares() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 20_000, 0);
    let simulation = Simulation::default();
    let compared = compare_tiers(
        &simulation,
        &simulation.rows(),
        routeval::units::Target::new(0.95).unwrap(),
    );
    for (policy, name) in [
        ("predictive", "predictive small→mid→large"),
        ("cascade", "cascade small→mid→large"),
    ] {
        let (document, _) = calibration_and_text(
            &results,
            &[
                "--target",
                "0.95",
                "--tiers",
                "small,mid,large",
                "--grid",
                "512",
                "--policy",
                policy,
            ],
        );
        assert_eq!(document.schema_version, 7);
        assert_eq!(
            document.tiers.as_deref(),
            Some(&["small".to_owned(), "mid".to_owned(), "large".to_owned()][..])
        );
        let slice = &document.slices[0];
        let tiered = slice.tiered.as_ref().unwrap();
        let summary = compared
            .iter()
            .find(|summary| summary.policy == name)
            .unwrap();
        let thresholds: Vec<f64> = tiered
            .thresholds
            .iter()
            .map(|threshold| threshold.0)
            .collect();
        assert_eq!(Some(thresholds), summary.thresholds, "{name}");
        assert_eq!(slice.quality, Some(summary.quality), "{name}");
        assert!(
            (slice.mean_cost.unwrap() * 1000.0 - summary.dollars_per_1k).abs() < 1e-12,
            "{name}"
        );
        assert_eq!(tiered.served, summary.shares, "{name}");
        assert!(
            slice.threshold.is_none(),
            "a three-tier slice has no single threshold"
        );
        if policy == "predictive" {
            assert!(tiered.thresholds[0].0 <= tiered.thresholds[1].0);
        }
    }
    // The two-tier policies of the same table: three tiers are cheaper
    // than the best of them at the same target.
    let (three, _) = calibration_and_text(
        &results,
        &["--target", "0.95", "--tiers", "small,mid,large"],
    );
    let best_two = [["small", "large"], ["small", "mid"], ["mid", "large"]]
        .iter()
        .filter_map(|pair| {
            let (document, _) =
                calibration_and_text(&results, &["--target", "0.95", "--tiers", &pair.join(",")]);
            document.slices[0].mean_cost
        })
        .fold(f64::INFINITY, f64::min);
    let three_cost = three.slices[0].mean_cost.unwrap();
    assert!(
        three_cost < best_two,
        "three tiers {three_cost} against the best two {best_two}"
    );
}

#[test]
fn two_tiers_named_small_and_large_are_todays_calibration() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 3000, 1);
    let (plain, plain_text) = calibration_and_text(&results, &["--target", "0.9"]);
    let (named, named_text) =
        calibration_and_text(&results, &["--target", "0.9", "--tiers", "small,large"]);
    assert_eq!(plain, named);
    assert_eq!(plain_text, named_text);
    assert!(
        !plain_text.contains("\"tiers\""),
        "two-tier documents keep their keys"
    );
    // The k-tier search with k = 2 chooses what the two-tier sweep chooses.
    let simulation = Simulation {
        requests: 3000,
        seed: 1,
        ..Simulation::default()
    };
    let mut slice = TieredSlice::new(Policy::Predictive, 2);
    for row in simulation.rows() {
        slice.push(
            &[row.router_score],
            &[row.small_ok, row.large_ok],
            &[
                to_picodollars(simulation.small_cost()),
                to_picodollars(simulation.large_cost()),
            ],
            to_picodollars(simulation.router_cost),
            &[0],
        );
    }
    let search = search_tiers(
        &slice,
        Policy::Predictive,
        1 << 20,
        acceptable(3000, 0.9, None),
    );
    assert!(search.exact);
    let chosen = search.chosen.unwrap();
    assert_eq!(
        Some(chosen.thresholds[0]),
        plain.slices[0].threshold.map(|threshold| threshold.0)
    );
    assert_eq!(
        Some(chosen.successes as f64 / 3000.0),
        plain.slices[0].quality
    );
}

#[test]
fn certified_three_tier_thresholds_rarely_miss_on_fresh_traffic() {
    const TRIALS: u64 = 60;
    const TARGET: f64 = 0.95;
    let population = Simulation {
        requests: 100_000,
        seed: 9_999,
        ..Simulation::default()
    };
    let fresh = population.rows();
    let quality_on_fresh = |thresholds: &[f64]| {
        let ok = fresh
            .iter()
            .filter(|row| match predictive_tier(row.router_score, thresholds) {
                0 => row.small_ok,
                1 => row.mid_ok,
                _ => row.large_ok,
            })
            .count();
        ok as f64 / fresh.len() as f64
    };
    let costs = [
        population.small_cost(),
        population.mid_cost(),
        population.large_cost(),
    ]
    .map(to_picodollars);
    let (mut plain_misses, mut certified_misses, mut certified_found) = (0, 0, 0);
    for trial in 0..TRIALS {
        let sample = Simulation {
            requests: 3000,
            seed: trial,
            ..Simulation::default()
        };
        let mut slice = TieredSlice::new(Policy::Predictive, 3);
        for row in sample.rows() {
            slice.push(
                &[row.router_score],
                &[row.small_ok, row.mid_ok, row.large_ok],
                &costs,
                0,
                &[0, 0],
            );
        }
        let plain = search_tiers(
            &slice,
            Policy::Predictive,
            64,
            acceptable(3000, TARGET, None),
        );
        plain_misses += usize::from(quality_on_fresh(&plain.chosen.unwrap().thresholds) < TARGET);
        let certified = search_tiers(
            &slice,
            Policy::Predictive,
            64,
            acceptable(3000, TARGET, Some(0.9)),
        );
        if let Some(chosen) = certified.chosen {
            certified_found += 1;
            certified_misses += usize::from(quality_on_fresh(&chosen.thresholds) < TARGET);
        }
    }
    let plain_rate = plain_misses as f64 / TRIALS as f64;
    let certified_rate = certified_misses as f64 / f64::from(certified_found);
    eprintln!(
        "missed {TARGET} on fresh traffic: plain {plain_rate:.3}, certified {certified_rate:.3} ({certified_found} of {TRIALS} certified)"
    );
    assert!(
        certified_found as u64 >= TRIALS * 9 / 10,
        "certification is possible here"
    );
    assert!(plain_rate > 0.2, "the plain fit misses often: {plain_rate}");
    assert!(
        certified_rate <= 0.1,
        "held-out misses stay under δ: {certified_rate}"
    );
}

#[test]
fn certified_three_tiers_record_how_they_were_tested() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 1_500, 4);
    let calibrated = |extra: &[&str]| {
        let common = [
            "--target",
            "0.9",
            "--confidence",
            "0.9",
            "--tiers",
            "small,mid,large",
        ];
        calibration_and_text(&results, &[&common[..], extra].concat()).0
    };
    let certified = |test: &str| {
        let document = calibrated(&["--tier-test", test]);
        assert_eq!(document.schema_version, 7);
        let slice = document.slices[0].clone();
        let tiered = slice.tiered.clone().unwrap();
        (slice, tiered.certification.unwrap(), tiered.candidates)
    };
    let (slice, sequence, _) = certified("fixed-sequence");
    assert_eq!(sequence.test, routeval::schema::TierTest::FixedSequence);
    assert_eq!(sequence.order.as_deref(), Some("split"));
    // Every third row orders, the other two test.
    assert_eq!((sequence.order_rows, sequence.test_rows), (500, 1_000));
    assert!((sequence.level - 0.1).abs() < 1e-12);
    assert!(sequence.tested >= 1);
    assert!(slice.feasible, "{slice:?}");
    let lower = slice.quality_lower_bound.unwrap();
    assert!(lower >= 0.9 && lower <= slice.quality.unwrap(), "{slice:?}");
    let (bonferroni_slice, bonferroni, candidates) = certified("bonferroni");
    assert_eq!(bonferroni.test, routeval::schema::TierTest::Bonferroni);
    assert_eq!(bonferroni.order, None);
    assert_eq!((bonferroni.order_rows, bonferroni.test_rows), (0, 1_500));
    assert_eq!(bonferroni.tested, candidates);
    assert!((bonferroni.level - 0.1 / candidates as f64).abs() < 1e-15);
    // Paying for the whole family costs at least as much here.
    assert!(
        bonferroni_slice.mean_cost.unwrap_or(f64::INFINITY) >= slice.mean_cost.unwrap(),
        "{bonferroni_slice:?} {slice:?}"
    );

    // An earlier calibration of other rows orders the candidates: every
    // row tests them.
    let earlier_results = simulated(directory.path(), 1_500, 5);
    let earlier = directory.path().join("earlier.json");
    routeval()
        .args([
            "calibrate",
            "--target",
            "0.9",
            "--tiers",
            "small,mid,large",
            "--results",
        ])
        .arg(&earlier_results)
        .arg("--out")
        .arg(&earlier)
        .assert()
        .code(0);
    let document = calibrated(&["--order-from", earlier.to_str().unwrap()]);
    let ordered = document.slices[0]
        .tiered
        .clone()
        .unwrap()
        .certification
        .unwrap();
    let sha256 = routeval::digest::sha256_file(&earlier).unwrap();
    assert_eq!(ordered.order, Some(format!("calibration:{sha256}")));
    assert_eq!((ordered.order_rows, ordered.test_rows), (0, 1_500));
    assert!(document.slices[0].feasible);
    // An order from the very rows it would test is refused, and so is one
    // for two tiers.
    for (flags, expected) in [
        (
            vec!["--tiers", "small,mid,large"],
            "calibrated on these very results; an order must be fixed before the rows that test it (--order-from)",
        ),
        (
            vec!["--tiers", "small,large"],
            "--order-from orders the candidates of more than two tiers",
        ),
    ] {
        let output = routeval()
            .args([
                "calibrate",
                "--target",
                "0.9",
                "--confidence",
                "0.9",
                "--results",
            ])
            .arg(&earlier_results)
            .args(&flags)
            .arg("--order-from")
            .arg(&earlier)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn bad_tier_input_is_one_line_exit_2_and_nothing_written() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 500, 2);
    let out = directory.path().join("calibration.json");
    let cases: [(&[&str], &str); 5] = [
        (&["--tiers", "small,xl,large"], "missing column \"xl_ok\""),
        (
            &["--tiers", "small,mid,huge"],
            "missing column \"huge_ok\" (named by --tiers)",
        ),
        (
            &["--tiers", "small"],
            "for '--tiers <A,B,...>': \"small\": name at least two tiers",
        ),
        (
            &["--tiers", "small,mid,large,largest"],
            "tier \"large\" can only be the last",
        ),
        (
            &["--tiers", "small,xl,large"],
            "missing column \"xl_ok\" (a tier named by --tiers",
        ),
    ];
    for (flags, expected) in cases {
        let output = routeval()
            .args(["calibrate", "--target", "0.9", "--results"])
            .arg(&results)
            .args(flags)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{flags:?}: {stderr}");
        assert!(stderr.contains(expected), "{flags:?}: {stderr}");
        assert!(!out.exists(), "{flags:?}: nothing written");
    }
    // A cascade stage without its verifier's score.
    let csv = directory.path().join("abc.csv");
    std::fs::write(
        &csv,
        "id,slice,a_ok,b_ok,c_ok,cost_a,cost_b,cost_c,score_a\nq1,s,true,false,true,0.1,0.2,0.3,0.5\nq2,s,false,true,true,0.1,0.2,0.3,0.9\n",
    )
    .unwrap();
    let output = routeval()
        .args([
            "calibrate",
            "--target",
            "0.9",
            "--tiers",
            "a,b,c",
            "--policy",
            "cascade",
            "--results",
        ])
        .arg(&csv)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("missing column \"score_b\" (the verifier score of a cascade stage)"),
        "{stderr}"
    );
    assert!(!out.exists());
    // The same file is a predictive table when `score_a` is the router's.
    let (document, _) = calibration_and_text(
        &csv,
        &[
            "--target",
            "0.5",
            "--tiers",
            "a,b,c",
            "--score-col",
            "score_a",
        ],
    );
    assert_eq!(document.slices[0].n, 2);
    assert!(document.slices[0].feasible);

    // A three-tier calibration cannot give a two-tier table its thresholds.
    let (_, text) =
        calibration_and_text(&results, &["--target", "0.9", "--tiers", "small,mid,large"]);
    let three = directory.path().join("three.json");
    std::fs::write(&three, text).unwrap();
    let table = directory.path().join("predictive.toml");
    std::fs::write(
        &table,
        three_tier_table("[policy.predictive]\nsmall = \"mini\"\nlarge = \"frontier\"\nthresholds_from_calibration = true"),
    )
    .unwrap();
    let (output, _) = gate(
        directory.path(),
        &[&table],
        &results,
        &[
            "--target".as_ref(),
            "0.9".as_ref(),
            "--calibration".as_ref(),
            three.as_os_str(),
        ],
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "no calibration is for a predictive policy on the score column \"score\" (given: predictive on \"score\" over small, mid, large)"
        ),
        "{stderr}"
    );
    assert!(
        !directory
            .path()
            .join("dist")
            .join("gate-report.json")
            .exists()
    );
}

#[test]
fn the_report_draws_the_three_tier_frontier_against_the_two_tier_curves() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 4000, 3);
    let mut paths = Vec::new();
    for (name, flags) in [
        ("two.json", vec!["--target", "0.95"]),
        (
            "three.json",
            vec!["--target", "0.95", "--tiers", "small,mid,large"],
        ),
    ] {
        let (_, text) = calibration_and_text(&results, &flags);
        let path = directory.path().join(name);
        std::fs::write(&path, text).unwrap();
        paths.push(path);
    }
    let out = directory.path().join("report");
    routeval()
        .args(["report", "--results"])
        .arg(&results)
        .arg("--calibration")
        .args(&paths)
        .arg("--out")
        .arg(&out)
        .assert()
        .code(0);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("Calibration of 3 tiers: predictive small→mid→large, target 0.95"),
        "summary"
    );
    assert!(
        html.contains("chosen predictive small→mid→large"),
        "the chosen point is marked"
    );
    let (three, _) = calibration_and_text(
        &results,
        &["--target", "0.95", "--tiers", "small,mid,large"],
    );
    let thresholds: Vec<String> = three.slices[0]
        .tiered
        .as_ref()
        .unwrap()
        .thresholds
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        html.contains(&format!("<td>{}</td>", thresholds.join(", "))),
        "the thresholds are tabled"
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains(
            "**Guaranteed per slice**, calibration: predictive small→mid→large on score, plain fit, target 0.95"
        ),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("| {} |", thresholds.join(", "))),
        "{summary}"
    );
}

/// A table of small, mid and large routes (and a verifier) with `policy`.
fn three_tier_table(policy: &str) -> String {
    let route = |name: &str, tier: &str, price: f64| {
        format!(
            "[[routes]]\nname = \"{name}\"\nprovider = \"openai\"\nmodel = \"{name}-2026-01-01\"\nregion = \"eu-west-1\"\ntier = \"{tier}\"\nprompt_variant = \"v1\"\nprice_input_per_mtok = {price}\nprice_output_per_mtok = {price}\nrpm = 100000\ntpm = 100000000\n\n"
        )
    };
    format!(
        "logical_model = \"support\"\n\n{}{}{}{}{policy}\n{}",
        route("mini", "small", 0.15),
        route("mid", "mid", 0.6),
        route("frontier", "large", 3.0),
        route("judge", "verifier", 0.1),
        crate::common::serving_for(policy),
    )
}

/// Two-tier, three-tier and three-stage candidates gated once on a
/// simulated three-model population, with their calibrations: the
/// fixture the tests below read.
struct ThreeTierGate {
    directory: tempfile::TempDir,
    results: PathBuf,
    /// Two tiers, three tiers, three cascade stages.
    calibrations: [PathBuf; 3],
    out: PathBuf,
    report: routeval::schema::GateReport,
}

impl ThreeTierGate {
    fn shared() -> &'static ThreeTierGate {
        static SHARED: std::sync::OnceLock<ThreeTierGate> = std::sync::OnceLock::new();
        SHARED.get_or_init(ThreeTierGate::new)
    }

    fn new() -> ThreeTierGate {
        let directory = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let results = simulated(directory.path(), 6000, 4);
        let calibrations = [
            ("two.json", vec!["--target", "0.95"]),
            (
                "three.json",
                vec!["--target", "0.95", "--tiers", "small,mid,large"],
            ),
            (
                "stages.json",
                vec![
                    "--target",
                    "0.95",
                    "--tiers",
                    "small,mid,large",
                    "--policy",
                    "cascade",
                ],
            ),
        ]
        .map(|(name, flags)| {
            let (_, text) = calibration_and_text(&results, &flags);
            let path = directory.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        });
        let candidates = [
            (
                "two.toml",
                "[policy.predictive]\nsmall = \"mini\"\nlarge = \"frontier\"\nthresholds_from_calibration = true",
            ),
            (
                "three.toml",
                "[policy.predictive]\ntiers = [\"mini\", \"mid\", \"frontier\"]\nthresholds_from_calibration = true",
            ),
            (
                "stages.toml",
                "[policy.cascade]\nstages = [\"mini\", \"mid\", \"frontier\"]\nverifier = \"judge\"\nthresholds_from_calibration = true",
            ),
        ]
        .map(|(name, policy)| {
            let path = directory.path().join(name);
            std::fs::write(&path, three_tier_table(policy)).unwrap();
            path
        });
        let mut flags: Vec<&std::ffi::OsStr> = vec![
            "--json".as_ref(),
            "--target".as_ref(),
            "0.95".as_ref(),
            "--calibration".as_ref(),
        ];
        flags.extend(calibrations.iter().map(|path| path.as_os_str()));
        let candidates: Vec<&Path> = candidates.iter().map(PathBuf::as_path).collect();
        let (output, out) = gate(directory.path(), &candidates, &results, &flags);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report =
            serde_json::from_str(&std::fs::read_to_string(out.join("gate-report.json")).unwrap())
                .unwrap();
        ThreeTierGate {
            directory,
            results,
            calibrations,
            out,
            report,
        }
    }

    fn calibration(&self, index: usize) -> routeval::schema::CalibrationDocument {
        serde_json::from_str(&std::fs::read_to_string(&self.calibrations[index]).unwrap()).unwrap()
    }

    /// The config the gate signed: the three-tier candidate's.
    fn emitted(&self) -> &str {
        &self
            .report
            .emitted
            .as_ref()
            .expect("a candidate passed")
            .config
    }
}

/// The population after the mid model got worse, in a directory of the
/// caller's.
fn worse_mid_model(directory: &Path) -> PathBuf {
    let worse = directory.join("worse.parquet");
    routeval()
        .args([
            "simulate",
            "--requests",
            "6000",
            "--seed",
            "5",
            "--mid-skill",
            "0.6",
            "--out",
        ])
        .arg(&worse)
        .assert()
        .code(0);
    worse
}

#[test]
fn each_k_tier_candidate_measures_exactly_what_its_calibration_measured() {
    let gated = ThreeTierGate::shared();
    let report = &gated.report;
    for index in [1, 2] {
        let document = gated.calibration(index);
        let slice = &document.slices[0];
        let candidate = &report.candidates[index];
        let measured = &candidate.slices[0];
        assert_eq!(Some(measured.quality), slice.quality, "{}", candidate.file);
        assert_eq!(
            Some(measured.mean_cost),
            slice.mean_cost,
            "{}",
            candidate.file
        );
        assert_eq!(
            Some(measured.escalation_rate),
            slice.escalation_rate,
            "{}",
            candidate.file
        );
    }
    // The gate reports each tier's share, as the calibration does; two
    // tiers keep the keys they had.
    assert_eq!(
        report.candidates[1].slices[0].served.as_ref(),
        Some(
            &gated.calibration(1).slices[0]
                .tiered
                .as_ref()
                .unwrap()
                .served
        )
    );
    assert_eq!(report.candidates[0].overall.served, None);
}

#[test]
fn the_gate_measures_time_to_first_token_from_each_tiers_latency() {
    // From the simulated tiers' constant latencies: a predictive row waits
    // the router (20 ms) and its tier's first token (250, 500, 900 ms); a
    // cascade row every verified stage (small 3,000 + 400 ms, mid 4,000 +
    // 400 ms) before the one it is served by, which it waits whole and
    // verified, or the large tier's first token (900 ms).
    let gated = ThreeTierGate::shared();
    for (index, waits) in [(1, [270.0, 520.0, 920.0]), (2, [3400.0, 7800.0, 8700.0])] {
        let document = gated.calibration(index);
        let served = &document.slices[0].tiered.as_ref().unwrap().served;
        let n = document.slices[0].n as f64;
        // The nearest-rank 95th percentile of the rows' waits.
        let rank = (0.95 * n).ceil();
        let mut below = 0.0;
        let expected = waits
            .iter()
            .zip(served)
            .find(|(_, share)| {
                below += (*share * n).round();
                below >= rank
            })
            .map(|(wait, _)| *wait);
        let candidate = &gated.report.candidates[index];
        assert_eq!(candidate.overall.p95_ms, expected, "{}", candidate.file);
    }
}

#[test]
fn three_tiers_reach_the_target_for_less_than_two_and_are_signed() {
    let gated = ThreeTierGate::shared();
    let two = gated.report.candidates[0].overall.mean_cost;
    let three = gated.report.candidates[1].overall.mean_cost;
    assert!(three < two, "three tiers {three} against two {two}");
    let emitted = gated.emitted();
    assert!(emitted.ends_with("route-config.v1.json"), "{emitted}");
    let config = std::fs::read_to_string(emitted).unwrap();
    assert!(config.contains("\"predictive_tiers\""), "{config}");
    assert!(
        config.contains("\"schema\":\"routeval.route-config/4\""),
        "{config}"
    );
    routeval()
        .arg("verify")
        .arg(emitted)
        .arg("--pubkey")
        .arg(gated.directory.path().join("k.key.pub"))
        .assert()
        .code(0);
}

#[test]
fn litellm_sends_the_three_tier_logical_model_to_serve() {
    // Serve carries the three tiers out; each tier is a deployment of its
    // own.
    let export = ThreeTierGate::shared()
        .out
        .join("route-config.v1.litellm.yaml");
    let litellm = std::fs::read_to_string(&export).unwrap();
    assert!(
        litellm.contains("carries out the signed predictive policy"),
        "{litellm}"
    );
    assert!(litellm.contains("support/mid"), "{litellm}");
    crate::common::loads_into_litellm(&export);
}

#[test]
fn drift_keeps_a_three_tier_config_ok_until_the_mid_model_gets_worse() {
    let gated = ThreeTierGate::shared();
    let drift = |results: &Path| {
        let output = routeval()
            .args(["drift", "--json", "--config"])
            .arg(gated.emitted())
            .arg("--results")
            .arg(results)
            .output()
            .unwrap();
        let document: routeval::schema::DriftDocument = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
        (output.status.code(), document)
    };
    let (code, same) = drift(&gated.results);
    assert_eq!(code, Some(0));
    let slice = &same.slices[0];
    assert_eq!(
        slice.verdict,
        routeval::schema::Verdict::Ok,
        "{:?}",
        slice.reasons
    );
    assert_eq!(slice.thresholds.as_ref().map(Vec::len), Some(2));
    assert_eq!(slice.served.as_ref().map(Vec::len), Some(3));
    let directory = tempfile::tempdir().unwrap();
    let (code, shifted) = drift(&worse_mid_model(directory.path()));
    assert_eq!(code, Some(1));
    assert_eq!(
        shifted.slices[0].verdict,
        routeval::schema::Verdict::Recalibrate,
        "{:?}",
        shifted.slices[0].reasons
    );
}

#[test]
fn the_report_shows_both_lists_of_thresholds_of_a_three_tier_change() {
    // From the deployed three-tier config to the one calibrated on the new
    // rows, scored on the same rows.
    let gated = ThreeTierGate::shared();
    let directory = tempfile::tempdir().unwrap();
    let worse = worse_mid_model(directory.path());
    let (recalibrated, text) =
        calibration_and_text(&worse, &["--target", "0.95", "--tiers", "small,mid,large"]);
    let recalibration = directory.path().join("recalibrated.json");
    std::fs::write(&recalibration, text).unwrap();
    let report_dir = directory.path().join("report");
    routeval()
        .args(["report", "--results"])
        .arg(&worse)
        .arg("--baseline")
        .arg(gated.emitted())
        .arg("--calibration")
        .arg(&recalibration)
        .arg("--out")
        .arg(&report_dir)
        .assert()
        .code(0);
    let summary = std::fs::read_to_string(report_dir.join("summary.md")).unwrap();
    let listed = |document: &routeval::schema::CalibrationDocument| {
        let thresholds = &document.slices[0].tiered.as_ref().unwrap().thresholds;
        thresholds
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let change = format!(
        "{} → {}",
        listed(&gated.calibration(1)),
        listed(&recalibrated)
    );
    assert!(summary.contains(&change), "{change} not in:\n{summary}");
}

#[test]
fn bad_three_tier_tables_are_one_line_exit_2() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 300, 5);
    let cases = [
        (
            "[policy.predictive]\ntiers = [\"mini\", \"mid\", \"frontier\"]\n[policy.predictive.thresholds]\n\"*\" = [0.3]",
            "policy.predictive.thresholds.*: 1 thresholds, expected 2",
        ),
        (
            "[policy.predictive]\ntiers = [\"mini\", \"mid\", \"frontier\"]\n[policy.predictive.thresholds]\n\"*\" = [0.8, 0.3]",
            "must ascend",
        ),
        (
            "[policy.predictive]\ntiers = [\"mini\", \"mid\", \"frontier\"]\n[policy.predictive.thresholds]\n\"*\" = 0.5",
            "a list of 2 thresholds, found one number",
        ),
        (
            "[policy.predictive]\ntiers = [\"mid\", \"mini\", \"frontier\"]\nthresholds_from_calibration = true",
            "route \"mid\" is measured by the tier \"mid\"; position 1 needs the small tier",
        ),
        (
            "[policy.predictive]\nsmall = \"mini\"\nlarge = \"frontier\"\ntiers = [\"mini\", \"frontier\"]\nthresholds_from_calibration = true",
            "give small and large, or tiers, not both",
        ),
        (
            "[policy.single]\nroute = \"mid\"",
            "measured by the tier \"mid\", which only a tiers or stages policy can use",
        ),
        (
            "[policy.cascade]\nstages = [\"mini\", \"mid\", \"frontier\"]\nverifier = \"judge\"\n[policy.cascade.thresholds]\n\"*\" = [1.0, 1.0, 1.0]",
            "3 thresholds, expected 2",
        ),
    ];
    for (policy, expected) in cases {
        let table = directory.path().join("bad.toml");
        std::fs::write(&table, three_tier_table(policy)).unwrap();
        let (output, out) = gate(
            directory.path(),
            &[&table],
            &results,
            &["--target".as_ref(), "0.9".as_ref()],
        );
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{policy}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{policy}: {stderr}");
        assert!(stderr.contains(expected), "{policy}: {stderr}");
        assert!(
            !out.join("gate-report.json").exists(),
            "{policy}: nothing written"
        );
    }
}

#[test]
fn a_file_naming_its_tiers_in_metadata_calibrates_them_without_the_flag() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;

    let directory = tempfile::tempdir().unwrap();
    let simulation = Simulation {
        requests: 2000,
        seed: 6,
        ..Simulation::default()
    };
    let rows = simulation.rows();
    let floats = |value: &dyn Fn(&routeval::simulate::SimulatedRow) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(rows.iter().map(value)))
    };
    let flags = |value: &dyn Fn(&routeval::simulate::SimulatedRow) -> bool| -> ArrayRef {
        Arc::new(BooleanArray::from(
            rows.iter().map(value).collect::<Vec<_>>(),
        ))
    };
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(StringArray::from_iter_values(
                (0..rows.len()).map(|i| format!("r{i}")),
            )) as ArrayRef,
        ),
        (
            "slice",
            Arc::new(StringArray::from(vec!["s"; rows.len()])) as ArrayRef,
        ),
        ("score", floats(&|row| row.router_score)),
        ("mini_ok", flags(&|row| row.small_ok)),
        ("mid_ok", flags(&|row| row.mid_ok)),
        ("frontier_ok", flags(&|row| row.large_ok)),
        ("cost_mini", floats(&|_| simulation.small_cost())),
        ("cost_mid", floats(&|_| simulation.mid_cost())),
        ("cost_frontier", floats(&|_| simulation.large_cost())),
    ])
    .unwrap();
    let properties = WriterProperties::builder()
        .set_key_value_metadata(Some(vec![KeyValue::new(
            routeval::schema::TIERS_KEY.to_owned(),
            "mini,mid,frontier".to_owned(),
        )]))
        .build();
    let path = directory.path().join("named.parquet");
    let mut writer = ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        batch.schema(),
        Some(properties),
    )
    .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let (from_metadata, _) = calibration_and_text(&path, &["--target", "0.9"]);
    assert_eq!(
        from_metadata.tiers.as_deref(),
        Some(&["mini".to_owned(), "mid".to_owned(), "frontier".to_owned()][..])
    );
    let (from_flag, _) =
        calibration_and_text(&path, &["--target", "0.9", "--tiers", "mini,mid,frontier"]);
    assert_eq!(from_metadata, from_flag);
    // The flag overrides the metadata: two of the three tiers.
    let (two, _) = calibration_and_text(&path, &["--target", "0.9", "--tiers", "mini,frontier"]);
    assert_eq!(two.tiers, None);
    assert!(two.slices[0].threshold.is_some());
}

#[test]
fn the_gate_checks_the_pinned_version_of_a_tier_between() {
    let directory = tempfile::tempdir().unwrap();
    let table = directory.path().join("three.toml");
    std::fs::write(
        &table,
        three_tier_table(
            "[policy.predictive]\ntiers = [\"mini\", \"mid\", \"frontier\"]\n[policy.predictive.thresholds]\n\"*\" = [0.3, 0.7]",
        ),
    )
    .unwrap();
    let gate = |mid_models: [&str; 2], out: &str| {
        let results = directory.path().join(format!("{out}.csv"));
        let mut text = String::from(
            "id,slice,score,small_ok,mid_ok,large_ok,cost_small,cost_mid,cost_large,mid_model\n",
        );
        for row in 0..40 {
            let model = mid_models[usize::from(row % 10 == 0)];
            text.push_str(&format!(
                "r{row},s,{},true,true,true,0.001,0.002,0.01,{model}\n",
                f64::from(row) / 40.0
            ));
        }
        std::fs::write(&results, text).unwrap();
        crate::common::gate_report(
            directory.path(),
            &results,
            &table,
            out,
            &["--target", "0.5"],
        )
    };
    let pinned = gate(["mid-2026-01-01", "mid-2026-01-01"], "pinned");
    assert!(
        pinned.candidates[0].passed,
        "{:?}",
        pinned.candidates[0].failures
    );
    assert!(
        !pinned.candidates[0]
            .warnings
            .iter()
            .any(|warning| warning.contains("mid_model")),
        "{:?}",
        pinned.candidates[0].warnings
    );
    let mixed = gate(["mid-2026-01-01", "mid-2026-02-01"], "mixed");
    let failures = &mixed.candidates[0].failures;
    assert!(!mixed.candidates[0].passed);
    assert!(
        failures.iter().any(|failure| failure.message.contains("route \"mid\" pins mid-2026-01-01 but the results' mid tier also recorded mid-2026-02-01 (4 rows)")),
        "{failures:?}"
    );
}

#[test]
fn drift_from_records_tests_a_three_tier_configs_escalation() {
    let directory = tempfile::tempdir().unwrap();
    let results = simulated(directory.path(), 6000, 4);
    let (_, text) = calibration_and_text(
        &results,
        &["--target", "0.95", "--tiers", "small,mid,large"],
    );
    let calibration = directory.path().join("three.json");
    std::fs::write(&calibration, text).unwrap();
    let table = directory.path().join("three.toml");
    std::fs::write(
        &table,
        three_tier_table(
            "[policy.predictive]\ntiers = [\"mini\", \"mid\", \"frontier\"]\nthresholds_from_calibration = true",
        ),
    )
    .unwrap();
    let flags: Vec<&std::ffi::OsStr> = vec![
        "--target".as_ref(),
        "0.95".as_ref(),
        "--calibration".as_ref(),
        calibration.as_os_str(),
    ];
    let (output, out) = gate(directory.path(), &[table.as_path()], &results, &flags);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config = out.join("route-config.v1.json");
    let signed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let slice = signed["provenance"]["metrics"][1]["slice"]
        .as_str()
        .unwrap()
        .to_owned();
    let at_calibration = signed["provenance"]["metrics"][1]["escalation_rate"]
        .as_f64()
        .unwrap();
    assert!(at_calibration < 0.9, "{at_calibration}");
    let write = |name: &str, record: &dyn Fn(usize) -> serde_json::Value| {
        let path = directory.path().join(name);
        let lines: Vec<String> = (0..2000).map(|index| record(index).to_string()).collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    };
    let drift = |records: &Path| {
        let output = routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg("--records")
            .arg(records)
            .output()
            .unwrap();
        let document: routeval::schema::RecordsDriftDocument =
            serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
        (output.status.code(), document)
    };
    // Every request sent to the last tier: the escalation test must see it.
    let all_large = write("all-large.jsonl", &|index| {
        serde_json::json!({
            "id": format!("r{index}"), "timestamp": 1_764_504_000_000u64 + index as u64 * 1000,
            "slice": slice, "logical_model": "support", "route": "frontier",
            "reason": "routed-large", "status": "ok",
        })
    });
    let (code, document) = drift(&all_large);
    let measured = &document.slices[0];
    assert_eq!(measured.escalation_rate, Some(1.0));
    assert!(
        measured.escalation_p_value.is_some_and(|p| p < 0.01),
        "{measured:?}"
    );
    assert_eq!(measured.verdict, routeval::schema::Verdict::Recalibrate);
    assert_eq!(code, Some(1));
    // Scores and no reasons: the decision is read from the first threshold.
    let threshold = measured.threshold.unwrap().0;
    let scored = write("scored.jsonl", &|index| {
        serde_json::json!({
            "id": format!("s{index}"), "timestamp": 1_764_504_000_000u64 + index as u64 * 1000,
            "slice": slice, "logical_model": "support", "route": "mini",
            "score": if index % 4 == 0 { threshold + 0.01 } else { threshold - 0.01 },
            "status": "ok",
        })
    });
    let (_, document) = drift(&scored);
    assert_eq!(document.slices[0].escalation_rate, Some(0.25));
}
