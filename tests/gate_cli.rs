//! `routeval gate` end to end on the example results: the choice, every
//! rule, the emitted files and the report format.

use std::collections::BTreeSet;

use predicates::prelude::*;
use routeval::routes::RouteConfig;
use routeval::schema::{GateReport, Rule};

use crate::common::Workspace;
use crate::common::by_router;
use crate::common::calibrate_into;
use crate::common::example_routes;
use crate::common::two_scores;
use crate::common::variant;
use crate::common::{example_results, keys, routeval};

fn rules_of(report: &GateReport, file_suffix: &str) -> BTreeSet<Rule> {
    report
        .candidates
        .iter()
        .find(|candidate| candidate.file.ends_with(file_suffix))
        .unwrap()
        .failures
        .iter()
        .map(|failure| failure.rule)
        .collect()
}

#[test]
fn picks_the_cheapest_passing_candidate_and_emits_a_verified_config() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[
                example_routes("always-large.toml"),
                example_routes("predictive.toml"),
            ],
            "dist",
            &["--target", "0.9"],
        )
        .code(0)
        .stdout(predicate::str::contains("chosen: predictive.toml"));
    let report = workspace.report("dist");
    assert!(report.candidates.iter().all(|candidate| candidate.passed));
    assert!(
        report
            .chosen
            .as_deref()
            .unwrap()
            .ends_with("predictive.toml")
    );
    let costs: Vec<f64> = report
        .candidates
        .iter()
        .map(|candidate| candidate.overall.mean_cost)
        .collect();
    assert!(
        costs[1] < costs[0],
        "predictive is cheaper than always-large: {costs:?}"
    );

    let emitted = report.emitted.unwrap();
    assert_eq!(emitted.version, 1);
    let bytes = std::fs::read(&emitted.config).unwrap();
    let config: RouteConfig = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(config.version, 1);
    assert_eq!(config.parent_sha256, None);
    assert_eq!(config.created_at, "2026-11-29T12:00:00Z");
    assert_eq!(config.expires_at, "2026-12-29T12:00:00Z");
    assert_eq!(routeval::digest::sha256_hex(&bytes), emitted.sha256);
    // Canonical: re-serialising the parsed file gives the same bytes.
    assert_eq!(serde_json_canonicalizer::to_vec(&config).unwrap(), bytes);
    assert!(config.provenance.results_sha256.len() == 64);

    routeval()
        .arg("verify")
        .arg(&emitted.config)
        .arg("--pubkey")
        .arg(workspace.path("routeval.key.pub"))
        .args(["--at", "2026-12-01T00:00:00Z"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("version 1"));
    // LiteLLM cannot carry out a predictive policy: without --serve-url no
    // export is written, and the report says why.
    assert_eq!(emitted.litellm, None);
    assert!(!workspace.path("dist/route-config.v1.litellm.yaml").exists());
    let chosen = report
        .candidates
        .iter()
        .find(|candidate| candidate.file.ends_with("predictive.toml"))
        .unwrap();
    assert!(
        chosen
            .warnings
            .iter()
            .any(|warning| warning.starts_with("no LiteLLM export written")
                && warning.contains("--serve-url")),
        "{:?}",
        chosen.warnings
    );
    let markdown = std::fs::read_to_string(workspace.path("dist").join("gate-report.md")).unwrap();
    assert!(
        markdown.contains("**Decision: `predictive.toml` passes every rule.**"),
        "{markdown}"
    );
}

#[test]
fn metrics_match_a_recomputation_from_the_rows() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("always-large.toml")],
            "dist",
            &["--target", "0.5"],
        )
        .code(0);
    let report = workspace.report("dist");
    let overall = &report.candidates[0].overall;
    let text = std::fs::read_to_string(example_results()).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|field| *field == name).unwrap();
    let (ok, cost, ttft) = (
        column("large_ok"),
        column("cost_large"),
        column("large_ttft_ms"),
    );
    let rows: Vec<Vec<&str>> = lines.map(|line| line.split(',').collect()).collect();
    let n = rows.len() as f64;
    let quality = rows.iter().filter(|row| row[ok] == "true").count() as f64 / n;
    let mean_cost = rows
        .iter()
        .map(|row| row[cost].parse::<f64>().unwrap())
        .sum::<f64>()
        / n;
    let mut latencies: Vec<f64> = rows.iter().map(|row| row[ttft].parse().unwrap()).collect();
    latencies.sort_by(f64::total_cmp);
    assert!((overall.quality - quality).abs() < 1e-12);
    assert!((overall.mean_cost - mean_cost).abs() < 1e-12);
    assert_eq!(
        overall.p95_ms,
        Some(latencies[(0.95 * n).ceil() as usize - 1])
    );
    assert_eq!(overall.escalation_rate, 0.0);
}

