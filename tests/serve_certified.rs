//! What is certified is what is served: a config gated on the calibration
//! part `router train` writes, served by `routeval serve` to new prompts of
//! the same population (the demo's generator under other seeds), escalates
//! each slice at a rate inside the interval its signed rate gives at the
//! gate's confidence, counted over many slices, and `drift --records` on
//! serve's records of that unchanged traffic finds nothing; and the gate
//! refuses a score column the pinned router did not produce on prompts it
//! never saw.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{
    Pipeline, ask_all, base_url, column, repo, routeval, start_serve, start_sim, write_keys,
};

/// The demo's generator: `scale` times the demo's 300 prompts, drawn with
/// `seed`, into `out`.
fn generate(seed: u64, scale: u64, out: &Path) {
    let status = Command::new("python3")
        .arg(repo().join("datasets/demo/generate.py"))
        .args(["--seed", &seed.to_string(), "--scale", &scale.to_string()])
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs the demo's generator");
    assert!(status.success());
}

/// A demo data directory whose prompts are drawn with `seed`, without the
/// demo's faults (they only slow the run; the rows are the same).
fn data_directory(directory: &Path, seed: u64) -> PathBuf {
    let data = directory.join(format!("data-{seed}"));
    std::fs::create_dir_all(data.join("routes")).unwrap();
    let demo = repo().join("datasets/demo");
    std::fs::copy(demo.join("routeval.toml"), data.join("routeval.toml")).unwrap();
    std::fs::write(data.join("faults.toml"), "").unwrap();
    for entry in std::fs::read_dir(demo.join("routes")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), data.join("routes").join(entry.file_name())).unwrap();
    }
    generate(seed, 2, &data.join("prompts.jsonl"));
    data
}

