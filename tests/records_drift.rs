//! From production records, end to end: a serve-sim run with slow first
//! tokens converted to records and replayed through the breakers; records
//! whose scores moved in one slice make `drift --records` say `recalibrate`
//! for that slice only, and the same records pre-aggregated say the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use routeval::schema::FallbackDocument;
use routeval::schema::{RecordsDriftDocument, Verdict};
use routeval::upstream_sim::{FaultProfile, SimSettings};

use crate::common::{Tuning, base_url, run_command, start_sim, write_config, write_dataset};
use crate::common::{Workspace, example_routes};
use crate::common::{example_results, records_from_results, routeval};

/// The first record's time, in epoch milliseconds: a day in 2025.
const DAY_START_MS: u64 = 1_764_504_000_000;

#[test]
fn a_run_with_slow_first_tokens_converts_to_records_and_the_breaker_cuts_the_wait() {
    let directory = tempfile::tempdir().unwrap();
    // The sim draws a fault by a request's arrival, and the tiers' requests
    // interleave as the scheduler runs them: each tier's share of slow first
    // tokens varies from run to run around 25%. At 400 prompts a tier it
    // stays far from where the comparisons below would turn (120 prompts
    // failed one CI run in several).
    let prompts = 400;
    let dataset = write_dataset(directory.path(), prompts);
    let faults = FaultProfile {
        slow_first_token: 0.25,
        slow_first_token_ms: 2500,
        ..FaultProfile::default()
    };
    let sim = start_sim(
        &dataset,
        SimSettings {
            faults,
            ttft_ms: 30,
            ..SimSettings::default()
        },
    );
    let config = write_config(
        directory.path(),
        &base_url(&sim),
        &Tuning {
            concurrency: 32,
            verifier: false,
            ..Tuning::default()
        },
    );
    let out = directory.path().join("run");
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .success();
    let records = directory.path().join("records.parquet");
    routeval()
        .args([
            "records",
            "import",
            "--from",
            "run",
            "--interval",
            "500ms",
            "--input",
        ])
        .arg(&out)
        .arg("--out")
        .arg(&records)
        .assert()
        .success();
    let replay = |fallback: &[&str]| -> FallbackDocument {
        let output = routeval()
            .args(["replay", "fallback", "--json", "--records"])
            .arg(&records)
            .args([
                "--route",
                "small",
                "--deadline-ms",
                "1000",
                "--open-after",
                "2",
                "--open-ms",
                "2000",
            ])
            .args(fallback)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    // A healthy fallback (a first token in 100 ms): the deadline (1 s) cuts
    // the slow first tokens (2.5 s) and the breaker keeps most requests
    // from waiting it. The large tier's own first tokens average about
    // 0.65 s (a quarter of them 2.5 s), so over some 150 fallbacks the two
    // totals stand about 90 s apart, some seven times the spread the
    // arrival-drawn faults give the large tier's (400 ms stood only three
    // times apart and failed a CI run).
    let healthy = replay(&["--fallback-ttft-ms", "100"]);
    assert_eq!(healthy.policies[0].requests, prompts as u64);
    let (none, breaker) = (&healthy.policies[0], &healthy.policies[2]);
    assert!(none.p95_wait_s >= 2.5, "{none:?}");
    assert!(breaker.deadline_fallbacks > 0, "{breaker:?}");
    assert!(
        breaker.total_wait_s < none.total_wait_s,
        "{breaker:?} {none:?}"
    );
    assert!(breaker.p95_wait_s < 1.5, "{breaker:?}");
    // The run's large tier as the fallback, from its own records: it had
    // slow first tokens too, and the replay shows the move does not pay.
    let recorded = replay(&["--fallback", "large"]);
    let breaker = &recorded.policies[2];
    assert!(breaker.p99_wait_s >= 3.5, "{breaker:?}");
    assert!(
        breaker.total_wait_s > healthy.policies[2].total_wait_s,
        "{breaker:?} {:?}",
        healthy.policies[2]
    );
}

fn drift(config: &Path, flag: &str, input: &Path) -> (Option<i32>, RecordsDriftDocument) {
    drift_in_windows(config, flag, input, "30m")
}

fn drift_in_windows(
    config: &Path,
    flag: &str,
    input: &Path,
    window: &str,
) -> (Option<i32>, RecordsDriftDocument) {
    let output = routeval()
        .args(["drift", "--json", "--window", window, "--config"])
        .arg(config)
        .arg(flag)
        .arg(input)
        .arg("--baseline-results")
        .arg(example_results())
        .output()
        .unwrap();
    let document = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code(), document)
}

fn signed_predictive(workspace: &Workspace) -> PathBuf {
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &["--target", "0.9"],
        )
        .code(0);
    workspace.path("dist").join("route-config.v1.json")
}

