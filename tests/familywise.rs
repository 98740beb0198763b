//! `--familywise`, shown by resampling through the CLI: certifying each of
//! many slices at δ lets some slice miss its target on new traffic far more
//! often than δ, and more often the more slices there are; the family-wise
//! guarantee holds the chance that any slice misses near δ.

use routeval::schema::{CalibrationDocument, Guarantee};

use crate::common::{Random, Row, calibration_of, edge_request, edge_truth, routeval, write_csv};

const SLICES: usize = 10;
const ROWS: usize = 600;
const TRIALS: usize = 100;
const TARGET: f64 = 0.85;
const CONFIDENCE: f64 = 0.9;
const FLAGS: [&str; 4] = ["--target", "0.85", "--confidence", "0.9"];

#[test]
fn the_familywise_guarantee_holds_for_all_slices_together() {
    let directory = tempfile::tempdir().unwrap();
    let mut random = Random::new(41);
    // The truth: the population's quality at any threshold, from a large
    // fresh sample of it.
    let fresh = edge_truth(&mut random, 100_000);
    let misses = |document: &CalibrationDocument| -> Vec<bool> {
        document
            .slices
            .iter()
            .map(|slice| {
                slice.threshold.is_some_and(|threshold| {
                    let (_, successes, _) = fresh.evaluate_at(threshold.0);
                    (successes as f64 / fresh.totals.rows as f64) < TARGET
                })
            })
            .collect()
    };
    let (mut per_slice_any, mut per_slice_first_two, mut familywise_any) = (0, 0, 0);
    for trial in 0..TRIALS {
        let rows: Vec<Row> = (0..SLICES * ROWS)
            .map(|index| {
                let (score, small_ok, large_ok) = edge_request(&mut random);
                Row {
                    id: format!("t{trial}-{index}"),
                    slice: format!("s{:02}", index % SLICES),
                    score,
                    small_ok,
                    large_ok,
                    cost_small: 0.0004,
                    cost_large: 0.008,
                    cost_verifier: 0.0,
                    cost_router: 0.00002,
                }
            })
            .collect();
        let results = directory.path().join(format!("trial-{trial}.csv"));
        write_csv(&results, &rows);
        let per_slice = calibration_of(&results, &FLAGS);
        assert_eq!(per_slice.guarantee, Guarantee::PerSlice);
        let missed = misses(&per_slice);
        per_slice_any += usize::from(missed.iter().any(|&miss| miss));
        per_slice_first_two += usize::from(missed[..2].iter().any(|&miss| miss));
        let familywise = calibration_of(&results, &[&FLAGS[..], &["--familywise"]].concat());
        assert_eq!(familywise.guarantee, Guarantee::Familywise);
        let slice_confidence = familywise.slice_confidence.unwrap();
        assert!((slice_confidence - (1.0 - (1.0 - CONFIDENCE) / SLICES as f64)).abs() < 1e-12);
        familywise_any += usize::from(misses(&familywise).iter().any(|&miss| miss));
        std::fs::remove_file(&results).unwrap();
    }
    let rate = |count: usize| count as f64 / TRIALS as f64;
    eprintln!(
        "any slice missed: per-slice guarantee {:.3} over {SLICES} slices, {:.3} over 2; family-wise {:.3} (delta {:.2})",
        rate(per_slice_any),
        rate(per_slice_first_two),
        rate(familywise_any),
        1.0 - CONFIDENCE
    );
    // Per slice at δ = 0.1, some slice of ten misses far more often than δ,
    // and more often than some slice of two; jointly, near δ or below.
    assert!(rate(per_slice_any) >= 0.2, "{}", rate(per_slice_any));
    assert!(per_slice_any > per_slice_first_two);
    assert!(rate(familywise_any) <= 0.15, "{}", rate(familywise_any));
}

#[test]
fn the_gate_certifies_slices_jointly_with_holm() {
    let directory = tempfile::tempdir().unwrap();
    // Four slices of 100 rows with 4 failures each: P(Bin(100, 0.1) <= 4) =
    // 0.024 certifies 0.9 on each slice at δ = 0.05, but not on all four
    // together (Holm's first level is 0.05 / 4).
    let rows: Vec<Row> = (0..400)
        .map(|index| Row {
            id: format!("r{index}"),
            slice: ["a", "b", "c", "d"][index / 100].to_owned(),
            score: 0.5,
            small_ok: false,
            large_ok: index % 100 >= 4,
            cost_small: 0.001,
            cost_large: 0.01,
            cost_verifier: 0.0,
            cost_router: 0.0,
        })
        .collect();
    let results = directory.path().join("results.csv");
    write_csv(&results, &rows);
    let key = directory.path().join("k.key");
    routeval()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .assert()
        .code(0);
    let gate = |out: &str, extra: &[&str]| {
        routeval()
            .args([
                "gate",
                "--target",
                "0.9",
                "--allow-unknown-slices",
                "--candidates",
            ])
            .arg(crate::common::example_routes("always-large.toml"))
            .arg("--results")
            .arg(&results)
            .arg("--key")
            .arg(&key)
            .arg("--out")
            .arg(directory.path().join(out))
            .args(extra)
            .assert()
    };
    gate("each", &["--confidence", "0.95"]).code(0);
    gate("jointly", &["--confidence", "0.95", "--familywise"]).code(1);
    let report: routeval::schema::GateReport = serde_json::from_str(
        &std::fs::read_to_string(directory.path().join("jointly/gate-report.json")).unwrap(),
    )
    .unwrap();
    assert!(report.familywise);
    let failures = &report.candidates[0].failures;
    assert_eq!(failures.len(), 4, "{failures:?}");
    assert!(
        failures
            .iter()
            .all(|failure| failure.message.contains("for all slices jointly (Holm")),
        "{failures:?}"
    );
    let refused = gate("refused", &["--familywise"]).code(2);
    assert!(
        String::from_utf8_lossy(&refused.get_output().stderr)
            .contains("--familywise needs --confidence")
    );
}