#[test]
fn no_passing_candidate_fails_the_check_and_emits_nothing() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[
                example_routes("always-large.toml"),
                example_routes("predictive.toml"),
            ],
            "dist",
            &["--target", "0.999"],
        )
        .code(1)
        .stdout(predicate::str::contains("no candidate passed"));
    let report = workspace.report("dist");
    assert_eq!(report.chosen, None);
    assert_eq!(report.emitted, None);
    assert!(rules_of(&report, "predictive.toml").contains(&Rule::BelowTarget));
    // Beside the gate's lock, which it keeps there.
    let written: Vec<String> = std::fs::read_dir(workspace.path("dist"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".routeval-gate.lock")
        .collect();
    assert_eq!(written.len(), 2, "only the reports: {written:?}");
}

#[test]
fn constraints_reject_before_cost_is_considered() {
    let workspace = Workspace::new();
    let constraints = workspace.write("constraints.toml", "[legal]\nregions = [\"us-east-1\"]\n");
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &[
                "--target",
                "0.9",
                "--constraints",
                constraints.to_str().unwrap(),
            ],
        )
        .code(1)
        .stdout(predicate::str::contains("outside the allowed regions"));
    let report = workspace.report("dist");
    let failure = &report.candidates[0].failures[0];
    assert_eq!(failure.rule, Rule::Constraint);
    assert_eq!(failure.slice.as_deref(), Some("legal"));

    let allowlist = variant(&workspace, "allowlist.toml", |text| {
        text + "\n[constraints.sales]\nroutes = [\"mini\"]\n"
    });
    workspace
        .gate(&[allowlist], "dist2", &["--target", "0.9"])
        .code(1);
    assert!(rules_of(&workspace.report("dist2"), "allowlist.toml").contains(&Rule::Constraint));
}

#[test]
fn unevaluated_fallbacks_wrong_versions_and_thin_capacity_are_rejected() {
    let workspace = Workspace::new();
    let other_model = variant(&workspace, "other-model.toml", |text| {
        text.replacen(
            "name = \"large-backup\"\nprovider = \"azure\"\nmodel = \"gpt-4o-2024-08-06\"",
            "name = \"large-backup\"\nprovider = \"azure\"\nmodel = \"gpt-4o-2024-05-13\"",
            1,
        )
    });
    let pinned_elsewhere = variant(&workspace, "pinned-elsewhere.toml", |text| {
        text.replacen(
            "model = \"gpt-4o-mini-2024-07-18\"",
            "model = \"gpt-4o-mini-2024-09-01\"",
            1,
        )
    });
    let thin = variant(&workspace, "thin.toml", |text| {
        let backup = text.find("name = \"large-backup\"").unwrap();
        let (head, tail) = text.split_at(backup);
        format!("{head}{}", tail.replacen("rpm = 10000", "rpm = 500", 1))
    });
    workspace
        .gate(
            &[other_model, pinned_elsewhere, thin],
            "dist",
            &["--target", "0.9"],
        )
        .code(1);
    let report = workspace.report("dist");
    assert_eq!(
        rules_of(&report, "other-model.toml"),
        BTreeSet::from([Rule::Unevaluated])
    );
    assert_eq!(
        rules_of(&report, "pinned-elsewhere.toml"),
        BTreeSet::from([Rule::Unevaluated])
    );
    assert_eq!(
        rules_of(&report, "thin.toml"),
        BTreeSet::from([Rule::Capacity])
    );
}

#[test]
fn a_regression_against_the_deployed_config_is_rejected_and_versions_chain() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("always-large.toml")],
            "v1",
            &["--target", "0.9"],
        )
        .code(0);
    let deployed = workspace.report("v1").emitted.unwrap();
    let baseline = ["--baseline", deployed.config.as_str()];

    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "strict",
            &[&["--target", "0.9"][..], &baseline].concat(),
        )
        .code(1);
    assert!(rules_of(&workspace.report("strict"), "predictive.toml").contains(&Rule::Regression));

    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "v2",
            &[
                &["--target", "0.9", "--max-regression", "0.2"][..],
                &baseline,
            ]
            .concat(),
        )
        .code(0);
    let emitted = workspace.report("v2").emitted.unwrap();
    assert_eq!(emitted.version, 2);
    let config: RouteConfig =
        serde_json::from_slice(&std::fs::read(&emitted.config).unwrap()).unwrap();
    assert_eq!(
        config.parent_sha256.as_deref(),
        Some(deployed.sha256.as_str())
    );
    routeval()
        .arg("verify")
        .arg(&emitted.config)
        .args([
            "--pubkey",
            workspace.path("routeval.key.pub").to_str().unwrap(),
        ])
        .args(["--previous", deployed.config.as_str()])
        .args(["--at", "2026-11-30T00:00:00Z"])
        .assert()
        .code(0);
}