#[test]
fn records_whose_scores_moved_in_one_slice_recalibrate_that_slice_only() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let (thresholds, same) =
        records_from_results(&config, &example_results(), "legal", 0.0, DAY_START_MS);
    assert!(thresholds.len() >= 3);
    let steady = workspace.path("steady.jsonl");
    std::fs::write(&steady, same.join("\n") + "\n").unwrap();
    let (code, document) = drift(&config, "--records", &steady);
    assert_eq!(code, Some(0), "{:#?}", document.slices);
    assert_eq!(document.schema_version, 5);
    assert!(document.records_left_out.is_empty());
    assert!(document.records_other_versions.is_empty());
    for slice in &document.slices {
        assert_eq!(slice.verdict, Verdict::Ok, "{slice:?}");
        // Routed at the deployed threshold, the rows escalate as the gate
        // measured them.
        assert_eq!(
            slice.escalation_rate, slice.escalation_rate_at_calibration,
            "{slice:?}"
        );
        assert!(slice.score_shift.as_ref().unwrap().psi < 1e-9);
    }

    let (_, moved) = records_from_results(&config, &example_results(), "legal", 0.3, DAY_START_MS);
    let shifted = workspace.path("shifted.jsonl");
    std::fs::write(&shifted, moved.join("\n") + "\n").unwrap();
    let (code, document) = drift(&config, "--records", &shifted);
    assert_eq!(code, Some(1));
    assert_eq!(document.verdict, Verdict::Recalibrate);
    for slice in &document.slices {
        let expected = if slice.slice == "legal" {
            Verdict::Recalibrate
        } else {
            Verdict::Ok
        };
        assert_eq!(slice.verdict, expected, "{slice:?}");
    }
    let legal = document
        .slices
        .iter()
        .find(|slice| slice.slice == "legal")
        .unwrap();
    assert!(legal.escalation_p_value.unwrap() < 0.01);
    assert!(legal.score_shift.as_ref().unwrap().psi > 0.25);
    assert!(legal.reasons.iter().any(|reason| reason.contains("PSI")));
    let value = serde_json::to_value(&document).unwrap();
    let legal = value["slices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|slice| slice["slice"] == "legal")
        .unwrap();
    let missing = crate::common::undocumented_keys(
        "## drift-records.json",
        &[
            &value,
            &value["config"],
            legal,
            &legal["score_shift"],
            &legal["windows"][0],
            &value["routes"][0],
            &value["routes"][0]["windows"][0],
        ],
    );
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");

    // The same records aggregated by the documented keys say the same.
    let aggregates = workspace.path("aggregates.csv");
    write_aggregates(&shifted, &aggregates);
    let (code, aggregated) = drift(&config, "--aggregates", &aggregates);
    assert_eq!(code, Some(1));
    assert!(aggregated.aggregated);
    for (raw, grouped) in document.slices.iter().zip(&aggregated.slices) {
        assert_eq!(raw.slice, grouped.slice);
        assert_eq!(raw.verdict, grouped.verdict);
        assert_eq!(raw.requests, grouped.requests);
        assert_eq!(raw.escalation_rate, grouped.escalation_rate);
        assert_eq!(raw.score_shift, grouped.score_shift);
    }
    for (raw, grouped) in document.routes.iter().zip(&aggregated.routes) {
        assert_eq!(raw.ttft_p95_ms, grouped.ttft_p95_ms);
        assert_eq!(raw.other_version_share, grouped.other_version_share);
        assert_eq!(raw.failure_share, grouped.failure_share);
    }
}

/// What docs/records-sql.md's GROUP BY computes, for a JSON-lines file.
fn write_aggregates(records: &Path, out: &Path) {
    let window_ms: i64 = 30 * 60 * 1000;
    let mut groups: BTreeMap<Vec<String>, (u64, u64, f64)> = BTreeMap::new();
    for line in std::fs::read_to_string(records).unwrap().lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let timestamp = record["timestamp"].as_i64().unwrap();
        let score = record["score"].as_f64().unwrap();
        let ttft = record["ttft_ms"].as_f64().unwrap();
        let key = vec![
            (timestamp.div_euclid(window_ms) * window_ms).to_string(),
            record["slice"].as_str().unwrap().to_owned(),
            record["logical_model"].as_str().unwrap().to_owned(),
            record["route"].as_str().unwrap().to_owned(),
            record["reason"].as_str().unwrap().to_owned(),
            record["model"].as_str().unwrap().to_owned(),
            ((score * 100.0).floor() as i64).to_string(),
            ((ttft.max(1.0).ln() / 1.01f64.ln()).floor() as i64).to_string(),
        ];
        let entry = groups.entry(key).or_default();
        entry.0 += 1;
        entry.1 += u64::from(
            ["error", "timeout"].contains(&record["status"].as_str().unwrap())
                && record["finish_reason"] != "client_disconnected"
                && record["reason"] != "hedge-lost",
        );
        entry.2 += record["cost_usd"].as_f64().unwrap();
    }
    let mut text = String::from(
        "window_start,slice,logical_model,route,reason,model,score_bin,ttft_bin,requests,failures,cost_usd\n",
    );
    for (key, (requests, failures, cost)) in groups {
        text.push_str(&format!("{},{requests},{failures},{cost}\n", key.join(",")));
    }
    std::fs::write(out, text).unwrap();
}

#[test]
fn one_slow_fallback_alone_in_its_window_is_not_a_brown_out() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let (_, mut records) =
        records_from_results(&config, &example_results(), "legal", 0.0, DAY_START_MS);
    // The large route's first request of the day, an hour before the rest,
    // waited nine seconds and fell back: a window of one.
    let first = records
        .iter()
        .position(|line| line.contains(r#""route":"large""#))
        .unwrap();
    let mut record: serde_json::Value = serde_json::from_str(&records[first]).unwrap();
    record["timestamp"] = (record["timestamp"].as_u64().unwrap() - 3_600_000).into();
    record["reason"] = "fallback:deadline".into();
    record["ttft_ms"] = 9000.0.into();
    records[first] = record.to_string();
    let path = workspace.path("records.jsonl");
    std::fs::write(&path, records.join("\n") + "\n").unwrap();
    let (code, document) = drift_in_windows(&config, "--records", &path, "10m");
    let large = document
        .routes
        .iter()
        .find(|route| route.route == "large")
        .unwrap();
    let alone = &large.windows[0];
    assert_eq!(
        (alone.requests, alone.fallback_share),
        (1, 1.0),
        "{alone:?}"
    );
    assert!(alone.ttft_p95_ms.unwrap() > 4.0 * large.ttft_p95_ms.unwrap());
    assert_eq!(large.verdict, Verdict::Ok, "{large:?}");
    assert_eq!(code, Some(0), "{large:?}");
}

/// The example's clean records, with `route`'s records from index 600 to
/// 1200 failing two times in five as `status` and `finish_reason` say.
fn records_failing(
    workspace: &Workspace,
    config: &Path,
    status: &str,
    finish_reason: Option<&str>,
) -> PathBuf {
    let (_, mut records) =
        records_from_results(config, &example_results(), "legal", 0.0, DAY_START_MS);
    for (index, line) in records.iter_mut().enumerate() {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        if record["route"] == "large" && (600..1200).contains(&index) && index % 5 < 2 {
            record["status"] = status.into();
            record["finish_reason"] = finish_reason.into();
        }
        *line = record.to_string();
    }
    let path = workspace.path(&format!("records-{status}.jsonl"));
    std::fs::write(&path, records.join("\n") + "\n").unwrap();
    path
}

#[test]
fn a_window_where_two_requests_in_five_failed_is_watch() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let clean = records_failing(&workspace, &config, "ok", Some("stop"));
    let (code, document) = drift_in_windows(&config, "--records", &clean, "10m");
    let large = document
        .routes
        .iter()
        .find(|route| route.route == "large")
        .unwrap();
    assert_eq!(large.failure_share, Some(0.0));
    assert_eq!(large.verdict, Verdict::Ok, "{large:?}");
    assert_eq!(code, Some(0));
    for status in ["error", "timeout", "500"] {
        let failing = records_failing(&workspace, &config, status, None);
        let (code, document) = drift_in_windows(&config, "--records", &failing, "10m");
        let large = document
            .routes
            .iter()
            .find(|route| route.route == "large")
            .unwrap();
        assert_eq!(large.verdict, Verdict::Watch, "{status}: {large:?}");
        assert!(
            large
                .reasons
                .iter()
                .any(|reason| reason.contains("failed (errors and timeouts)")),
            "{status}: {large:?}"
        );
        let worst = large
            .windows
            .iter()
            .filter_map(|window| window.failure_share)
            .fold(0.0, f64::max);
        assert!((0.35..=0.45).contains(&worst), "{status}: {worst}");
        // watch, not recalibrate: the exit code stays 0.
        assert_eq!(code, Some(0), "{status}");
    }
}

