//! A grader that is wrong sometimes certifies the wrong thing: on a
//! simulated population whose judge accepts a quarter of the wrong answers,
//! thresholds certified on the judge's labels miss the humans' target far
//! more often than δ, and thresholds certified with the audited rows'
//! correction (prediction-powered) miss it near δ. Through the CLI.

use routeval::schema::CalibrationDocument;

use crate::common::{Random, calibration_of, edge_request, edge_truth, routeval};

const SLICES: usize = 10;
const ROWS: usize = 2_000;
const FILES: usize = 4;
const TARGET: f64 = 0.85;
/// The judge accepts this share of wrong answers and rejects this share of
/// right ones.
const JUDGE_FALSE_ACCEPT: f64 = 0.25;
const JUDGE_FALSE_REJECT: f64 = 0.02;
const AUDITED: f64 = 0.15;
const FLAGS: [&str; 4] = ["--target", "0.85", "--confidence", "0.9"];

fn judge(random: &mut Random, human: bool) -> bool {
    if human {
        random.unit() >= JUDGE_FALSE_REJECT
    } else {
        random.unit() < JUDGE_FALSE_ACCEPT
    }
}

#[test]
fn corrected_certification_holds_where_the_judges_labels_do_not() {
    let directory = tempfile::tempdir().unwrap();
    let mut random = Random::new(77);
    // The truth, by the humans' verdicts, at any threshold.
    let truth = edge_truth(&mut random, 100_000);
    let misses = |document: &CalibrationDocument| -> (usize, usize) {
        let chosen: Vec<f64> = document
            .slices
            .iter()
            .filter_map(|slice| slice.threshold.map(|threshold| threshold.0))
            .collect();
        let missed = chosen
            .iter()
            .filter(|&&threshold| {
                let (_, successes, _) = truth.evaluate_at(threshold);
                (successes as f64 / truth.totals.rows as f64) < TARGET
            })
            .count();
        (missed, chosen.len())
    };
    let header = "id,slice,score,small_ok,large_ok,cost_small,cost_large,cost_router";
    let (mut judged, mut corrected) = ((0, 0), (0, 0));
    let mut false_accepts: Vec<f64> = Vec::new();
    for file in 0..FILES {
        let mut plain = vec![header.to_owned()];
        let mut audited = vec![format!("{header},audited_ok_small,audited_ok_large")];
        for index in 0..SLICES * ROWS {
            let (score, small, large) = edge_request(&mut random);
            let (small_judged, large_judged) =
                (judge(&mut random, small), judge(&mut random, large));
            let line = format!(
                "f{file}-{index},s{:02},{score},{small_judged},{large_judged},0.0004,0.008,0.00002",
                index % SLICES
            );
            let verdicts = if random.unit() < AUDITED {
                format!("{small},{large}")
            } else {
                ",".to_owned()
            };
            audited.push(format!("{line},{verdicts}"));
            plain.push(line);
        }
        let (plain_path, audited_path) = (
            directory.path().join(format!("plain-{file}.csv")),
            directory.path().join(format!("audited-{file}.csv")),
        );
        std::fs::write(&plain_path, plain.join("\n") + "\n").unwrap();
        std::fs::write(&audited_path, audited.join("\n") + "\n").unwrap();
        let on_judge = calibration_of(&plain_path, &FLAGS);
        let with_audit = calibration_of(&audited_path, &FLAGS);
        for slice in &with_audit.slices {
            let audit = slice.audit.as_ref().expect("an audit summary");
            assert!(audit.rows > 200, "{}", audit.rows);
            false_accepts.push(audit.grader_false_accept.unwrap());
            assert!(audit.agreement < 0.95);
            assert!(on_judge.slices.iter().all(|plain| plain.audit.is_none()));
            if slice.feasible {
                assert!(audit.rows_for_half_width.is_some());
                assert_eq!(audit.corrected_lower_bound, slice.quality_lower_bound);
            }
        }
        if file == 0 {
            // The report says how the grader did and how many audited rows
            // a tighter bound needs.
            let calibration = directory.path().join("calibration.json");
            routeval()
                .args([
                    "calibrate",
                    "--target",
                    "0.85",
                    "--confidence",
                    "0.9",
                    "--results",
                ])
                .arg(&audited_path)
                .arg("--out")
                .arg(&calibration)
                .assert()
                .code(0);
            routeval()
                .arg("report")
                .arg("--results")
                .arg(&audited_path)
                .arg("--calibration")
                .arg(&calibration)
                .arg("--out")
                .arg(directory.path().join("report"))
                .assert()
                .code(0);
            for name in ["summary.md", "report.html"] {
                let text =
                    std::fs::read_to_string(directory.path().join("report").join(name)).unwrap();
                assert!(text.contains("grader false accepts"), "{name}");
                assert!(text.contains("audited rows for ±W"), "{name}");
            }
        }
        let (missed, chosen) = misses(&on_judge);
        judged = (judged.0 + missed, judged.1 + chosen);
        let (missed, chosen) = misses(&with_audit);
        corrected = (corrected.0 + missed, corrected.1 + chosen);
    }
    let rate = |(missed, chosen): (usize, usize)| missed as f64 / chosen.max(1) as f64;
    eprintln!(
        "certified thresholds missing the humans' target: judge's labels {}/{} = {:.3}, corrected {}/{} = {:.3} (delta 0.10)",
        judged.0,
        judged.1,
        rate(judged),
        corrected.0,
        corrected.1,
        rate(corrected)
    );
    // The grader's measured error, against what the population has.
    let mean = false_accepts.iter().sum::<f64>() / false_accepts.len() as f64;
    assert!((mean - JUDGE_FALSE_ACCEPT).abs() < 0.03, "{mean}");
    assert!(corrected.1 >= 20, "too few corrected slices were feasible");
    assert!(rate(judged) >= 0.5, "{}", rate(judged));
    assert!(rate(corrected) <= 0.2, "{}", rate(corrected));
}
