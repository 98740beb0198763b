//! `sample --audit` draws the rows a human audits, and `calibrate --audits`
//! takes their verdicts only when they are the rows that draw chose: the
//! correction's guarantee rests on it. Through the CLI, on a judge that
//! accepts a quarter of the wrong answers.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use routeval::schema::{AuditDraw, AuditRow, CalibrationDocument, audits_to_bytes, read_audits};

use crate::common::{Random, edge_request, routeval, undocumented_keys};

const SLICES: usize = 4;
const ROWS: usize = 2_000;
const AUDIT: usize = 60;
const HEADER: &str = "id,slice,score,small_ok,large_ok,cost_small,cost_large,cost_router";

/// The judge's labels for the results, and the humans' verdicts by id.
struct Population {
    results: PathBuf,
    lines: Vec<String>,
    truth: HashMap<String, (bool, bool)>,
}

fn population(directory: &Path) -> Population {
    let mut random = Random::new(2025);
    let judge = |human: bool, random: &mut Random| {
        if human {
            random.unit() >= 0.02
        } else {
            random.unit() < 0.25
        }
    };
    let mut lines = Vec::new();
    let mut truth = HashMap::new();
    for index in 0..SLICES * ROWS {
        let (score, small, large) = edge_request(&mut random);
        let id = format!("r{index}");
        let (small_judged, large_judged) = (judge(small, &mut random), judge(large, &mut random));
        lines.push(format!(
            "{id},s{},{score},{small_judged},{large_judged},0.0004,0.008,0.00002",
            index % SLICES
        ));
        truth.insert(id, (small, large));
    }
    let results = directory.join("graded.csv");
    write_results(&results, &lines);
    Population {
        results,
        lines,
        truth,
    }
}

fn write_results(path: &Path, lines: &[String]) {
    std::fs::write(path, format!("{HEADER}\n{}\n", lines.join("\n"))).unwrap();
}