#[test]
fn clients_that_left_are_not_the_routes_failures() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let left = records_failing(&workspace, &config, "error", Some("client_disconnected"));
    let (code, document) = drift_in_windows(&config, "--records", &left, "10m");
    let large = document
        .routes
        .iter()
        .find(|route| route.route == "large")
        .unwrap();
    assert_eq!(large.failure_share, Some(0.0), "{large:?}");
    assert_eq!(large.verdict, Verdict::Ok, "{large:?}");
    assert_eq!(code, Some(0));
}

#[test]
fn a_brown_out_shows_as_a_window_and_an_unpinned_model_as_silent_drift() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let (_, mut records) =
        records_from_results(&config, &example_results(), "legal", 0.0, DAY_START_MS);
    // An hour of the large route falling back, slowly, and a day of answers
    // from a model nobody pinned on the small one.
    for (index, line) in records.iter_mut().enumerate() {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        if record["route"] == "large" && (600..1200).contains(&index) {
            record["reason"] = "fallback:deadline".into();
            record["ttft_ms"] = 9000.0.into();
        }
        if record["route"] == "mini" {
            record["model"] = "gpt-4o-mini-2025-01-01".into();
        }
        *line = record.to_string();
    }
    let path = workspace.path("records.jsonl");
    std::fs::write(&path, records.join("\n") + "\n").unwrap();
    let (code, document) = drift_in_windows(&config, "--records", &path, "10m");
    assert_eq!(code, Some(1));
    let route = |name: &str| {
        document
            .routes
            .iter()
            .find(|route| route.route == name)
            .unwrap()
    };
    let large = route("large");
    assert_eq!(large.verdict, Verdict::Watch, "{large:?}");
    assert!(large.fallbacks_by_reason["fallback:deadline"] > 0);
    let worst = large
        .windows
        .iter()
        .max_by(|a, b| a.fallback_share.total_cmp(&b.fallback_share))
        .unwrap();
    // The ten minutes of the brown-out stand out against the day.
    assert_eq!(worst.fallback_share, 1.0, "{worst:?}");
    assert!(
        worst.fallback_share > 3.0 * large.fallback_share,
        "{worst:?} against {}",
        large.fallback_share
    );
    assert!(worst.ttft_p95_ms.unwrap() > 8000.0);
    let mini = route("mini");
    assert_eq!(mini.verdict, Verdict::Recalibrate);
    assert_eq!(mini.other_version_share, Some(1.0));
    // The Markdown form carries the verdicts.
    let output = routeval()
        .args(["drift", "--markdown", "--records"])
        .arg(&path)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let markdown = String::from_utf8_lossy(&output.stdout);
    assert!(
        markdown.contains("## Drift from request records: recalibrate"),
        "{markdown}"
    );
    assert!(markdown.contains("| mini |"), "{markdown}");
}

/// Records of the predictive config, a third of them long prompts, and the
/// three documents made of them (`drift --records`, `replay fallback`,
/// `replay hedge`) in one report: made once for the tests of how the report
/// shows records.
struct RecordsReport {
    workspace: Workspace,
    config: PathBuf,
    drift: PathBuf,
    fallback: PathBuf,
    hedge: PathBuf,
    html: String,
    summary: String,
}

impl RecordsReport {
    fn shared() -> &'static RecordsReport {
        static SHARED: std::sync::OnceLock<RecordsReport> = std::sync::OnceLock::new();
        SHARED.get_or_init(RecordsReport::new)
    }

    fn new() -> RecordsReport {
        let workspace = Workspace::new();
        let config = signed_predictive(&workspace);
        let (_, mut records) =
            records_from_results(&config, &example_results(), "legal", 0.0, DAY_START_MS);
        for (index, line) in records.iter_mut().enumerate() {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["input_tokens"] = (if index % 3 == 0 { 20_000 } else { 400 }).into();
            *line = record.to_string();
        }
        let path = workspace.path("records.jsonl");
        std::fs::write(&path, records.join("\n") + "\n").unwrap();
        let document = |name: &str, arguments: &[&str]| {
            let out = workspace.path(name);
            routeval()
                .args(arguments)
                .arg("--records")
                .arg(&path)
                .arg("--out")
                .arg(&out)
                .assert()
                .code(0);
            out
        };
        let drift = document(
            "drift-records.json",
            &["drift", "--config", config.to_str().unwrap()],
        );
        let fallback = document(
            "fallback.json",
            &[
                "replay",
                "fallback",
                "--route",
                "large",
                "--fallback-ttft-ms",
                "800",
            ],
        );
        let hedge = document("hedge.json", &["replay", "hedge"]);
        let report = workspace.path("report");
        routeval()
            .args(["report", "--records"])
            .arg(&drift)
            .arg(&fallback)
            .arg(&hedge)
            .arg("--out")
            .arg(&report)
            .assert()
            .success();
        RecordsReport {
            html: std::fs::read_to_string(report.join("report.html")).unwrap(),
            summary: std::fs::read_to_string(report.join("summary.md")).unwrap(),
            workspace,
            config,
            drift,
            fallback,
            hedge,
        }
    }

    /// `report --records` of `documents` into a new directory `name`,
    /// refused with exit 2 and a line containing `message`, nothing written.
    fn refused(&self, name: &str, documents: &[&Path], message: &str) {
        let out = self.workspace.path(name);
        routeval()
            .args(["report", "--records"])
            .args(documents)
            .arg("--out")
            .arg(&out)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(message));
        assert!(!out.exists(), "{name}");
    }
}