/// The demo pipeline on `data`, then the two-tier predictive table (its
/// routes at `base_url`) gated alone on its calibration part: the signed
/// config.
fn signed_predictive(
    directory: &Path,
    data: &Path,
    name: &str,
    base_url: &str,
) -> (PathBuf, PathBuf) {
    let out = directory.join(name);
    routeval()
        .args(["demo", "--data"])
        .arg(data)
        .arg("--rubrics")
        .arg(repo().join("rubrics"))
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let gate = out.join("gate-predictive");
    let table = out.join("predictive.toml");
    let text = std::fs::read_to_string(data.join("routes/predictive.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8089/v1", base_url);
    std::fs::write(&table, text).unwrap();
    routeval()
        .args(["gate", "--candidates"])
        .arg(&table)
        .arg("--results")
        .arg(out.join("graded-scored.parquet"))
        .arg("--calibration")
        .arg(out.join("calibration-predictive.json"))
        .args(["--target", "0.8", "--router"])
        .arg(out.join("router.bin"))
        .arg("--rubrics")
        .arg(repo().join("rubrics"))
        .arg("--key")
        .arg(out.join("keys/demo.key"))
        .arg("--out")
        .arg(&gate)
        .assert()
        .success();
    (gate.join("route-config.v1.json"), out)
}

/// Each slice's (escalated, requests) as serve serves `prompts`, its
/// records written under `records`.
fn served_escalations(
    config: &Path,
    out: &Path,
    keys: &Path,
    records: &Path,
    prompts: &[Value],
) -> BTreeMap<String, (u64, u64)> {
    let served = start_serve(
        config,
        &out.join("keys/demo.key.pub"),
        &out.join("router.bin"),
        keys,
        records,
        &["--trust-slice-header"],
    );
    // Each request under an id of its own: the prompt's place in the list.
    let requests: Vec<(String, String, String)> = prompts
        .iter()
        .enumerate()
        .map(|(index, prompt)| {
            (
                format!("new-{index}"),
                prompt["slice"].as_str().unwrap().to_owned(),
                prompt["prompt"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let answered = ask_all(&served, &requests);
    let routes = requests
        .iter()
        .map(|(id, slice, _)| (slice.clone(), answered[id].clone()));
    served.stop();
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (slice, route) in routes {
        let entry = counts.entry(slice).or_default();
        entry.0 += u64::from(route != "small");
        entry.1 += 1;
    }
    counts
}

#[test]
fn new_prompts_escalate_within_the_signed_intervals_over_many_slices() {
    let directory = tempfile::tempdir().unwrap();
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    let mut checks = Vec::new();
    let mut verdicts = Vec::new();
    for seed in [11, 23, 37, 53, 71] {
        let data = data_directory(directory.path(), seed);
        // New traffic: prompts of the same population under another seed,
        // answered by a serve-sim that knows them.
        let new = directory.path().join(format!("new-{seed}.jsonl"));
        generate(1_000 + seed, 4, &new);
        let prompts: Vec<Value> = std::fs::read_to_string(&new)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let sim = start_sim(
            &new,
            routeval::upstream_sim::SimSettings {
                ttft_ms: 0,
                ..routeval::upstream_sim::SimSettings::default()
            },
        );
        let (config, out) = signed_predictive(
            directory.path(),
            &data,
            &format!("calibration-{seed}"),
            &base_url(&sim),
        );
        let signed: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
        let confidence = signed["provenance"]["confidence"].as_f64().unwrap_or(0.95);
        let records = out.join("records");
        let served = served_escalations(&config, &out, &keys, &records, &prompts);
        drop(sim);
        // Unchanged traffic: drift on serve's own records.
        let drift = routeval()
            .args(["drift", "--json", "--records"])
            .arg(&records)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let document: Value = serde_json::from_slice(&drift.stdout)
            .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&drift.stderr)));
        verdicts.push((seed, document["verdict"].as_str().unwrap().to_owned()));
        for metrics in signed["provenance"]["metrics"].as_array().unwrap() {
            let slice = metrics["slice"].as_str().unwrap();
            if slice == "*" {
                continue;
            }
            let n = metrics["n"].as_u64().unwrap();
            let escalated = (metrics["escalation_rate"].as_f64().unwrap() * n as f64).round();
            let interval =
                routeval::stats::clopper_pearson_interval(escalated as u64, n, 1.0 - confidence);
            let (new_escalated, requests) = served[slice];
            let rate = new_escalated as f64 / requests as f64;
            checks.push((seed, slice.to_owned(), escalated / n as f64, interval, rate));
        }
    }
    let misses: Vec<_> = checks
        .iter()
        .filter(|(_, _, _, [low, high], rate)| rate < low || rate > high)
        .collect();
    for (seed, slice, signed, [low, high], rate) in &checks {
        eprintln!(
            "calibration seed {seed} {slice}: signed {signed:.3} [{low:.3}, {high:.3}], served {rate:.3}"
        );
    }
    eprintln!("{} of {} slices outside", misses.len(), checks.len());
    eprintln!("drift --records on each config's served records: {verdicts:?}");
    // Unchanged traffic raises an alarm in at most δ = 5% of runs; two of
    // five would have probability about 2%.
    let alarmed = verdicts
        .iter()
        .filter(|(_, verdict)| verdict != "ok")
        .count();
    assert!(alarmed <= 1, "{verdicts:?}");
    // Not every slice escalates always or never: the intervals say
    // something.
    assert!(
        checks
            .iter()
            .filter(|(_, _, signed, _, _)| *signed > 0.0 && *signed < 1.0)
            .count()
            >= checks.len() / 2,
        "{checks:?}"
    );
    // Each interval misses with probability at most 1 − C, so the misses
    // are at most Binomial(S, 1 − C); more than its 0.999 quantile means
    // the signed rates are not about the scorer serve runs.
    let slices = checks.len() as u64;
    let allowed = (0..=slices)
        .find(|&misses| routeval::stats::binomial_cdf(slices, 0.05, misses) >= 0.999)
        .unwrap();
    assert!(
        misses.len() as u64 <= allowed,
        "{} of {slices} slices escalate outside their signed interval (at most {allowed}): {misses:?}",
        misses.len()
    );
}

/// The gate of the demo's two-tier predictive table on `results` with
/// `router`: its exit code, stderr, and whether it wrote anything.
fn gate_predictive(
    pipeline: &Pipeline,
    results: &Path,
    router: &Path,
    name: &str,
) -> (i32, String, bool) {
    let out = pipeline.path(name);
    let output = routeval()
        .args(["gate", "--candidates"])
        .arg(repo().join("datasets/demo/routes/predictive.toml"))
        .arg("--results")
        .arg(results)
        .arg("--calibration")
        .arg(pipeline.out.join("calibration-predictive.json"))
        .args(["--target", "0.8", "--router"])
        .arg(router)
        .arg("--rubrics")
        .arg(repo().join("rubrics"))
        .arg("--key")
        .arg(pipeline.out.join("keys/demo.key"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stderr).unwrap(),
        out.exists(),
    )
}

/// `results` scored by `router` into `router_score`, written to `out`.
fn router_score(router: &Path, results: &Path, out: &Path) -> PathBuf {
    routeval()
        .args(["router", "score", "--router"])
        .arg(router)
        .arg("--results")
        .arg(results)
        .arg("--out")
        .arg(out)
        .args(["--into", "router_score"])
        .assert()
        .success();
    out.to_owned()
}

#[test]
fn the_gate_refuses_scores_that_are_not_the_deployed_routers_on_unseen_prompts() {
    let pipeline = Pipeline::shared();
    let router = pipeline.out.join("router.bin");
    let graded = pipeline.out.join("graded.parquet");
    let scored = pipeline.out.join("graded-scored.parquet");
    // The calibration part holds the prompts the model was not fitted on,
    // each scored as `router score` (and serve) score it.
    let ids = column(&scored, "id");
    let all_ids = column(&graded, "id");
    assert!(
        ids.len() * 3 > all_ids.len() && ids.len() * 3 < all_ids.len() * 2,
        "{} of {}",
        ids.len(),
        all_ids.len()
    );
    let rescored = router_score(&router, &scored, &pipeline.path("rescored.parquet"));
    assert_eq!(
        column(&rescored, "router_score"),
        column(&scored, "router_score")
    );
    let (code, _, wrote) = gate_predictive(pipeline, &scored, &router, "gate-calibration-part");
    assert_eq!(code, 0);
    assert!(wrote);
    // The report says what the certificate is about.
    let report_path = pipeline.path("gate-calibration-part/gate-report.json");
    let report: routeval::schema::GateReport =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let scores = report.candidates[0].scores.clone().unwrap();
    assert_eq!(scores.scorer, routeval::schema::ScoresFrom::DeployedRouter);
    assert_eq!(scores.column, "router_score");
    assert_eq!(
        scores.router_sha256.as_deref(),
        Some(routeval::digest::sha256_file(&router).unwrap().as_str())
    );
    let training_prompts = all_ids.len() - ids.len();
    assert_eq!(scores.router_trained_on, Some(training_prompts as u64));
    let markdown =
        std::fs::read_to_string(pipeline.path("gate-calibration-part/gate-report.md")).unwrap();
    assert!(
        markdown.contains(&format!(
            "the pinned router's own (sha256 `{}`), checked on every row: none of the {} rows' prompts is among the {training_prompts} it was fitted on",
            scores.router_sha256.unwrap(),
            ids.len()
        )),
        "{markdown}"
    );

    // Every graded row scored by the deployed model: half of them are its
    // own training prompts.
    let everything = router_score(
        &router,
        &graded,
        &pipeline.path("everything-scored.parquet"),
    );
    let (code, stderr, wrote) = gate_predictive(pipeline, &everything, &router, "gate-everything");
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("everything-scored.parquet: row ")
            && stderr.contains("is one --router")
            && stderr.contains("was fitted on"),
        "{stderr}"
    );
    assert!(!wrote);

    // Another scorer's column on the same unseen prompts: the scores moved
    // by one part in a thousand on one row, as a cross-fitted or retrained
    // model's would move.
    let scores = pipeline.path("moved.csv");
    let values = column(&scored, "router_score");
    let mut text = String::from("id,moved\n");
    for (index, (id, score)) in ids.iter().zip(&values).enumerate() {
        let score = score.as_f64().unwrap();
        let moved = if index == 7 { score + 0.001 } else { score };
        text.push_str(&format!("{},{moved}\n", id.as_str().unwrap()));
    }
    std::fs::write(&scores, text).unwrap();
    let moved = pipeline.path("moved.parquet");
    routeval()
        .args(["router", "join", "--results"])
        .arg(&scored)
        .arg("--scores")
        .arg(&scores)
        .args(["--scores-col", "moved", "--into", "router_score", "--out"])
        .arg(&moved)
        .assert()
        .success();
    let (code, stderr, wrote) = gate_predictive(pipeline, &moved, &router, "gate-moved");
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let eighth = ids[7].as_str().unwrap();
    assert!(
        stderr.contains("moved.parquet: row 8 (id ")
            && stderr.contains(eighth)
            && stderr.contains("column \"router_score\"")
            && stderr.contains("is not --router"),
        "{stderr}"
    );
    assert!(!wrote);

    // A router file of the format before the training set: its weights,
    // no record of what it saw.
    let bytes = std::fs::read(&router).unwrap();
    let weights = 12 + 2 * 4 * (1 + (1 << 20));
    let mut old = b"RVROUTE2".to_vec();
    old.extend_from_slice(&bytes[8..weights]);
    let old_router = pipeline.path("old-router.bin");
    std::fs::write(&old_router, old).unwrap();
    let (code, stderr, wrote) = gate_predictive(pipeline, &scored, &old_router, "gate-old-router");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("old-router.bin: a router file from before routeval kept the prompts"),
        "{stderr}"
    );
    assert!(!wrote);
}
