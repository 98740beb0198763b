//! `routeval report`: a self-contained HTML file whose charts a real browser
//! draws, and a Markdown summary.

use std::path::{Path, PathBuf};

use crate::common::{Workspace, example_routes};
use crate::common::{example_results, routeval};

/// A report over the example results with a calibration, a gate report and
/// a drift document.
fn full_report(workspace: &Workspace) -> PathBuf {
    workspace
        .gate(
            &[
                example_routes("predictive.toml"),
                example_routes("always-large.toml"),
            ],
            "dist",
            &["--target", "0.9"],
        )
        .code(0);
    let config = workspace.report("dist").emitted.unwrap().config;
    routeval()
        .args(["drift", "--config", &config, "--results"])
        .arg(example_results())
        .arg("--baseline-results")
        .arg(example_results())
        .arg("--out")
        .arg(workspace.path("drift.json"))
        .assert()
        .code(0);
    routeval()
        .arg("report")
        .arg("--results")
        .arg(example_results())
        .arg("--calibration")
        .arg(workspace.path("calibration.json"))
        .arg("--gate")
        .arg(workspace.path("dist").join("gate-report.json"))
        .arg("--drift")
        .arg(workspace.path("drift.json"))
        .arg("--out")
        .arg(workspace.path("report"))
        .assert()
        .code(0);
    workspace.path("report")
}

#[test]
fn the_html_is_self_contained_and_has_every_section() {
    let workspace = Workspace::new();
    let html = std::fs::read_to_string(full_report(&workspace).join("report.html")).unwrap();
    for forbidden in ["<script", "<link", "@import", "url(", "https://", "<img"] {
        assert!(
            !html.contains(forbidden),
            "the report must not load anything: found {forbidden}"
        );
    }
    // The only URL is the SVG namespace, which is a name, not a request.
    assert_eq!(
        html.matches("http://").count(),
        html.matches("http://www.w3.org/2000/svg").count()
    );
    for slice in ["billing", "legal", "sales", "technical"] {
        assert!(html.contains(&format!("<h2>Slice <code>{slice}</code></h2>")));
    }
    // Per slice: the cost–quality curve, quality/escalation and cost by threshold.
    assert_eq!(html.matches("<svg").count(), 4 * 3 + 2);
    assert!(html.contains("chosen t = "));
    assert!(html.contains("Numbers behind the charts"));
    assert!(
        html.contains("<h2>Gate</h2>")
            && html.contains("<h2>Drift: <span class=\"ok\">ok</span></h2>")
    );

    let summary = std::fs::read_to_string(workspace.path("report").join("summary.md")).unwrap();
    assert!(summary.contains("**Signed** `"), "{summary}");
    assert!(
        summary.contains("| `predictive.toml` | chosen |"),
        "{summary}"
    );
    assert!(
        summary.contains("| `always-large.toml` | passed |"),
        "{summary}"
    );
    assert!(summary.contains("\n- **Drift:** ok\n"), "{summary}");
}

/// Pixels within a small distance of `color`.
fn pixels_near(image: &[u8], channels: usize, color: [u8; 3]) -> usize {
    image
        .chunks_exact(channels)
        .filter(|pixel| {
            pixel
                .iter()
                .zip(color)
                .all(|(value, target)| value.abs_diff(target) <= 24)
        })
        .count()
}

#[test]
fn chromium_draws_the_charts() {
    let Some(chromium) = crate::common::browser::chromium() else {
        return;
    };
    let workspace = Workspace::new();
    let report = full_report(&workspace).join("report.html");
    let screenshot = crate::common::browser::screenshot(&chromium, &report, 1280, 2400);
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&screenshot).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buffer).unwrap();
    let channels = info.color_type.samples();
    let image = &buffer[..info.buffer_size()];
    assert_eq!((info.width, info.height), (1280, 2400));
    // The curves (blue), escalation lines and bars (orange) and the cost
    // curve (green) are drawn; an empty or unstyled page has none of them.
    for (name, color) in [
        ("blue", [0x1f, 0x77, 0xb4]),
        ("orange", [0xff, 0x7f, 0x0e]),
        ("green", [0x2c, 0xa0, 0x2c]),
    ] {
        let count = pixels_near(image, channels, color);
        assert!(count > 500, "only {count} {name} pixels in the screenshot");
    }
}