#[test]
fn the_report_charts_the_windows_the_replayed_breakers_and_the_hedging_trade() {
    let html = &RecordsReport::shared().html;
    for heading in [
        "Drift from request records",
        "Breakers and fallback",
        "Hedging",
        "First token p95 per window",
        "p95 first token saved per 1k extra input tokens",
    ] {
        assert!(html.contains(heading), "{heading} missing");
    }
    assert!(html.matches("<svg").count() >= 5);
}

#[test]
fn the_windows_are_charted_in_hours_from_the_first_windows_start() {
    let html = &RecordsReport::shared().html;
    // The first record comes after the first window's start: no tick is
    // before zero.
    let drift_section = html
        .split("Drift from request records")
        .nth(1)
        .and_then(|rest| rest.split("Breakers and fallback").next())
        .unwrap();
    let ticks: Vec<&str> = drift_section
        .split("class=\"tick\">")
        .skip(1)
        .filter_map(|rest| rest.split('<').next())
        .collect();
    assert!(!ticks.is_empty());
    assert!(ticks.iter().all(|tick| !tick.starts_with('-')), "{ticks:?}");
}

#[test]
fn the_summary_names_the_replayed_route_and_the_long_prompts() {
    let summary = &RecordsReport::shared().summary;
    assert!(
        summary.contains("**Breakers replayed** on route `large`"),
        "{summary}"
    );
    assert!(summary.contains("16k |"), "{summary}");
}

#[test]
fn a_directory_of_records_is_refused_in_one_line_that_says_what_to_run() {
    let shared = RecordsReport::shared();
    let out = shared.workspace.path("from-a-directory");
    let assert = routeval()
        .args(["report", "--records"])
        .arg(shared.workspace.path(""))
        .arg("--out")
        .arg(&out)
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("a directory; report --records takes the documents")
            && stderr.contains("routeval drift --records"),
        "{stderr}"
    );
    assert!(!out.exists());
}

#[test]
fn beside_graded_results_the_records_sections_follow_the_decision_and_the_calibrations() {
    let shared = RecordsReport::shared();
    let full = shared.workspace.path("full");
    routeval()
        .args(["report", "--results"])
        .arg(example_results())
        .arg("--records")
        .arg(&shared.fallback)
        .arg("--out")
        .arg(&full)
        .assert()
        .success();
    let html = std::fs::read_to_string(full.join("report.html")).unwrap();
    let slices = html
        .find("<h3>Calibrations</h3>")
        .expect("the slices' summary");
    let records = html
        .find("Breakers and fallback")
        .expect("the records' section");
    let decision = html.find("<h2>Decision</h2>").expect("the first screen");
    assert!(decision < slices && slices < records);
    // In the summary the replay is a line that points at the report.
    let summary = std::fs::read_to_string(full.join("summary.md")).unwrap();
    assert!(
        summary.contains("- Breakers and hedging replayed on the records: in the report."),
        "{summary}"
    );
}

#[test]
fn a_document_of_another_kind_or_a_second_of_one_kind_is_refused() {
    let shared = RecordsReport::shared();
    shared.refused(
        "refused",
        &[&shared.config],
        "not a document of `drift --records`",
    );
    shared.refused(
        "twice",
        &[&shared.hedge, &shared.hedge],
        "a second hedge document",
    );
}

#[test]
fn a_records_document_of_a_version_this_build_does_not_know_is_refused() {
    let shared = RecordsReport::shared();
    // Older or newer: a chart of a document misread would show what it
    // does not say.
    for (document, kind) in [
        (&shared.drift, "drift-records"),
        (&shared.fallback, "fallback"),
        (&shared.hedge, "hedge"),
    ] {
        for version in [0, 99] {
            let mut value: serde_json::Value =
                serde_json::from_slice(&std::fs::read(document).unwrap()).unwrap();
            value["schema_version"] = version.into();
            let edited = shared.workspace.path(&format!("{kind}-v{version}.json"));
            std::fs::write(&edited, value.to_string()).unwrap();
            shared.refused(
                &format!("{kind}-v{version}"),
                &[&edited],
                &format!("schema_version {version} is not one this routeval reads"),
            );
        }
    }
}

#[test]
fn records_read_on_every_core_fold_to_what_one_reader_folds() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let (_, records) =
        records_from_results(&config, &example_results(), "legal", 0.1, DAY_START_MS);
    // Enough records for several row groups (65,536 rows each) of Parquet.
    let mut lines = Vec::with_capacity(records.len() * 22);
    for copy in 0..22u64 {
        for line in &records {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["id"] = format!("{}-{copy}", record["id"].as_str().unwrap()).into();
            record["timestamp"] = (record["timestamp"].as_u64().unwrap() + copy * 3_600_000).into();
            lines.push(record.to_string());
        }
    }
    let jsonl = workspace.path("many.jsonl");
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    let parquet = workspace.path("many.parquet");
    routeval()
        .args(["records", "import", "--from", "generic", "--input"])
        .arg(&jsonl)
        .arg("--out")
        .arg(&parquet)
        .assert()
        .success();
    let groups = parquet::file::reader::FileReader::metadata(
        &parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&parquet).unwrap())
            .unwrap(),
    )
    .num_row_groups();
    assert!(groups >= 2, "{groups} row groups");
    let (_, one) = drift(&config, "--records", &jsonl);
    let (_, many) = drift(&config, "--records", &parquet);
    assert_eq!(one.records.rows, many.records.rows);
    assert_eq!((one.first_ms, one.last_ms), (many.first_ms, many.last_ms));
    for (a, b) in one.slices.iter().zip(&many.slices) {
        assert_eq!(a, b);
    }
    for (a, b) in one.routes.iter().zip(&many.routes) {
        assert_eq!(a.requests, b.requests);
        assert_eq!(a.ttft_p95_ms, b.ttft_p95_ms);
        assert_eq!(a.windows.len(), b.windows.len());
        assert_eq!(a.fallbacks_by_reason, b.fallbacks_by_reason);
        let (x, y) = (
            a.cost_per_request_usd.unwrap(),
            b.cost_per_request_usd.unwrap(),
        );
        assert!((x - y).abs() < 1e-12 * x.abs().max(1.0));
    }
}