#[test]
fn bad_route_tables_are_input_errors() {
    let workspace = Workspace::new();
    let cases = [
        (
            variant(&workspace, "floating.toml", |text| {
                text.replacen("gpt-4o-mini-2024-07-18", "gpt-4o-mini-latest", 1)
            }),
            "model \"gpt-4o-mini-latest\" uses the floating alias \"latest\"; pin a version",
        ),
        (
            variant(&workspace, "unknown-key.toml", |text| {
                text.replacen("rpm = 30000", "rpm = 30000\nburst = 5", 1)
            }),
            "unknown field `burst`",
        ),
        (
            variant(&workspace, "missing-route.toml", |text| {
                text.replacen("to = [\"large-backup\"]", "to = [\"nowhere\"]", 1)
            }),
            "the fallback of \"large\" names route \"nowhere\", which is not defined",
        ),
    ];
    for (path, expected) in cases {
        let output = workspace
            .gate(std::slice::from_ref(&path), "dist", &["--target", "0.9"])
            .get_output()
            .clone();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {stderr}",
            path.display()
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(path.file_name().unwrap().to_str().unwrap()),
            "{stderr}"
        );
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            !workspace.path("dist").exists(),
            "nothing written for {}",
            path.display()
        );
    }
    let output = routeval()
        .args(["gate", "--target", "0.9", "--candidates"])
        .arg(example_routes("predictive.toml"))
        .arg("--results")
        .arg(example_results())
        .arg("--key")
        .arg(workspace.path("routeval.key"))
        .arg("--out")
        .arg(workspace.path("dist"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("pass --calibration"));
}

#[test]
fn report_keys_are_pinned() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &["--target", "0.85", "--confidence", "0.9"],
        )
        .code(0);
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.path("dist").join("gate-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json["schema_version"], 9);
    assert_eq!(
        keys(&json),
        BTreeSet::from([
            "schema_version",
            "routeval_version",
            "results",
            "target",
            "confidence",
            "max_regression",
            "max_cost_increase",
            "signed",
            "familywise",
            "baseline",
            "candidates",
            "chosen",
            "emitted"
        ])
    );
    let candidate = &json["candidates"][0];
    assert_eq!(
        keys(candidate),
        BTreeSet::from([
            "file",
            "sha256",
            "logical_model",
            "policy",
            "passed",
            "failures",
            "warnings",
            "overall",
            "slices",
            "scores"
        ])
    );
    // The example table names an external scorer: taken as given.
    assert_eq!(
        candidate["scores"],
        serde_json::json!({"column": "score", "scorer": "external"})
    );
    assert_eq!(
        keys(&candidate["overall"]),
        BTreeSet::from([
            "slice",
            "n",
            "quality",
            "quality_lower_bound",
            "mean_cost",
            "p50_ms",
            "p95_ms",
            "escalation_rate",
            "false_accept_rate"
        ])
    );
    assert_eq!(
        keys(&json["emitted"]),
        BTreeSet::from(["config", "signature", "litellm", "version", "sha256"])
    );
    assert!(candidate["overall"]["quality_lower_bound"].is_f64());
}

/// The example's rows, by header name.
fn example_rows() -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(example_results()).unwrap();
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let rows = lines
        .map(|line| line.split(',').map(str::to_owned).collect())
        .collect();
    (header, rows)
}

