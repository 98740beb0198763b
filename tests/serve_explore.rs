//! Signed exploration: the gate prices `[serving.explore]` against each
//! tier measured alone (checked here against the same tables gated as
//! single routes), refuses more than its declared cost bound and any policy
//! with no tier to draw; and serve's records carry exactly the propensity
//! the signed config gives each request's tier, recomputed here from the
//! config, the slice and the recorded score.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{
    Pipeline, Served, ask_all, base_url, column, demo_predictive, gate_single, repo,
    served_records, signed_threshold, start_serve, start_sim, write_keys,
};

/// The demo's predictive table, its routes at `base_url`, with `explore`
/// (TOML lines) as its `[serving.explore]`.
fn exploring_table(base_url: &str, explore: &str) -> String {
    demo_predictive(None, base_url) + "\n[serving.explore]\n" + explore
}

/// Gates `table` (written as `NAME.toml`) with the pinned router: the exit
/// code, the report and the emitted config, if any.
fn gate(pipeline: &Pipeline, name: &str, table: &str) -> (i32, Value, Option<PathBuf>) {
    let path = pipeline.path(&format!("{name}.toml"));
    std::fs::write(&path, table).unwrap();
    let out = pipeline.path(name);
    let output = gate_single(pipeline, &path, &out, None, true)
        .output()
        .unwrap();
    let code = output.status.code().unwrap();
    assert!(code < 2, "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("gate-report.json")).unwrap()).unwrap();
    let config = out.join("route-config.v1.json");
    (code, report, config.exists().then_some(config))
}

/// The overall metrics the gate reports for a one-route table of `route`.
fn alone(pipeline: &Pipeline, route: &str) -> Value {
    let table = std::fs::read_to_string(repo().join("datasets/demo/routes/predictive.toml"))
        .unwrap()
        .replace(
            "[policy.predictive]\nsmall = \"small\"\nlarge = \"large\"\nscore = \"router_score\"                # `router train --into router_score`\nthresholds_from_calibration = true",
            &format!("[policy.single]\nroute = \"{route}\""),
        )
        .replace("unknown_slice = \"strongest\"", "unknown_slice = \"global\"");
    assert!(table.contains("[policy.single]"), "{table}");
    let (_, report, _) = gate(pipeline, &format!("explore-alone-{route}"), &table);
    report["candidates"][0]["overall"].clone()
}

fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

#[test]
fn the_gate_prices_exploration_by_each_tier_alone_and_signs_it() {
    let pipeline = Pipeline::shared();
    let (code, plain, _) = gate(
        pipeline,
        "explore-none",
        &exploring_table("http://127.0.0.1:8089/v1", "share = 0.0\n"),
    );
    assert_eq!(code, 0, "{plain}");
    let policy = plain["candidates"][0]["overall"].clone();
    let (code, report, config) = gate(
        pipeline,
        "explore-priced",
        &exploring_table(
            "http://127.0.0.1:8089/v1",
            "share = 0.2\nmax_added_cost = 10.0\n",
        ),
    );
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["schema_version"], 9);
    let prices = report["candidates"][0]["exploration"].as_array().unwrap();
    let overall = &prices[0];
    assert_eq!(overall["slice"], "*");
    assert_eq!(
        prices.len(),
        report["candidates"][0]["slices"].as_array().unwrap().len() + 1
    );
    // Each tier alone, measured as a one-route table; the predictive policy
    // also pays the router on every request.
    let (small, large) = (alone(pipeline, "small"), alone(pipeline, "large"));
    let costs = column(&pipeline.out.join("graded-scored.parquet"), "cost_router");
    let router = costs.iter().map(number).sum::<f64>() / costs.len() as f64;
    let uniform_cost = (number(&small["mean_cost"]) + number(&large["mean_cost"])) / 2.0 + router;
    let uniform_quality = (number(&small["quality"]) + number(&large["quality"])) / 2.0;
    let expected_cost = 0.8 * number(&policy["mean_cost"]) + 0.2 * uniform_cost;
    let expected_quality = 0.8 * number(&policy["quality"]) + 0.2 * uniform_quality;
    eprintln!("policy {policy}\nsmall {small}\nlarge {large}\npriced {overall}");
    assert!(
        (number(&overall["mean_cost_exploring"]) - expected_cost).abs() < 1e-9,
        "{overall}: expected cost {expected_cost}"
    );
    assert!(
        (number(&overall["quality_exploring"]) - expected_quality).abs() < 1e-9,
        "{overall}: expected quality {expected_quality}"
    );
    assert!(
        (number(&overall["added_cost_share"])
            - (expected_cost / number(&policy["mean_cost"]) - 1.0))
            .abs()
            < 1e-9
    );
    let signed: Value = serde_json::from_slice(&std::fs::read(config.unwrap()).unwrap()).unwrap();
    assert_eq!(signed["schema"], "routeval.route-config/5");
    assert_eq!(signed["serving"]["explore"]["share"], 0.2);
    assert_eq!(&signed["provenance"]["exploration"][0], overall);
    let markdown = std::fs::read_to_string(pipeline.path("explore-priced/gate-report.md")).unwrap();
    assert!(markdown.contains("**Exploration of"), "{markdown}");

    // Above its bound, the candidate fails and nothing is signed.
    let bound = number(&overall["added_cost_share"]) / 2.0;
    let (code, refused, config) = gate(
        pipeline,
        "explore-over-bound",
        &exploring_table(
            "http://127.0.0.1:8089/v1",
            &format!("share = 0.2\nmax_added_cost = {bound}\n"),
        ),
    );
    assert_eq!(code, 1);
    assert!(config.is_none());
    let failures = refused["candidates"][0]["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["rule"], "exploration");
    assert!(
        failures[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("max_added_cost = {bound}")),
        "{failures:?}"
    );
}

#[test]
fn the_gate_refuses_exploration_a_policy_cannot_draw_or_a_share_out_of_range() {
    let pipeline = Pipeline::shared();
    let single = std::fs::read_to_string(repo().join("datasets/demo/routes/large-only.toml"))
        .unwrap()
        + "\n[serving.explore]\nshare = 0.1\n";
    let (code, report, config) = gate(pipeline, "explore-single", &single);
    assert_eq!((code, config), (1, None));
    let failure = &report["candidates"][0]["failures"][0];
    assert_eq!(failure["rule"], "serving");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("a single policy has none to draw"),
        "{failure}"
    );
    let (code, report, _) = gate(
        pipeline,
        "explore-whole",
        &exploring_table("http://127.0.0.1:8089/v1", "share = 1.0\n"),
    );
    assert_eq!(code, 1);
    assert!(
        report["candidates"][0]["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("share = 1: a share is at least 0 and below 1"),
        "{report}"
    );
}

#[test]
fn a_share_for_a_slice_the_results_do_not_have_is_refused_naming_it() {
    let pipeline = Pipeline::shared();
    let table = pipeline.path("explore-typo.toml");
    std::fs::write(
        &table,
        exploring_table(
            "http://127.0.0.1:8089/v1",
            "share = 0.1\nslices = { bilingg = 0.3 }\n",
        ),
    )
    .unwrap();
    let output = pipeline
        .gate_pinned(&[&table], "0.8", &pipeline.path("explore-typo"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "[serving.explore.slices] names slice \"bilingg\", which the results do not have"
        ),
        "{stderr}"
    );
    assert!(
        !pipeline
            .path("explore-typo")
            .join("gate-report.json")
            .exists()
    );
}

/// serve-sim answering the demo's prompts, with no wait for a first token.
fn demo_sim() -> routeval::upstream_sim::RunningSim {
    start_sim(
        &repo().join("datasets/demo/prompts.jsonl"),
        routeval::upstream_sim::SimSettings {
            ttft_ms: 0,
            ..routeval::upstream_sim::SimSettings::default()
        },
    )
}

/// serve of `config` with the demo's router and key, trusting the slice
/// header, its records under `directory`: it, and where its records go.
fn serve_in(pipeline: &Pipeline, config: &Path, directory: &Path) -> (Served, PathBuf) {
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    let records = directory.join("records");
    let served = start_serve(
        config,
        &pipeline.out.join("keys/demo.key.pub"),
        &pipeline.out.join("router.bin"),
        &keys,
        &records,
        &["--trust-slice-header"],
    );
    (served, records)
}

#[test]
fn serve_records_each_request_with_the_propensity_its_signed_config_gives() {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let sim = demo_sim();
    let share_of_billing = 0.5;
    let (code, report, config) = gate(
        pipeline,
        "explore-served",
        &exploring_table(
            &base_url(&sim),
            &format!("share = 0.25\nslices = {{ \"billing\" = {share_of_billing} }}\n"),
        ),
    );
    assert_eq!(code, 0, "{report}");
    let config = config.unwrap();
    let signed: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let (served, records) = serve_in(pipeline, &config, directory.path());
    let prompts = crate::common::demo_prompts();
    let routes = ask_all(&served, &prompts);
    let metrics = String::from_utf8(
        std::process::Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .arg(served.url("/metrics"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    served.stop();
    drop(sim);
    let rows = served_records(
        &records,
        &[
            "id",
            "slice",
            "route",
            "score",
            "propensity",
            "draw",
            "reason",
        ],
    );
    assert_eq!(rows.len(), prompts.len());
    let mut explored: BTreeMap<bool, (u64, u64)> = BTreeMap::new();
    let mut explored_tiers = BTreeMap::new();
    for row in &rows {
        let id = row["id"].as_str().unwrap();
        let slice = row["slice"].as_str().unwrap();
        let route = row["route"].as_str().unwrap();
        assert_eq!(routes[id], route, "{row}");
        let share = if slice == "billing" {
            share_of_billing
        } else {
            0.25
        };
        let policy_route = if number(&row["score"]) >= signed_threshold(&signed, slice) {
            "large"
        } else {
            "small"
        };
        let expected = if route == policy_route {
            1.0 - share + share / 2.0
        } else {
            share / 2.0
        };
        let propensity = number(&row["propensity"]);
        assert!(
            (propensity - expected).abs() < 1e-12,
            "{row}: the config gives {route} probability {expected}"
        );
        let draw = row["draw"].as_str().unwrap();
        match draw {
            "policy" => assert_eq!(route, policy_route, "{row}"),
            "explore" => *explored_tiers.entry(route.to_owned()).or_insert(0) += 1,
            other => panic!("draw {other:?}: {row}"),
        }
        let entry = explored.entry(slice == "billing").or_default();
        entry.0 += u64::from(draw == "explore");
        entry.1 += 1;
    }
    eprintln!("explored (billing?, explored, requests): {explored:?}; tiers {explored_tiers:?}");
    // Each slice group explores at its share: Binomial(n, share) within
    // five standard deviations.
    for (billing, (draws, requests)) in &explored {
        let share = if *billing { share_of_billing } else { 0.25 };
        let mean = share * *requests as f64;
        let deviation = (mean * (1.0 - share)).sqrt();
        assert!(
            (*draws as f64 - mean).abs() <= 5.0 * deviation,
            "billing {billing}: {draws} of {requests} explored at share {share}"
        );
    }
    assert_eq!(explored_tiers.len(), 2, "{explored_tiers:?}");
    // /metrics counts the same exploration draws, by the route drawn.
    for (route, draws) in &explored_tiers {
        let line = format!("routeval_exploration_requests_total{{route=\"{route}\"}} {draws}");
        assert!(
            metrics.lines().any(|found| found == line),
            "{line} in\n{metrics}"
        );
    }
}

/// Each demo prompt's truth, from the demo's graded results: whether the
/// small and the large tier answer it well.
fn demo_truth(pipeline: &Pipeline) -> BTreeMap<String, (bool, bool)> {
    let graded = pipeline.out.join("graded.parquet");
    let ids = column(&graded, "id");
    let small = column(&graded, "small_ok");
    let large = column(&graded, "large_ok");
    ids.iter()
        .zip(small.iter().zip(&large))
        .map(|(id, (small, large))| {
            (
                id.as_str().unwrap().to_owned(),
                (small.as_bool().unwrap(), large.as_bool().unwrap()),
            )
        })
        .collect()
}

#[test]
fn the_loop_runs_on_the_demo_serve_explores_sample_labels_replay_estimates_and_the_gate_checks() {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let sim = demo_sim();
    let (code, report, config) = gate(
        pipeline,
        "explore-loop",
        &exploring_table(
            &base_url(&sim),
            "share = 0.5\n[serving.explore.labels]\nshare = 0.5\nseed = 4\n",
        ),
    );
    assert_eq!(code, 0, "{report}");
    let config = config.unwrap();
    let (served, records) = serve_in(pipeline, &config, directory.path());
    // Each demo prompt asked four times, each time a request of its own.
    let asked: Vec<(String, String, String)> = (0..4)
        .flat_map(|round| {
            crate::common::demo_prompts()
                .into_iter()
                .map(move |(id, slice, prompt)| (format!("{id}.{round}"), slice, prompt))
        })
        .collect();
    ask_all(&served, &asked);
    served.stop();
    drop(sim);

    // The label set, labelled with the demo's known truth of each answer.
    let labels = directory.path().join("labels.jsonl");
    // The draw the signed config committed before any record existed.
    crate::common::routeval()
        .args(["sample", "--records"])
        .arg(&records)
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&labels)
        .assert()
        .success();
    let truth = demo_truth(pipeline);
    let answer_ok = |record_id: &str, route: &str| {
        let prompt = record_id.rsplit_once(".").unwrap().0;
        let (small, large) = truth[prompt];
        if route == "large" { large } else { small }
    };
    let filled: String = std::fs::read_to_string(&labels)
        .unwrap()
        .lines()
        .map(|line| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            let ok = answer_ok(
                row["record_id"].as_str().unwrap(),
                row["route"].as_str().unwrap(),
            );
            row["ok"] = json!(ok);
            row.to_string() + "\n"
        })
        .collect();
    assert!(filled.lines().count() > 400, "{}", filled.lines().count());
    std::fs::write(&labels, filled).unwrap();

    // A candidate with one threshold for every slice, estimated on the
    // served traffic; its truth on these very requests is known.
    let candidate = pipeline.path("explore-loop-candidate.toml");
    let threshold = 0.4;
    std::fs::write(
        &candidate,
        demo_predictive(Some(threshold), &base_url_of(&config)),
    )
    .unwrap();
    let estimate = directory.path().join("estimate.json");
    let inputs = Estimated {
        records: &records,
        config: &config,
        candidate: &candidate,
        labels: &labels,
    };
    let output = inputs.estimate(pipeline, "betting-sequence", &estimate);
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("quality IPS"), "{table}");
    let document: Value = serde_json::from_slice(&std::fs::read(&estimate).unwrap()).unwrap();
    assert_eq!(document["overall"]["requests"], asked.len());
    let rows = served_records(&records, &["id", "score"]);
    let truly: f64 = rows
        .iter()
        .map(|row| {
            let route = if number(&row["score"]) >= threshold {
                "large"
            } else {
                "small"
            };
            f64::from(u8::from(answer_ok(row["id"].as_str().unwrap(), route)))
        })
        .sum::<f64>()
        / rows.len() as f64;
    let dr = &document["overall"]["quality"]["dr"];
    eprintln!("the candidate's quality on the served requests {truly:.4}; estimated {dr}");
    assert!(
        number(&dr["lower"]) <= truly && truly <= number(&dr["upper"]),
        "{truly} outside {dr}"
    );

    // The reviewer's report carries it.
    let report = directory.path().join("report");
    crate::common::routeval()
        .args(["report", "--records"])
        .arg(&estimate)
        .arg("--out")
        .arg(&report)
        .assert()
        .success();
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(html.contains("On production traffic: <code>"), "{html}");
    let summary = std::fs::read_to_string(report.join("summary.md")).unwrap();
    let dr_cell = format!(
        "{:.3} [{:.3}, {:.3}]",
        number(&dr["estimate"]),
        number(&dr["lower"]),
        number(&dr["upper"])
    );
    assert!(
        summary.contains("**On production traffic**")
            && summary.contains(&dr_cell)
            && summary.contains("a betting confidence sequence: holds at every look"),
        "{dr_cell} in {summary}"
    );

    // The gate with that production evidence beside its offline checks.
    // The sequence, valid however often the gate is re-run, shows the
    // candidate (truly no worse than the running config) not worse by 0.7
    // on about a hundred labels a slice: it passes, signed.
    let (code, gated) = gate_production(pipeline, &candidate, &config, &estimate, "seq");
    assert_eq!(code, 0, "{gated}");
    let production = &gated["candidates"][0]["production"];
    assert_eq!(production["bound"], "betting_sequence");
    assert!(
        gated["markdown"]
            .as_str()
            .unwrap()
            .contains("the intervals hold at every look"),
        "{gated}"
    );
    assert_eq!(
        production["overall"]["quality"],
        document["overall"]["quality"]["dr"]
    );
    assert!(gated["emitted"]["config"].is_string(), "{gated}");

    // The one-look interval on the same labels pays the design's range
    // (weights up to 1 / (0.25 × 0.5)): its difference intervals hold
    // −0.7, so every production verdict is undecided, never passed, each
    // saying how many more labels would decide it.
    let one_look = directory.path().join("estimate-one-look.json");
    inputs.estimate(pipeline, "empirical-bernstein", &one_look);
    let (code, gated) = gate_production(pipeline, &candidate, &config, &one_look, "one-look");
    assert_eq!(code, 1, "{gated}");
    assert_eq!(
        gated["candidates"][0]["production"]["bound"],
        "empirical_bernstein"
    );
    assert!(
        gated["markdown"]
            .as_str()
            .unwrap()
            .contains("the intervals hold for one look"),
        "{gated}"
    );
    let failures = gated["candidates"][0]["failures"].as_array().unwrap();
    let production: Vec<&Value> = failures
        .iter()
        .filter(|failure| failure["rule"].as_str().unwrap().starts_with("production"))
        .collect();
    assert!(!production.is_empty(), "{gated}");
    for failure in production {
        assert_eq!(failure["rule"], "production_undecided", "{failure}");
        let message = failure["message"].as_str().unwrap();
        assert!(
            message.starts_with("undecided after ") && message.contains("holds for one look"),
            "{message}"
        );
    }
}

/// What `replay candidate` reads in the loop.
struct Estimated<'a> {
    records: &'a Path,
    config: &'a Path,
    candidate: &'a Path,
    labels: &'a Path,
}