/// A day and a half of records with everything the fold distinguishes:
/// other logical models and none, reasons and none (decided by the score),
/// fallbacks, unpinned and unreported models, a route the config does not
/// have, failures, missing scores, first tokens and costs. Costs are
/// multiples of 1/1024, so sums are exact in any order.
fn varied_records(count: usize) -> Vec<routeval::records::Record<'static>> {
    use routeval::records::{Record, Status};
    let mut random = crate::common::Random::new(29);
    let slices = ["billing", "legal", "sales", "technical", "unknown-tenant"];
    (0..count)
        .map(|index| {
            let roll = random.unit();
            let score = (random.unit() >= 0.1).then(|| random.unit());
            let large = score.is_some_and(|score| score >= 0.6);
            let route = match random.unit() {
                draw if draw < 0.02 => "backup",
                _ if large => "large",
                _ => "mini",
            };
            let reason = match random.unit() {
                draw if draw < 0.1 => None,
                draw if draw < 0.12 => Some("fallback:deadline"),
                draw if draw < 0.13 => Some("fallback:error"),
                draw if draw < 0.14 => Some("hedge-won"),
                draw if draw < 0.145 => Some("hedge-lost"),
                _ if large => Some("routed-large"),
                _ => Some("routed-small"),
            };
            let model = match random.unit() {
                draw if draw < 0.05 => None,
                draw if draw < 0.08 => Some("gpt-4o-2024-11-20"),
                _ if route == "large" => Some("gpt-4o-2024-08-06"),
                _ => Some("gpt-4o-mini-2024-07-18"),
            };
            let status = match random.unit() {
                draw if draw < 0.03 => Status::Error,
                draw if draw < 0.04 => Status::Timeout,
                draw if draw < 0.06 => Status::RateLimited,
                _ => Status::Ok,
            };
            let ttft = (random.unit() >= 0.05).then(|| 100.0 + random.unit() * 3000.0);
            Record {
                logical_model: match roll {
                    draw if draw < 0.05 => Some("another-model".into()),
                    draw if draw < 0.1 => None,
                    _ => Some("support-fast".into()),
                },
                model: model.map(Into::into),
                reason: reason.map(Into::into),
                score,
                input_tokens: Some(1000 + index as u64 % 700),
                cached_input_tokens: Some(index as u64 % 300),
                output_tokens: (index % 9 != 0).then_some(200),
                ttft_ms: ttft,
                total_ms: ttft.map(|ttft| ttft + 1500.0),
                finish_reason: Some(
                    if index % 11 == 0 {
                        "client_disconnected"
                    } else {
                        "stop"
                    }
                    .into(),
                ),
                cost_usd: (index % 20 != 0).then(|| (1 + index % 37) as f64 / 1024.0),
                ..Record::new(
                    format!("req-{index:07}"),
                    // Mostly in order, as gateways write them, with stragglers.
                    1_764_504_000_000 + index as i64 * 800 - (random.unit() * 5000.0) as i64,
                    slices[index % slices.len()].to_owned(),
                    route.to_owned(),
                    status,
                )
            }
        })
        .collect()
}