#[test]
fn each_curve_is_drawn_on_its_policys_score_column() {
    let workspace = Workspace::new();
    let (both, moved) = crate::common::two_scores(&workspace);
    let report = |results: &Path, out: &str, extra: &[&str]| {
        routeval()
            .arg("report")
            .arg("--results")
            .arg(results)
            .arg("--out")
            .arg(workspace.path(out))
            .args(extra)
            .assert()
            .code(0);
        let html = std::fs::read_to_string(workspace.path(out).join("report.html")).unwrap();
        // The per-slice sections: the charts and the numbers behind them.
        html[html.find("<h2>Slice").unwrap()..].to_owned()
    };
    let on_router = |extra: &[&str]| {
        let mut flags = vec!["--predictive-score-col", "router_score"];
        flags.extend_from_slice(extra);
        report(&both, "router", &flags)
    };
    let cascade_on_score = ["--cascade-score-col", "score"];
    // Both curves on router_score: as if it were the file's score.
    assert_eq!(
        on_router(&["--cascade-score-col", "router_score"]),
        report(
            &moved,
            "moved",
            &[
                "--predictive-score-col",
                "score",
                "--cascade-score-col",
                "score"
            ]
        )
    );
    // Only the predictive curve moves to router_score.
    let split = on_router(&cascade_on_score);
    let both_on_score = [
        "--predictive-score-col",
        "score",
        "--cascade-score-col",
        "score",
    ];
    assert_ne!(split, report(&both, "plain", &both_on_score));
    assert_ne!(split, report(&moved, "moved", &both_on_score));
    assert!(split.contains(">cascade</text>"));
    let html = std::fs::read_to_string(workspace.path("router").join("report.html")).unwrap();
    assert!(html.contains(
        "predictive curves on <code>router_score</code>, cascade curves on <code>score</code>"
    ));
    // Nothing names a cascade (no calibration of it, no column): its curve
    // was never evaluated, and is not drawn.
    let unnamed = on_router(&[]);
    assert!(unnamed.contains(">predictive</text>"));
    assert!(!unnamed.contains(">cascade</text>"));
}

#[test]
fn a_calibration_per_policy_marks_each_policys_thresholds() {
    let workspace = Workspace::new();
    let (both, _) = crate::common::two_scores(&workspace);
    let predictive = workspace.path("predictive.json");
    let cascade = workspace.path("cascade.json");
    crate::common::calibrate_into(&both, "router_score", "predictive", &predictive);
    crate::common::calibrate_into(&both, "score", "cascade", &cascade);
    let report = |calibrations: &[&Path], out: &str| {
        routeval()
            .arg("report")
            .arg("--results")
            .arg(&both)
            .arg("--calibration")
            .args(calibrations)
            .arg("--out")
            .arg(workspace.path(out))
            .assert()
    };
    report(&[&cascade, &predictive], "two").code(0);
    let html = std::fs::read_to_string(workspace.path("two").join("report.html")).unwrap();
    // The calibrations name the curves' score columns.
    assert!(html.contains(
        "predictive curves on <code>router_score</code>, cascade curves on <code>score</code>"
    ));
    for policy in ["cascade", "predictive"] {
        assert!(html.contains(&format!("chosen {policy} t = ")), "{policy}");
        assert!(
            html.contains(&format!("<th>{policy} threshold</th>")),
            "{policy}"
        );
        assert!(html.contains(&format!("Quality and escalation by threshold ({policy})")));
    }
    // Two chosen points, told apart by colour: each its policy's curve's.
    for colour in ["#1f77b4", "#9467bd"] {
        assert!(
            html.contains(&format!("r=\"6\" fill=\"{colour}\"")),
            "{colour}"
        );
    }
    // Without a gate, the summary leads with the first calibration given.
    let markdown = std::fs::read_to_string(workspace.path("two").join("summary.md")).unwrap();
    assert!(markdown.contains("**No gate report:**"), "{markdown}");
    assert!(
        markdown.contains("**Guaranteed per slice**, calibration: cascade on score, plain fit"),
        "{markdown}"
    );

    report(&[&predictive, &predictive], "twice")
        .code(2)
        .stderr(predicates::str::contains(
            "predictive.json: a second plain calibration of the predictive policy",
        ));
    assert!(!workspace.path("twice").exists());
}