impl Estimated<'_> {
    fn estimate(&self, pipeline: &Pipeline, bound: &str, out: &Path) -> std::process::Output {
        crate::common::routeval()
            .args([
                "replay",
                "candidate",
                "--confidence",
                "0.95",
                "--bound",
                bound,
            ])
            .arg("--records")
            .arg(self.records)
            .arg("--config")
            .arg(self.config)
            .arg("--candidate")
            .arg(self.candidate)
            .arg("--results")
            .arg(pipeline.out.join("graded-scored.parquet"))
            .arg("--labels")
            .arg(self.labels)
            .arg("--out")
            .arg(out)
            .assert()
            .success()
            .get_output()
            .clone()
    }
}

/// The gate of `candidate` at target 0.1 and a margin of 0.7 against the
/// running `config`, with `estimate` as its production evidence: its exit
/// code and report.
fn gate_production(
    pipeline: &Pipeline,
    candidate: &Path,
    config: &Path,
    estimate: &Path,
    tag: &str,
) -> (i32, Value) {
    let out = pipeline.path(&format!("explore-loop-gate-{tag}"));
    let status = pipeline
        .gate_pinned(&[candidate], "0.1", &out)
        .args(["--allow-unknown-slices", "--max-regression", "0.7"])
        .arg("--baseline")
        .arg(config)
        .arg("--production")
        .arg(estimate)
        .output()
        .unwrap()
        .status;
    let mut report: Value =
        serde_json::from_slice(&std::fs::read(out.join("gate-report.json")).unwrap()).unwrap();
    report["markdown"] =
        Value::String(std::fs::read_to_string(out.join("gate-report.md")).unwrap());
    (status.code().unwrap(), report)
}