fn write_records_parquet(path: &Path, records: &[routeval::records::Record<'static>]) {
    let mut writer =
        routeval::records::RecordsWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for record in records {
        writer.push(record.clone()).unwrap();
    }
    writer.close().unwrap();
}

fn write_records_json_lines(path: &Path, records: &[routeval::records::Record<'static>]) {
    let lines: Vec<String> = records
        .iter()
        .map(|record| {
            serde_json::json!({
                "id": record.id,
                "timestamp": record.timestamp_ms,
                "slice": record.slice,
                "logical_model": record.logical_model,
                "route": record.route,
                "model": record.model,
                "reason": record.reason,
                "score": record.score,
                "status": record.status.name(),
                "input_tokens": record.input_tokens,
                "cached_input_tokens": record.cached_input_tokens,
                "output_tokens": record.output_tokens,
                "ttft_ms": record.ttft_ms,
                "total_ms": record.total_ms,
                "finish_reason": record.finish_reason,
                "cost_usd": record.cost_usd,
                "config_version": record.config_version,
            })
            .to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn parquet_read_as_columns_folds_to_exactly_what_the_row_reader_folds() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    // Three row groups of 65,536 and a part of a fourth.
    let records = varied_records(200_000);
    let (parquet, jsonl) = (workspace.path("r.parquet"), workspace.path("r.jsonl"));
    write_records_parquet(&parquet, &records);
    write_records_json_lines(&jsonl, &records);
    for window in ["1h", "7m"] {
        let (code_rows, mut by_rows) = drift_in_windows(&config, "--records", &jsonl, window);
        let (code_columns, by_columns) = drift_in_windows(&config, "--records", &parquet, window);
        assert_eq!(code_rows, code_columns);
        assert_eq!(by_rows.records.rows, 200_000);
        assert_eq!(by_rows.records.rows, by_columns.records.rows);
        // Everything but the input file's name and digest.
        by_rows.records = by_columns.records.clone();
        assert_eq!(by_rows, by_columns);
        let other = records
            .iter()
            .filter(|record| record.logical_model.as_deref() == Some("another-model"))
            .count() as u64;
        assert_eq!(
            by_columns.records_left_out,
            BTreeMap::from([("another-model".to_owned(), other)])
        );
        let routes: Vec<&str> = by_columns.routes.iter().map(|r| r.route.as_str()).collect();
        assert_eq!(routes, ["backup", "large", "mini"]);
        assert!(by_columns.slices.iter().all(|slice| slice.decided > 0));
    }
}

#[test]
fn a_bad_value_deep_in_a_parquet_file_is_named_by_its_row_as_the_row_reader_names_it() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let drift_error = |records: &[routeval::records::Record<'static>], name: &str| {
        let parquet = workspace.path(&format!("{name}.parquet"));
        write_records_parquet(&parquet, records);
        let output = routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg("--records")
            .arg(&parquet)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{name}");
        assert!(output.stdout.is_empty(), "{name}");
        String::from_utf8(output.stderr).unwrap()
    };
    let clean = varied_records(150_000);
    // Row 100,001 is in the second row group, the second reading worker's.
    let mut late = clean.clone();
    late[100_000].ttft_ms = Some(9000.0);
    late[100_000].total_ms = Some(10.0);
    let message = drift_error(&late, "late");
    assert!(
        message.contains(
            "row 100001, field \"ttft_ms\": first token at 9000 ms after the end at 10 ms"
        ),
        "{message}"
    );
    // Two bad rows: the earlier is named, whichever worker reads it.
    let mut two = late.clone();
    two[140_000].cost_usd = Some(-1.0);
    two[70_000].cached_input_tokens = Some(5000);
    let message = drift_error(&two, "two");
    assert!(
        message.contains("row 70001, field \"cached_input_tokens\": 5000 cached of"),
        "{message}"
    );
    let mut blank = clean.clone();
    blank[131_072].id = "   ".into();
    let message = drift_error(&blank, "blank");
    assert!(
        message.contains("row 131073, field \"id\": missing"),
        "{message}"
    );
    let mut tokens = clean;
    tokens[149_999].output_tokens = Some(2_000_000_000_000_000);
    let message = drift_error(&tokens, "tokens");
    assert!(
        message.contains("row 150000, field \"output_tokens\""),
        "{message}"
    );
}

#[test]
fn records_of_no_deployed_logical_model_are_an_error_not_an_ok() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    // A one-letter typo in every record's logical model.
    let mut records = varied_records(2000);
    for record in &mut records {
        record.logical_model = Some("support-fsat".into());
    }
    let (parquet, jsonl) = (workspace.path("typo.parquet"), workspace.path("typo.jsonl"));
    write_records_parquet(&parquet, &records);
    write_records_json_lines(&jsonl, &records);
    // The same 2,000 requests as the warehouse's groups.
    let aggregates = workspace.write(
        "typo-aggregates.csv",
        "window_start,slice,logical_model,route,reason,model,score_bin,ttft_bin,requests,cost_usd\n\
         1764504000000,billing,support-fsat,mini,routed-small,gpt-4o-mini-2024-07-18,12,600,1500,0.75\n\
         1764504000000,legal,support-fsat,large,routed-large,gpt-4o-2024-08-06,81,650,500,4.5\n",
    );
    for (flag, input) in [
        ("--records", &parquet),
        ("--records", &jsonl),
        ("--aggregates", &aggregates),
    ] {
        routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg(flag)
            .arg(input)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(
                "no record is of support-fast, the logical model the deployed config routes (the records are of support-fsat (2000)): nothing was checked",
            ));
    }
    // Some of another model: counted in the document and the table.
    let mut mixed = varied_records(2000);
    for record in mixed.iter_mut().take(300) {
        record.logical_model = Some("support-fsat".into());
    }
    let mixed_path = workspace.path("mixed.parquet");
    write_records_parquet(&mixed_path, &mixed);
    let another = mixed
        .iter()
        .filter(|record| record.logical_model.as_deref() == Some("another-model"))
        .count() as u64;
    let (_, document) = drift(&config, "--records", &mixed_path);
    assert_eq!(
        document.records_left_out,
        BTreeMap::from([
            ("another-model".to_owned(), another),
            ("support-fsat".to_owned(), 300)
        ])
    );
    routeval()
        .args(["drift", "--config"])
        .arg(&config)
        .arg("--records")
        .arg(&mixed_path)
        .assert()
        .stdout(predicates::str::contains(format!(
            "left out, of other logical models: another-model ({another}), support-fsat (300)"
        )));
    // A window under a second is named as it was given, not as "0 s".
    routeval()
        .args(["drift", "--window", "500ms", "--config"])
        .arg(&config)
        .arg("--records")
        .arg(&mixed_path)
        .assert()
        .stdout(predicates::str::contains("windows of 500 ms"));
}

#[test]
fn records_served_by_another_config_version_are_counted_apart_not_judged() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let signed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let version = signed["version"].as_u64().unwrap();
    // Every record served by the next version: refused, naming it.
    let mut later = varied_records(1000);
    let of_the_model = later
        .iter()
        .filter(|record| record.logical_model.as_deref() != Some("another-model"))
        .count();
    for record in &mut later {
        record.config_version = Some(version + 1);
    }
    let (parquet, jsonl) = (
        workspace.path("later.parquet"),
        workspace.path("later.jsonl"),
    );
    write_records_parquet(&parquet, &later);
    write_records_json_lines(&jsonl, &later);
    for input in [&parquet, &jsonl] {
        let output = routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg("--records")
            .arg(input)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "no record was served by {} version {version}, the config given (--config); the records were served by version {} ({of_the_model})",
                signed["config_id"].as_str().unwrap(),
                version + 1
            )),
            "{stderr}"
        );
    }
    // Some by this version, some by others, some that do not say: those of
    // other versions are counted apart, the rest judged.
    let mut mixed = varied_records(2000);
    for (index, record) in mixed.iter_mut().enumerate() {
        record.config_version = match index % 4 {
            0 => Some(version),
            1 => Some(version + 1),
            2 => Some(version + 2),
            _ => None,
        };
    }
    let judged = mixed
        .iter()
        .filter(|record| record.config_version.is_none_or(|v| v == version))
        .filter(|record| record.logical_model.as_deref() != Some("another-model"))
        .count() as u64;
    let (parquet, jsonl) = (
        workspace.path("mixed.parquet"),
        workspace.path("mixed.jsonl"),
    );
    write_records_parquet(&parquet, &mixed);
    write_records_json_lines(&jsonl, &mixed);
    for input in [&parquet, &jsonl] {
        let (_, document) = drift(&config, "--records", input);
        let other = |v: u64| {
            mixed
                .iter()
                .filter(|record| record.config_version == Some(v))
                .filter(|record| record.logical_model.as_deref() != Some("another-model"))
                .count() as u64
        };
        assert_eq!(
            document.records_other_versions,
            BTreeMap::from([
                (version + 1, other(version + 1)),
                (version + 2, other(version + 2))
            ])
        );
        let requests: u64 = document.slices.iter().map(|slice| slice.requests).sum();
        assert_eq!(requests, judged, "{}", input.display());
    }
    routeval()
        .args(["drift", "--config"])
        .arg(&config)
        .arg("--records")
        .arg(&parquet)
        .assert()
        .stdout(predicates::str::contains(format!(
            "left out, served by other config versions: version {} (",
            version + 1
        )));
}

