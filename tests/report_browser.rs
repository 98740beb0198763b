//! The report as a reviewer opens it, in headless Chromium at 400 and 1,400
//! CSS pixels: no horizontal page overflow, no chart text under 10 px and no
//! marker label over another or off its chart, measured from the DOM; every number of the first screen equal to the
//! documents it came from; and the Markdown summary within 30 lines.

use std::path::{Path, PathBuf};

use routeval::schema::{CalibrationDocument, GateReport, read_document};
use serde_json::Value;

use crate::common::browser::{chromium, measure_in_frame, screenshot};
use crate::common::{Workspace, example_results, routeval};

/// Reads, inside the frame: the page's width and scroll width, the
/// smallest chart text as drawn (its font size times the SVG's scale), the
/// first screen's tables cell by cell, the cost line's values and the
/// signed line.
const MEASURE: &str = r#"
const doc = frame.contentDocument, view = frame.contentWindow, root = doc.documentElement;
let smallest = Infinity, texts = 0;
for (const text of doc.querySelectorAll('svg text')) {
  if (!text.textContent.trim() || text.getClientRects().length === 0) continue;
  // The scale of the text's own axis: rotated labels turn it, not shrink it.
  const ctm = text.getScreenCTM();
  const size = parseFloat(view.getComputedStyle(text).fontSize) * Math.hypot(ctm.a, ctm.b);
  smallest = Math.min(smallest, size); texts += 1;
}
// Marker labels as drawn: none covers another, none leaves its chart.
const overlaps = []; let labels = 0;
for (const svg of doc.querySelectorAll('svg')) {
  const boxes = [...svg.querySelectorAll('text.marker')].map(text => ({text: text.textContent, box: text.getBBox()}));
  labels += boxes.length;
  for (let i = 0; i < boxes.length; i++) {
    const a = boxes[i].box;
    if (a.x < 0 || a.x + a.width > svg.viewBox.baseVal.width) overlaps.push(['outside', boxes[i].text]);
    for (let j = i + 1; j < boxes.length; j++) {
      const b = boxes[j].box;
      if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height)
        overlaps.push([boxes[i].text, boxes[j].text]);
    }
  }
}
const tables = {};
for (const table of doc.querySelectorAll('#decision table')) {
  tables[table.id] = [...table.rows].slice(1).map(row => [...row.cells].map(cell =>
    ({text: cell.textContent, value: cell.dataset.value === undefined ? null : cell.dataset.value})));
}
report({
  client: root.clientWidth, scroll: root.scrollWidth, smallest, texts, tables, labels, overlaps,
  cost: [...doc.querySelectorAll('#cost span')].map(span => span.dataset.value),
  signed: doc.getElementById('signed').textContent,
});
"#;

/// The demo's run and report directories.
fn demo(workspace: &Workspace) -> (PathBuf, PathBuf) {
    let (out, report) = (workspace.path("runs"), workspace.path("report"));
    routeval()
        .current_dir(workspace.path(""))
        .args(["demo", "--out"])
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .assert()
        .success();
    (out, report)
}

/// The page at 400 and at 1,400 px: it fits, its chart text is legible,
/// and a screenshot of each width is taken. Returns the 1,400 px reading.
fn fits_both_widths(chromium: &Path, page: &Path) -> Value {
    let mut wide = Value::Null;
    for width in [400, 1400] {
        let measured = measure_in_frame(chromium, page, width, MEASURE);
        assert_eq!(measured["client"], width, "{measured}");
        assert!(
            measured["scroll"].as_u64().unwrap() <= u64::from(width),
            "the page overflows {width} px: {}",
            measured["scroll"]
        );
        assert!(measured["texts"].as_u64().unwrap() > 50, "{measured}");
        let smallest = measured["smallest"].as_f64().unwrap();
        assert!(
            smallest >= 10.0,
            "chart text drawn at {smallest:.1} px at {width} px"
        );
        assert!(measured["labels"].as_u64().unwrap() > 0, "{measured}");
        assert_eq!(
            measured["overlaps"],
            serde_json::json!([]),
            "marker labels that cover another or leave their chart at {width} px"
        );
        let shot = screenshot(chromium, page, width, 1600);
        let decoder =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
        assert_eq!(decoder.read_info().unwrap().info().width, width);
        wide = measured;
    }
    wide
}

