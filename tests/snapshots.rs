//! The Markdown a reviewer reads, pinned: `summary.md` and `gate-report.md`
//! for the example results, compared with `tests/fixtures/snapshots/`.
//! Paths under the test's directory read as `<dir>`, the repository as
//! `<repo>`, and sha256 digests (which cover the checkout's path and git
//! commit) as `<sha256>`, and a config id's digest suffix as `<id>`. After a deliberate
//! change, `ROUTEVAL_UPDATE_SNAPSHOTS=1 cargo test -- snapshots` rewrites the
//! files; review their diff like code.

use std::path::Path;

use crate::common::example_routes;
use crate::common::{example_results, routeval};

fn check(name: &str, rendered: &str, directory: &Path) {
    let normalised = without_digests(
        &rendered
            .replace(&directory.display().to_string(), "<dir>")
            .replace(env!("CARGO_MANIFEST_DIR"), "<repo>"),
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/snapshots")
        .join(name);
    if std::env::var_os("ROUTEVAL_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &normalised).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{}: no snapshot; set ROUTEVAL_UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    if normalised != expected {
        let first = normalised
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "{name} differs from its snapshot at line {}:\n  now:      {}\n  snapshot: {}",
            first + 1,
            normalised.lines().nth(first).unwrap_or(""),
            expected.lines().nth(first).unwrap_or("")
        );
    }
}

/// `text` with every run of exactly 64 hexadecimal digits as `<sha256>`,
/// and one of 12 after a `-` (a config id's suffix) as `<id>`.
fn without_digests(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    for character in text.chars().chain(std::iter::once('\n')) {
        if character.is_ascii_hexdigit() {
            run.push(character);
            continue;
        }
        if run.len() == 64 {
            out.push_str("<sha256>");
        } else if run.len() == 12 && out.ends_with('-') {
            // A config id's digest suffix, which covers the digests too.
            out.push_str("<id>");
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(character);
    }
    out.pop();
    out
}

#[test]
fn the_summary_and_the_gate_markdown_are_pinned() {
    let directory = tempfile::tempdir().unwrap();
    let path = |name: &str| directory.path().join(name);
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
        .arg(path("calibration.json"))
        .assert()
        .code(0);
    routeval()
        .arg("keygen")
        .arg("--out")
        .arg(path("k.key"))
        .assert()
        .code(0);
    let gate = |out: &str, candidates: &[&str], extra: &[&str]| {
        let mut command = routeval();
        command.args(["gate", "--target", "0.9", "--candidates"]);
        for candidate in candidates {
            command.arg(example_routes(candidate));
        }
        command
            .arg("--results")
            .arg(example_results())
            .arg("--calibration")
            .arg(path("calibration.json"))
            .arg("--key")
            .arg(path("k.key"))
            .args(["--at", "2026-11-29T12:00:00Z", "--out"])
            .arg(path(out))
            .args(extra)
            .assert()
    };
    gate("deployed", &["always-large.toml"], &[]).code(0);
    let deployed = path("deployed").join("route-config.v1.json");
    gate(
        "gate",
        &["always-large.toml", "predictive.toml"],
        &[
            "--baseline",
            deployed.to_str().unwrap(),
            "--max-regression",
            "0.1",
        ],
    )
    .code(0);
    routeval()
        .arg("report")
        .arg("--results")
        .arg(example_results())
        .arg("--calibration")
        .arg(path("calibration.json"))
        .arg("--gate")
        .arg(path("gate").join("gate-report.json"))
        .arg("--out")
        .arg(path("report"))
        .assert()
        .code(0);
    // The change from the deployed always-large config to the predictive
    // one the gate emitted leads the summary.
    routeval()
        .arg("report")
        .arg("--results")
        .arg(example_results())
        .arg("--calibration")
        .arg(path("calibration.json"))
        .arg("--gate")
        .arg(path("gate").join("gate-report.json"))
        .arg("--baseline")
        .arg(&deployed)
        .arg("--out")
        .arg(path("change"))
        .assert()
        .code(0);
    let read = |file: &Path| std::fs::read_to_string(file).unwrap();
    let html = read(&path("change").join("report.html"));
    assert!(html.contains("<h2>The change</h2>"));
    // A single-route deployed config has no thresholds a calibration could
    // replace: without the gate's config there is nothing to compare.
    let refused = routeval()
        .arg("report")
        .arg("--results")
        .arg(example_results())
        .arg("--calibration")
        .arg(path("calibration.json"))
        .arg("--baseline")
        .arg(&deployed)
        .arg("--out")
        .arg(path("refused"))
        .assert()
        .code(2);
    assert!(
        String::from_utf8_lossy(&refused.get_output().stderr).contains("nothing to compare with")
    );
    assert!(!path("refused").exists());
    // Each slice's cost–quality chart draws the move as an arrow.
    assert_eq!(html.matches("class=\"change\"").count(), 4);
    // A pull-request comment: the decision, the change and the rest in at
    // most 30 lines.
    for report in ["change", "report"] {
        let summary = read(&path(report).join("summary.md"));
        assert!(summary.lines().count() <= 30, "{report}:\n{summary}");
    }
    check(
        "summary-change.md",
        &read(&path("change").join("summary.md")),
        directory.path(),
    );
    check(
        "summary.md",
        &read(&path("report").join("summary.md")),
        directory.path(),
    );
    check(
        "gate-report.md",
        &read(&path("gate").join("gate-report.md")),
        directory.path(),
    );
}