#[test]
fn a_record_table_of_a_version_this_build_does_not_know_is_refused() {
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let current = workspace.path("v1.parquet");
    write_records_parquet(&current, &varied_records(3000));
    for version in ["0", "99"] {
        let tagged = workspace.path(&format!("v{version}.parquet"));
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&current).unwrap())
                .unwrap()
                .build()
                .unwrap();
        let properties = WriterProperties::builder()
            .set_key_value_metadata(Some(vec![KeyValue::new(
                routeval::records::SCHEMA_VERSION_KEY.to_owned(),
                version.to_owned(),
            )]))
            .build();
        let mut writer = ArrowWriter::try_new(
            std::fs::File::create(&tagged).unwrap(),
            routeval::records::RECORDS_SCHEMA.clone(),
            Some(properties),
        )
        .unwrap();
        for batch in reader {
            writer.write(&batch.unwrap()).unwrap();
        }
        writer.close().unwrap();
        let refused = format!(
            "cannot read: routeval.records.schema_version = {version}: schema_version {version} is not one this routeval reads (1)"
        );
        // Read as columns, and record by record.
        routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg("--records")
            .arg(&tagged)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(refused.as_str()));
        routeval()
            .args(["replay", "hedge", "--records"])
            .arg(&tagged)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(refused.as_str()));
    }
    let (_, document) = drift(&config, "--records", &current);
    assert_eq!(document.records.rows, 3000);
}

/// A Parquet file of three columns besides the required texts, typed as
/// the test says.
fn write_typed_records(
    path: &Path,
    timestamps: arrow::array::ArrayRef,
    cost: arrow::array::ArrayRef,
    ttft: arrow::array::ArrayRef,
) {
    use arrow::array::{ArrayRef, StringArray};
    use std::sync::Arc;
    let rows = timestamps.len();
    let text = |value: &str| -> ArrayRef { Arc::new(StringArray::from(vec![value; rows])) };
    let ids: ArrayRef = Arc::new(StringArray::from(
        (0..rows).map(|row| format!("r{row}")).collect::<Vec<_>>(),
    ));
    let batch = arrow::record_batch::RecordBatch::try_from_iter([
        ("id", ids),
        ("timestamp", timestamps),
        ("slice", text("billing")),
        ("logical_model", text("support-fast")),
        ("route", text("mini")),
        ("status", text("ok")),
        ("cost_usd", cost),
        ("ttft_ms", ttft),
    ])
    .unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

#[test]
fn a_value_of_the_wrong_type_in_parquet_is_refused_with_its_row_not_read_as_missing() {
    use arrow::array::{ArrayRef, Float64Array, StringArray};
    use std::sync::Arc;
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let start = 1_764_504_000_000.0;
    let floats = |values: Vec<f64>| -> ArrayRef { Arc::new(Float64Array::from(values)) };
    let texts = |values: Vec<&str>| -> ArrayRef { Arc::new(StringArray::from(values)) };
    let good_times = || floats(vec![start, start + 1000.0, start + 2000.0]);
    let drift_of = |name: &str| {
        let output = routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg("--records")
            .arg(workspace.path(name))
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    // Whole float milliseconds and numbers as text read as they say.
    write_typed_records(
        &workspace.path("fine.parquet"),
        good_times(),
        texts(vec!["0.25", "0.5", "1e-3"]),
        texts(vec!["120", "240.5", "80"]),
    );
    let (code, stderr) = drift_of("fine.parquet");
    assert_eq!(code, Some(0), "{stderr}");
    for (name, timestamps, cost, ttft, expected) in [
        (
            "free.parquet",
            good_times(),
            texts(vec!["0.25", "free", "0.5"]),
            texts(vec!["120", "240", "80"]),
            "row 2, field \"cost_usd\": \"free\" is not a number",
        ),
        (
            "fast.parquet",
            good_times(),
            texts(vec!["0.25", "0.5", "0.5"]),
            texts(vec!["120", "240", "fast"]),
            "row 3, field \"ttft_ms\": \"fast\" is not a number",
        ),
        (
            "fraction.parquet",
            floats(vec![start, start + 0.5, start]),
            texts(vec!["0.25", "0.5", "0.5"]),
            texts(vec!["120", "240", "80"]),
            "row 2, field \"timestamp\": 1764504000000.5 is not whole epoch milliseconds",
        ),
        (
            "huge.parquet",
            floats(vec![start, start, 1e30]),
            texts(vec!["0.25", "0.5", "0.5"]),
            texts(vec!["120", "240", "80"]),
            "row 3, field \"timestamp\":",
        ),
    ] {
        write_typed_records(&workspace.path(name), timestamps, cost, ttft);
        let (code, stderr) = drift_of(name);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(
            !stderr.contains("missing"),
            "{name}: a bad value read as missing: {stderr}"
        );
    }
    // JSON lines: a whole float is whole milliseconds, a fraction is not.
    let line = |timestamp: &str| {
        format!(
            "{{\"id\": \"a{timestamp}\", \"timestamp\": {timestamp}, \"slice\": \"billing\", \"logical_model\": \"support-fast\", \"route\": \"mini\", \"status\": \"ok\"}}\n"
        )
    };
    let whole = workspace.write("whole.jsonl", &line("1764504000000.0"));
    let (code, stderr) = drift_of("whole.jsonl");
    assert_eq!(code, Some(0), "{}: {stderr}", whole.display());
    workspace.write("half.jsonl", &line("1764504000000.5"));
    let (code, stderr) = drift_of("half.jsonl");
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains(
            "line 1, field \"timestamp\": 1764504000000.5 is not whole epoch milliseconds"
        ),
        "{stderr}"
    );
}

#[test]
fn sums_of_user_counts_that_would_wrap_are_refused() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    // 20,000 answered requests of 1e15 input tokens each (each allowed).
    let lines: Vec<String> = (0..20_000)
        .map(|index| {
            serde_json::json!({
                "id": format!("h{index}"), "timestamp": 1_764_504_000_000u64 + index,
                "slice": "billing", "route": "mini", "status": "ok",
                "ttft_ms": 100 + index % 900, "input_tokens": 1_000_000_000_000_000u64,
                "output_tokens": 10,
            })
            .to_string()
        })
        .collect();
    let heavy = workspace.write("heavy.jsonl", &(lines.join("\n") + "\n"));
    routeval()
        .args(["replay", "hedge", "--records"])
        .arg(&heavy)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "field \"input_tokens\": the records' tokens add up past 2^64",
        ));
    let header = "window_start,slice,logical_model,route,reason,model,score_bin,ttft_bin,requests,cost_usd\n";
    let row = |requests: &str, ttft_bin: &str| {
        format!(
            "1764504000000,billing,support-fast,mini,routed-small,gpt-4o-mini-2024-07-18,12,{ttft_bin},{requests},0.5\n"
        )
    };
    let cases = [
        (
            "overflow.csv",
            format!(
                "{header}{}{}{}",
                row("9000000000000000000", "600"),
                row("9000000000000000000", "600"),
                row("9000000000000000000", "600")
            ),
            "line 4, field \"requests\": the rows' requests add up past 2^64",
        ),
        (
            "bin.csv",
            format!("{header}{}", row("10", "100000")),
            "line 2, field \"ttft_bin\": 100000 is no first-token bin",
        ),
    ];
    for (name, text, expected) in cases {
        let path = workspace.write(name, &text);
        routeval()
            .args(["drift", "--json", "--config"])
            .arg(&config)
            .arg("--aggregates")
            .arg(&path)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(expected));
    }
}