#[test]
fn cascade_and_static_metrics_match_a_recomputation() {
    let workspace = Workspace::new();
    let routes = std::fs::read_to_string(example_routes("predictive.toml")).unwrap();
    let routes = &routes[..routes.find("[policy.predictive]").unwrap()];
    let verifier = "[[routes]]\nname = \"judge\"\nprovider = \"openai\"\nmodel = \"gpt-4o-mini-2024-07-18\"\n\
                    region = \"eu-west-1\"\ntier = \"verifier\"\nprompt_variant = \"judge-v1\"\n\
                    price_input_per_mtok = 0.15\nprice_output_per_mtok = 0.6\nrpm = 30000\ntpm = 150000000\n";
    let cascade = workspace.write(
        "cascade.toml",
        &format!(
            "{routes}{verifier}\n[policy.cascade]\nsmall = \"mini\"\nverifier = \"judge\"\nlarge = \"large\"\n\
             [policy.cascade.thresholds]\n\"*\" = 0.5\nlegal = 0.3\n{}",
            crate::common::serving_for("[policy.cascade]")
        ),
    );
    let fixed = workspace.write(
        "static.toml",
        &format!(
            "{routes}\n[policy.static]\ndefault = \"mini\"\n[policy.static.slices]\nlegal = \"large\"\n{}",
            crate::common::serving_for("[policy.static]")
        ),
    );
    workspace
        .gate(&[cascade, fixed], "dist", &["--target", "0.5"])
        .code(0);
    let report = workspace.report("dist");

    let (header, rows) = example_rows();
    let column = |name: &str| header.iter().position(|field| field == name).unwrap();
    let number = |row: &[String], name: &str| row[column(name)].parse::<f64>().unwrap();
    let flag = |row: &[String], name: &str| row[column(name)] == "true";
    let n = rows.len() as f64;

    let (mut good, mut cost, mut escalated, mut false_accepts) = (0.0, 0.0, 0.0, 0.0);
    let mut latencies = Vec::new();
    for row in &rows {
        let threshold = if row[column("slice")] == "legal" {
            0.3
        } else {
            0.5
        };
        let escalate = number(row, "score") >= threshold;
        let verified = number(row, "small_ms") + number(row, "verifier_ms");
        cost += number(row, "cost_small") + number(row, "cost_verifier");
        if escalate {
            escalated += 1.0;
            good += f64::from(u8::from(flag(row, "large_ok")));
            cost += number(row, "cost_large");
            latencies.push(verified + number(row, "large_ttft_ms"));
        } else {
            good += f64::from(u8::from(flag(row, "small_ok")));
            false_accepts += f64::from(u8::from(!flag(row, "small_ok")));
            latencies.push(verified);
        }
    }
    latencies.sort_by(f64::total_cmp);
    let overall = &report.candidates[0].overall;
    assert!((overall.quality - good / n).abs() < 1e-12);
    assert!((overall.mean_cost - cost / n).abs() < 1e-12);
    assert!((overall.escalation_rate - escalated / n).abs() < 1e-12);
    assert!((overall.false_accept_rate.unwrap() - false_accepts / n).abs() < 1e-12);
    assert_eq!(
        overall.p50_ms,
        Some(latencies[(0.5 * n).ceil() as usize - 1])
    );

    let mut good = 0.0;
    for row in &rows {
        let tier = if row[column("slice")] == "legal" {
            "large_ok"
        } else {
            "small_ok"
        };
        good += f64::from(u8::from(flag(row, tier)));
    }
    let overall = &report.candidates[1].overall;
    assert!((overall.quality - good / n).abs() < 1e-12);
    assert_eq!(overall.false_accept_rate, None);
}

#[test]
fn each_policy_escalates_by_its_own_score_column() {
    let workspace = Workspace::new();
    let (both, moved) = two_scores(&workspace);
    let on_router = workspace.path("on-router.json");
    let on_score = workspace.path("on-score.json");
    calibrate_into(&both, "router_score", "predictive", &on_router);
    calibrate_into(&both, "score", "predictive", &on_score);
    let by_router = by_router(&workspace);
    let by_score = example_routes("predictive.toml");
    workspace
        .gate_on(
            &both,
            &[by_router.clone(), by_score.clone()],
            &[on_router.clone(), on_score.clone()],
            "both",
            &["--target", "0.9"],
        )
        .code(0);
    let report = workspace.report("both");

    // The same tables, one score column at a time, in `score`.
    let moved_calibration = workspace.path("moved.json");
    calibrate_into(&moved, "score", "predictive", &moved_calibration);
    workspace
        .gate_on(
            &moved,
            std::slice::from_ref(&by_score),
            &[moved_calibration],
            "moved",
            &["--target", "0.9"],
        )
        .code(0);
    workspace
        .gate_on(
            &example_results(),
            std::slice::from_ref(&by_score),
            &[workspace.path("calibration.json")],
            "plain",
            &["--target", "0.9"],
        )
        .code(0);
    let overall = |report: &GateReport, index: usize| report.candidates[index].overall.clone();
    assert_eq!(overall(&report, 0), overall(&workspace.report("moved"), 0));
    assert_eq!(overall(&report, 1), overall(&workspace.report("plain"), 0));
    assert_ne!(overall(&report, 0), overall(&report, 1));

    // The emitted config names the score its thresholds apply to.
    let emitted = report.emitted.unwrap().config;
    let config: RouteConfig = serde_json::from_slice(&std::fs::read(&emitted).unwrap()).unwrap();
    let chosen = report.chosen.unwrap();
    let expected = if chosen.ends_with("by-router.toml") {
        "router_score"
    } else {
        "score"
    };
    assert_eq!(config.table.policy.score(), Some(expected));
    assert_eq!(config.schema, "routeval.route-config/4");
    // A version-1 config, without the score column, reads as on `score`.
    let mut old: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&emitted).unwrap()).unwrap();
    old["table"]["policy"]["predictive"]
        .as_object_mut()
        .unwrap()
        .remove("score");
    let old: RouteConfig = serde_json::from_value(old).unwrap();
    assert_eq!(old.table.policy.score(), Some("score"));
}