/// A cell's full value, as the page carries it.
fn value(cell: &Value) -> f64 {
    cell["value"].as_str().unwrap().parse().unwrap()
}

fn text(cell: &Value) -> &str {
    cell["text"].as_str().unwrap()
}

fn document<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    read_document(path, "a document", None).unwrap().document
}

#[test]
fn the_demo_reports_first_screen_is_the_gates_decision_and_fits_a_phone() {
    let Some(chromium) = chromium() else { return };
    let workspace = Workspace::new();
    let (out, report) = demo(&workspace);
    let measured = fits_both_widths(&chromium, &report.join("report.html"));
    let gate: GateReport = document(&out.join("gate/gate-report.json"));
    let emitted = gate.emitted.clone().unwrap();

    let signed = measured["signed"].as_str().unwrap();
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(&emitted.config).unwrap()).unwrap();
    for expected in [
        emitted.config.as_str(),
        &emitted.sha256,
        &format!("version {}", emitted.version),
        config["expires_at"].as_str().unwrap(),
        config["config_id"].as_str().unwrap(),
    ] {
        assert!(signed.contains(expected), "{expected} not in: {signed}");
    }

    // One row per candidate, in the gate's order, each number the gate's.
    let candidates = measured["tables"]["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), gate.candidates.len());
    for (row, candidate) in candidates.iter().zip(&gate.candidates) {
        assert!(candidate.file.ends_with(text(&row[0])), "{row}");
        let verdict = if Some(&candidate.file) == gate.chosen.as_ref() {
            "chosen"
        } else if candidate.passed {
            "passed"
        } else {
            "failed"
        };
        assert_eq!(text(&row[1]), verdict);
        assert_eq!(value(&row[2]), candidate.overall.quality);
        assert_eq!(text(&row[2]), format!("{:.4}", candidate.overall.quality));
        assert_eq!(value(&row[3]), candidate.overall.mean_cost * 1000.0);
        assert!(!text(&row[4]).is_empty(), "no reason given: {row}");
    }
    let chosen = gate
        .candidates
        .iter()
        .find(|c| Some(&c.file) == gate.chosen.as_ref())
        .unwrap();
    assert!(text(&candidates[0][4]).starts_with("passed every rule"));

    // What is guaranteed: the chosen candidate's slices as the gate measured
    // them, with the signed config's thresholds.
    let guarantee = measured["tables"]["guarantee"].as_array().unwrap();
    assert_eq!(guarantee.len(), chosen.slices.len());
    let tiered: CalibrationDocument = document(&out.join("calibration-predictive-three-tier.json"));
    for (row, metrics) in guarantee.iter().zip(&chosen.slices) {
        assert_eq!(text(&row[0]), metrics.slice);
        assert_eq!(text(&row[1]), metrics.n.to_string());
        let thresholds = &tiered
            .slices
            .iter()
            .find(|slice| slice.slice == metrics.slice)
            .unwrap()
            .tiered
            .as_ref()
            .unwrap()
            .thresholds;
        let expected: Vec<String> = thresholds.iter().map(ToString::to_string).collect();
        assert_eq!(text(&row[2]), expected.join(", "));
        assert_eq!(value(&row[3]), metrics.quality);
        // The gate ran without --confidence, and no certified calibration
        // chose these thresholds: no bound, and the note says what would.
        assert_eq!(text(&row[4]), "-");
        assert_eq!(value(&row[5]), metrics.mean_cost * 1000.0);
        assert!(text(&row[7]).starts_with("not certified; at 0.95"), "{row}");
    }

    // The certified calibration the demo made: its bounds, and the slice
    // it could not certify with the rows that would.
    let certified: CalibrationDocument =
        document(&out.join("calibration-predictive-certified.json"));
    let rows = measured["tables"]["certified-0"].as_array().unwrap();
    assert_eq!(rows.len(), certified.slices.len());
    let mut uncertified = 0;
    for (row, slice) in rows.iter().zip(&certified.slices) {
        assert_eq!(text(&row[0]), slice.slice);
        match slice.quality_lower_bound {
            Some(bound) => assert_eq!(value(&row[4]), bound),
            None => {
                uncertified += 1;
                assert_eq!(text(&row[4]), "-");
                let note = text(&row[7]);
                assert!(note.starts_with(slice.reason.as_deref().unwrap()), "{note}");
                let rows: u64 = note
                    .split("about ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no row count in: {note}"));
                // At that many rows its best quality certifies the target;
                // at a third fewer it does not.
                let delta = 1.0 - certified.confidence.unwrap();
                let bound = |n: u64| {
                    routeval::stats::clopper_pearson_lower(
                        (slice.max_quality * n as f64).floor() as u64,
                        n,
                        delta,
                    )
                };
                assert!(bound(rows) >= certified.target, "{note}");
                assert!(bound(rows * 2 / 3) < certified.target, "{note}");
            }
        }
    }
    assert_eq!(
        uncertified, 1,
        "the demo's slice `policy` is not certified at 90%"
    );

    // The cost line: the chosen candidate's, against always-large, which
    // the gate measured as the large-only candidate on the same rows.
    let cost: Vec<f64> = measured["cost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(cost[0], chosen.overall.mean_cost * 1000.0);
    let large = gate
        .candidates
        .iter()
        .find(|c| c.file.ends_with("large-only.toml"))
        .unwrap();
    assert!((cost[1] - large.overall.mean_cost * 1000.0).abs() < 1e-9);

    let summary = std::fs::read_to_string(report.join("summary.md")).unwrap();
    assert!(summary.lines().count() <= 30, "{summary}");
    assert!(summary.contains(&emitted.sha256));
    assert!(summary.contains("4 of 5 slices certified"), "{summary}");
}