/// The base URL the signed config's routes call.
fn base_url_of(config: &PathBuf) -> String {
    let signed: Value = serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap();
    signed["table"]["routes"][0]["base_url"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn over_three_tiers_serve_records_the_propensity_its_signed_config_gives() {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let sim = demo_sim();
    let table = pipeline.path("explore-three.toml");
    std::fs::write(
        &table,
        std::fs::read_to_string(repo().join("datasets/demo/routes/predictive-three-tier.toml"))
            .unwrap()
            .replace("http://127.0.0.1:8089/v1", &base_url(&sim))
            + "\n[serving.explore]\nshare = 0.4\n",
    )
    .unwrap();
    let out = pipeline.path("explore-three");
    pipeline
        .gate_calibrated(&[&table], "0.1", &out, "predictive-three-tier")
        .assert()
        .success();
    let config = out.join("route-config.v1.json");
    let signed: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(signed["schema"], "routeval.route-config/5");
    let (served, records) = serve_in(pipeline, &config, directory.path());
    ask_all(&served, &crate::common::demo_prompts());
    served.stop();
    drop(sim);
    let tiers = ["small", "mid", "large"];
    let mut explored_to = BTreeMap::new();
    for row in served_records(&records, &["slice", "route", "score", "propensity", "draw"]) {
        let slice = row["slice"].as_str().unwrap();
        let thresholds = &signed["table"]["policy"]["predictive_tiers"]["thresholds"];
        let cuts = thresholds["slices"]
            .get(slice)
            .unwrap_or(&thresholds["default"]);
        let score = number(&row["score"]);
        let policy = cuts
            .as_array()
            .unwrap()
            .iter()
            .filter(|cut| cut.as_f64().is_some_and(|cut| score >= cut))
            .count();
        let route = row["route"].as_str().unwrap();
        let tier = tiers.iter().position(|name| *name == route).unwrap();
        let expected = if tier == policy {
            1.0 - 0.4 + 0.4 / 3.0
        } else {
            0.4 / 3.0
        };
        assert!(
            (number(&row["propensity"]) - expected).abs() < 1e-12,
            "{row}: policy tier {policy}, the config gives {route} probability {expected}"
        );
        if row["draw"] == "explore" {
            *explored_to.entry(route.to_owned()).or_insert(0u64) += 1;
        } else {
            assert_eq!(tier, policy, "{row}");
        }
    }
    assert_eq!(explored_to.len(), 3, "every tier drawn: {explored_to:?}");
}