#[test]
fn each_candidate_says_why_it_was_chosen_passed_or_failed() {
    let workspace = Workspace::new();
    // The predictive table's thresholds were calibrated for 0.9: at a
    // target of 0.95 only always-large passes.
    workspace
        .gate(
            &[
                example_routes("predictive.toml"),
                example_routes("always-large.toml"),
            ],
            "dist",
            &["--target", "0.95"],
        )
        .code(0);
    let gate = workspace.report("dist");
    let failed = &gate.candidates[0];
    assert!(!failed.passed);
    let first = &failed.failures[0];
    routeval()
        .args(["report", "--results"])
        .arg(example_results())
        .arg("--gate")
        .arg(workspace.path("dist").join("gate-report.json"))
        .arg("--out")
        .arg(workspace.path("report"))
        .assert()
        .code(0);
    let html = std::fs::read_to_string(workspace.path("report").join("report.html")).unwrap();
    let start = html
        .find("<tr class=\"failed\"><td><code>predictive.toml</code></td><td>failed</td>")
        .unwrap_or_else(|| panic!("no row for the failed candidate"));
    let row = &html[start..start + html[start..].find("</tr>").unwrap()];
    // Its verdict, then its first failure: rule, slice and the gate's words.
    let rule = serde_json::to_value(first.rule).unwrap();
    assert!(
        row.contains(&format!(
            "<td class=\"why\">{} [{}]: {}",
            rule.as_str().unwrap(),
            first.slice.as_deref().unwrap(),
            first.message
        )),
        "{row}"
    );
    if failed.failures.len() > 1 {
        assert!(
            row.contains(&format!("(and {} more failure", failed.failures.len() - 1)),
            "{row}"
        );
    }
    let summary = std::fs::read_to_string(workspace.path("report").join("summary.md")).unwrap();
    assert!(
        summary.contains("| `predictive.toml` | failed |")
            && summary.contains("| `always-large.toml` | chosen |")
            && summary.contains("the only candidate that passed every rule"),
        "{summary}"
    );
}

#[test]
fn a_gate_that_signed_nothing_says_so_first() {
    let workspace = Workspace::new();
    let candidates = [
        example_routes("predictive.toml"),
        example_routes("always-large.toml"),
    ];
    let report = |gate: &str| {
        routeval()
            .args(["report", "--results"])
            .arg(example_results())
            .arg("--gate")
            .arg(workspace.path(gate).join("gate-report.json"))
            .arg("--out")
            .arg(workspace.path(&format!("{gate}-report")))
            .assert()
            .code(0);
        std::fs::read_to_string(workspace.path(&format!("{gate}-report")).join("summary.md"))
            .unwrap()
    };
    // No candidate reaches 0.999: nothing is chosen, nothing signed.
    let assert = workspace.gate(&candidates, "none", &["--target", "0.999"]);
    assert_ne!(assert.get_output().status.code(), Some(0));
    let summary = report("none");
    assert!(
        summary.contains("**Nothing signed:** none of the 2 candidates passed every rule."),
        "{summary}"
    );
    assert!(!summary.contains("**Guaranteed per slice**"), "{summary}");
}