fn draw(results: &Path, out: &Path, seed: u64) -> Vec<AuditRow> {
    let output = routeval()
        .args([
            "sample",
            "--audit",
            &AUDIT.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .arg("--results")
        .arg(results)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains(&format!("s0 {AUDIT} of {ROWS}")),
        "{stdout}"
    );
    read_audits(out)
        .unwrap()
        .into_iter()
        .map(|(_, row)| row)
        .collect()
}

/// The audit set with the humans' verdicts filled in.
fn filled(rows: &[AuditRow], truth: &HashMap<String, (bool, bool)>) -> Vec<AuditRow> {
    rows.iter()
        .map(|row| {
            let (small, large) = truth[&row.id];
            AuditRow {
                audited_ok_small: Some(small),
                audited_ok_large: Some(large),
                ..row.clone()
            }
        })
        .collect()
}

fn calibrate(results: &Path, audits: Option<&Path>) -> (Option<i32>, String, String) {
    let mut command = routeval();
    command
        .args([
            "calibrate",
            "--target",
            "0.85",
            "--confidence",
            "0.9",
            "--json",
            "--results",
        ])
        .arg(results);
    if let Some(audits) = audits {
        command.arg("--audits").arg(audits);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_recorded_draw_corrects_the_grader_and_says_so() {
    let directory = tempfile::tempdir().unwrap();
    let population = population(directory.path());
    let drawn = draw(
        &population.results,
        &directory.path().join("audits.csv"),
        11,
    );
    assert_eq!(drawn.len(), SLICES * AUDIT);
    let mut per_slice: BTreeMap<&str, BTreeMap<u32, usize>> = BTreeMap::new();
    for row in &drawn {
        assert_eq!(row.inclusion_probability, AUDIT as f64 / ROWS as f64);
        assert_eq!(
            (row.slice_rows, row.size, row.strata),
            (ROWS as u64, AUDIT as u64, 10)
        );
        assert_eq!((row.audited_ok_small, row.audited_ok_large), (None, None));
        *per_slice
            .entry(&row.slice)
            .or_default()
            .entry(row.stratum)
            .or_default() += 1;
    }
    // Every tenth of each slice's scores is audited, six rows each.
    for strata in per_slice.values() {
        assert_eq!(strata.len(), 10, "{strata:?}");
        assert!(
            strata.values().all(|&count| count == AUDIT / 10),
            "{strata:?}"
        );
    }
    // The same seed draws the same rows; another seed others.
    assert_eq!(
        drawn,
        draw(
            &population.results,
            &directory.path().join("again.jsonl"),
            11
        )
    );
    assert_ne!(
        drawn,
        draw(
            &population.results,
            &directory.path().join("other.jsonl"),
            12
        )
    );

    let audits = directory.path().join("filled.csv");
    std::fs::write(
        &audits,
        audits_to_bytes(&filled(&drawn, &population.truth), true),
    )
    .unwrap();
    let (code, stdout, stderr) = calibrate(&population.results, Some(&audits));
    assert!(!stderr.contains("warning"), "{stderr}");
    let document: CalibrationDocument = serde_json::from_str(&stdout).unwrap();
    crate::common::assert_feasibility_is_the_exit_code(code, &document, stderr.as_bytes());
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        undocumented_keys("## calibration.json", &[&json["slices"][0]["audit"]]),
        Vec::<String>::new()
    );
    let line = std::fs::read_to_string(directory.path().join("again.jsonl")).unwrap();
    let row: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(
        undocumented_keys("## Audit sets", &[&row]),
        Vec::<String>::new()
    );
    for slice in &document.slices {
        let audit = slice.audit.as_ref().expect("an audited slice");
        assert_eq!(
            (audit.rows, audit.draw),
            (AUDIT as u64, AuditDraw::Recorded)
        );
        // The judge accepts a quarter of the wrong answers.
        assert!(audit.grader_false_accept.unwrap() > 0.05, "{audit:?}");
    }

    // The same verdicts in the results' own columns: nothing recorded how
    // the rows were chosen, and the output says so.
    let verdicts: HashMap<&str, &AuditRow> =
        drawn.iter().map(|row| (row.id.as_str(), row)).collect();
    let in_table: Vec<String> = population
        .lines
        .iter()
        .map(|line| {
            let id = line.split(',').next().unwrap();
            match verdicts.get(id) {
                Some(_) => {
                    let (small, large) = population.truth[id];
                    format!("{line},{small},{large}")
                }
                None => format!("{line},,"),
            }
        })
        .collect();
    let audited_results = directory.path().join("audited.csv");
    std::fs::write(
        &audited_results,
        format!(
            "{HEADER},audited_ok_small,audited_ok_large\n{}\n",
            in_table.join("\n")
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = calibrate(&audited_results, None);
    assert!(
        stderr.starts_with("warning: ")
            && stderr.contains("the audited rows of 4 slices have no recorded draw"),
        "{stderr}"
    );
    let unrecorded: CalibrationDocument = serde_json::from_str(&stdout).unwrap();
    crate::common::assert_feasibility_is_the_exit_code(code, &unrecorded, stderr.as_bytes());
    for (slice, recorded) in unrecorded.slices.iter().zip(&document.slices) {
        let audit = slice.audit.as_ref().unwrap();
        assert_eq!(audit.draw, AuditDraw::Unrecorded);
        // Equal weights: the same correction either way.
        let recorded = recorded.audit.as_ref().unwrap();
        assert_eq!(
            audit.corrected_lower_bound.map(|b| (b * 1e9).round()),
            recorded.corrected_lower_bound.map(|b| (b * 1e9).round())
        );
    }
    // Both at once is refused: the verdicts belong in one place.
    let (code, _, stderr) = calibrate(&audited_results, Some(&audits));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("keep the audits in one place"), "{stderr}");
}

#[test]
fn audits_that_are_not_the_draw_are_refused_with_their_line() {
    let directory = tempfile::tempdir().unwrap();
    let population = population(directory.path());
    let drawn = filled(
        &draw(
            &population.results,
            &directory.path().join("audits.jsonl"),
            3,
        ),
        &population.truth,
    );
    let drawn_ids: std::collections::HashSet<&str> =
        drawn.iter().map(|row| row.id.as_str()).collect();
    let refused = |name: &str, rows: &[AuditRow], results: &Path| -> String {
        let path = directory.path().join(name);
        std::fs::write(&path, audits_to_bytes(rows, false)).unwrap();
        let (code, stdout, stderr) = calibrate(results, Some(&path));
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stdout.is_empty(), "{name}: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        stderr
    };
    // The easiest row of slice s0 in place of a drawn one: chosen by hand.
    let easiest = population
        .lines
        .iter()
        .filter(|line| line.split(',').nth(1) == Some("s0"))
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            (fields[2].parse::<f64>().unwrap(), fields[0].to_owned())
        })
        .filter(|(_, id)| !drawn_ids.contains(id.as_str()))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap()
        .1;
    let mut picked = drawn.clone();
    let place = picked.iter().position(|row| row.slice == "s0").unwrap();
    picked[place].id = easiest.clone();
    let message = refused("picked.jsonl", &picked, &population.results);
    assert!(
        message.contains(&format!("picked.jsonl: line {}, field \"id\": row \"{easiest}\" is not one the draw of seed 3 chose", place + 1)),
        "{message}"
    );
    // A drawn row left unaudited.
    let mut unaudited = drawn.clone();
    unaudited[5].audited_ok_large = None;
    let message = refused("unaudited.jsonl", &unaudited, &population.results);
    assert!(
        message.contains("line 6, field \"audited_ok_large\""),
        "{message}"
    );
    // A drawn row dropped.
    let message = refused("dropped.jsonl", &drawn[1..], &population.results);
    assert!(
        message.contains("and the audit set does not have it"),
        "{message}"
    );
    // Results that changed since the draw.
    let fewer = directory.path().join("fewer.csv");
    write_results(&fewer, &population.lines[1..]);
    let message = refused("changed.jsonl", &drawn, &fewer);
    assert!(
        message.contains("the results changed since the draw"),
        "{message}"
    );
}