/// Issue 25: a day of records from the population the config was
/// calibrated on, in hourly windows over 20 slices (480 window tests), and
/// the run as a whole rarely raises an alarm (1 of these 20 runs); the
/// earlier uncorrected window rule at p < 0.01 and PSI bands flagged all 20.
#[test]
fn a_day_of_unchanged_records_rarely_raises_an_alarm() {
    use crate::common::synthetic_rows;
    use crate::common::{certified_synthetic, slice_names};
    let workspace = Workspace::new();
    let names = slice_names(20);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (baseline, config) = certified_synthetic(&workspace, &names);
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let thresholds = &document["table"]["policy"]["predictive"]["thresholds"];
    let threshold = |slice: &str| {
        thresholds["slices"][slice]
            .as_f64()
            .or_else(|| thresholds["default"].as_f64())
            .unwrap_or(f64::INFINITY)
    };
    let model = |route: &str| {
        document["table"]["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|candidate| candidate["name"] == route)
            .unwrap()["model"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let runs = 20;
    let mut alarms = 0;
    for run in 0..runs {
        let rows = synthetic_rows(&names, 1000, 200 + run);
        // Each slice's rows spread over the whole day.
        let day = 86_400_000u64 / 1000;
        let mut seen: BTreeMap<String, u64> = BTreeMap::new();
        let lines: Vec<String> = rows
            .iter()
            .map(|row| {
                let index = seen.entry(row.slice.clone()).or_default();
                *index += 1;
                let large = row.score >= threshold(&row.slice);
                let route = if large { "large" } else { "mini" };
                serde_json::json!({
                    "id": format!("{}-{run}", row.id),
                    "timestamp": 1_764_504_000_000u64 + *index * day,
                    "slice": row.slice,
                    "logical_model": "support-fast",
                    "route": route,
                    "model": model(route),
                    "reason": if large { "routed-large" } else { "routed-small" },
                    "score": row.score,
                    "status": "ok",
                })
                .to_string()
            })
            .collect();
        let records = workspace.path(&format!("day-{run}.jsonl"));
        std::fs::write(&records, lines.join("\n") + "\n").unwrap();
        let output = routeval()
            .args([
                "drift",
                "--json",
                "--window",
                "1h",
                "--config",
                &config,
                "--records",
            ])
            .arg(&records)
            .arg("--baseline-results")
            .arg(&baseline)
            .output()
            .unwrap();
        let document: RecordsDriftDocument = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
        assert!(document.tests > 480, "{} tests", document.tests);
        alarms += usize::from(document.verdict != Verdict::Ok);
    }
    eprintln!("unchanged records: {alarms} of {runs} runs raised an alarm");
    // At most δ = 5% in expectation, 1 of 20; 5 or more has probability
    // 0.003 under that bound.
    assert!(
        alarms <= 4,
        "{alarms} of {runs} unchanged runs raised an alarm"
    );
}

/// The example's clean records with the large route's `field` set to
/// `value`, written as `name`.
fn records_with(
    workspace: &Workspace,
    config: &Path,
    field: &str,
    value: f64,
    name: &str,
) -> PathBuf {
    let (_, mut records) =
        records_from_results(config, &example_results(), "legal", 0.0, DAY_START_MS);
    for line in records.iter_mut() {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        if record["route"] == "large" {
            record[field] = value.into();
            if field == "ttft_ms" {
                record["total_ms"] = value.into();
            }
        }
        *line = record.to_string();
    }
    let path = workspace.path(name);
    std::fs::write(&path, records.join("\n") + "\n").unwrap();
    path
}

fn drift_text(config: &Path, records: &Path) -> std::process::Output {
    routeval()
        .args(["drift", "--config"])
        .arg(config)
        .arg("--records")
        .arg(records)
        .arg("--baseline-results")
        .arg(example_results())
        .output()
        .unwrap()
}

#[test]
fn a_cost_past_any_price_is_refused_naming_its_row_and_a_huge_latency_prints_readably() {
    let workspace = Workspace::new();
    let config = signed_predictive(&workspace);
    let absurd = records_with(&workspace, &config, "cost_usd", 1e308, "absurd-cost.jsonl");
    let output = drift_text(&config, &absurd);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("absurd-cost.jsonl")
            && stderr.contains("line 9")
            && stderr.contains("cost_usd")
            && stderr.contains("1.000e308 USD")
            && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
    let slow = records_with(
        &workspace,
        &config,
        "ttft_ms",
        1e300,
        "absurd-latency.jsonl",
    );
    let output = drift_text(&config, &slow);
    let text = String::from_utf8_lossy(&output.stdout);
    let large = text
        .lines()
        .find(|line| line.contains(" large "))
        .unwrap_or_else(|| panic!("no row for the large route: {text}"));
    assert!(large.contains("e300"), "{large}");
    assert!(
        text.lines().all(|line| line.len() < 400),
        "a line runs to hundreds of digits: {text}"
    );
}