#[test]
fn a_certified_calibration_without_a_gate_shows_its_bounds_and_no_unevaluated_curve() {
    let Some(chromium) = chromium() else { return };
    let workspace = Workspace::new();
    let calibration = workspace.path("calibration.json");
    routeval()
        .args([
            "calibrate",
            "--target",
            "0.9",
            "--confidence",
            "0.95",
            "--results",
        ])
        .arg(example_results())
        .arg("--out")
        .arg(&calibration)
        .assert()
        .code(0);
    routeval()
        .args(["report", "--results"])
        .arg(example_results())
        .arg("--calibration")
        .arg(&calibration)
        .arg("--out")
        .arg(workspace.path("report"))
        .assert()
        .code(0);
    let page = workspace.path("report").join("report.html");
    let measured = fits_both_widths(&chromium, &page);
    assert!(
        measured["signed"]
            .as_str()
            .unwrap()
            .starts_with("No gate report"),
        "{measured}"
    );
    let document: CalibrationDocument = document(&calibration);
    let rows = measured["tables"]["guarantee"].as_array().unwrap();
    assert_eq!(rows.len(), document.slices.len());
    for (row, slice) in rows.iter().zip(&document.slices) {
        assert_eq!(text(&row[0]), slice.slice);
        assert_eq!(value(&row[3]), slice.quality.unwrap());
        assert_eq!(value(&row[4]), slice.quality_lower_bound.unwrap());
        assert_eq!(
            text(&row[4]),
            format!("{:.4}", slice.quality_lower_bound.unwrap())
        );
        assert_eq!(value(&row[5]), slice.mean_cost.unwrap() * 1000.0);
        assert_eq!(
            value(&row[6]),
            slice.savings_vs_always_large.unwrap(),
            "saved against always-large on the same rows"
        );
    }
    // The example results have no verifier: only the predictive curve was
    // evaluated, so no cascade curve is drawn.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(">predictive</text>"));
    assert!(
        !html.contains(">cascade</text>"),
        "a cascade curve was drawn"
    );
    assert!(!html.contains("stroke=\"#9467bd\""));
}