#[test]
fn a_calibration_must_match_the_policy_and_its_score_column() {
    let workspace = Workspace::new();
    let (both, _) = two_scores(&workspace);
    let on_router = workspace.path("on-router.json");
    calibrate_into(&both, "router_score", "predictive", &on_router);
    let by_router = by_router(&workspace);
    // Calibrated on router_score, asked for score.
    workspace.gate_on(
        &both,
        &[example_routes("predictive.toml")],
        std::slice::from_ref(&on_router),
        "missing",
        &["--target", "0.9"],
    )
    .code(2)
    .stderr(predicate::str::contains(
        "predictive.toml: no calibration is for a predictive policy on the score column \"score\" (given: predictive on \"router_score\")",
    ));
    // Two calibrations of one policy and column: which one is meant?
    workspace.gate_on(
        &both,
        std::slice::from_ref(&by_router),
        &[on_router.clone(), on_router.clone()],
        "ambiguous",
        &["--target", "0.9"],
    )
    .code(2)
    .stderr(predicate::str::contains(
        "2 calibrations are for a predictive policy on the score column \"router_score\"; pass one",
    ));
    // A table whose score column the results do not have.
    workspace
        .gate_on(
            &example_results(),
            &[by_router],
            &[on_router],
            "absent",
            &["--target", "0.9"],
        )
        .code(2)
        .stderr(predicate::str::contains("router_score"));
    for out in ["missing", "ambiguous", "absent"] {
        assert!(!workspace.path(out).exists(), "{out} was written");
    }
}

#[test]
fn results_without_a_score_gate_tables_that_need_none_and_name_it_for_those_that_do() {
    let workspace = Workspace::new();
    // The example results as imported before any router has scored them.
    let unscored = workspace.path("unscored.parquet");
    let text = std::fs::read_to_string(example_results()).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let keep: Vec<usize> = (0..header.len())
        .filter(|&i| header[i] != "score")
        .collect();
    let pick = |line: &str| {
        let fields: Vec<&str> = line.split(',').collect();
        keep.iter()
            .map(|&i| fields[i])
            .collect::<Vec<_>>()
            .join(",")
    };
    let csv = workspace.path("unscored.csv");
    let body: Vec<String> = std::iter::once(pick(&header.join(",")))
        .chain(lines.map(pick))
        .collect();
    std::fs::write(&csv, body.join("\n") + "\n").unwrap();
    routeval()
        .args(["import", "generic", "--input"])
        .arg(&csv)
        .arg("--out")
        .arg(&unscored)
        .assert()
        .success();
    workspace
        .gate_on(
            &unscored,
            &[example_routes("always-large.toml")],
            &[workspace.path("calibration.json")],
            "single",
            &["--target", "0.9"],
        )
        .code(0);
    let report = workspace.report("single");
    assert_eq!(report.candidates.len(), 1);
    assert!(report.candidates[0].overall.n > 0);

    let refused = workspace
        .gate_on(
            &unscored,
            &[example_routes("predictive.toml")],
            &[workspace.path("calibration.json")],
            "predictive",
            &["--target", "0.9"],
        )
        .code(2);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("column \"score\""), "{stderr}");
    assert!(
        !workspace
            .path("predictive")
            .join("gate-report.json")
            .exists()
    );
}
