//! `replay candidate`'s exact-truth production traffic: records of a signed
//! exploring config written by a simulation whose answers are right with
//! known probabilities (small: 1 − score, large: 0.9, scores uniform), the
//! label sets `sample --label-share` draws of them, and the candidate
//! tables estimated on them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Pipeline, Random, demo_predictive, routeval};

pub const SLICES: [&str; 3] = ["billing", "orders", "triage"];
pub const RUNNING_THRESHOLD: f64 = 0.5;
pub const CANDIDATE_THRESHOLD: f64 = 0.3;

/// The true quality of a threshold `t` on the coverage test's traffic:
/// ∫₀^t (1 − x) dx + (1 − t) · 0.9.
pub fn quality_at(t: f64) -> f64 {
    t - t * t / 2.0 + (1.0 - t) * 0.9
}

pub fn candidate_truth() -> f64 {
    quality_at(CANDIDATE_THRESHOLD)
}

pub fn running_truth() -> f64 {
    quality_at(RUNNING_THRESHOLD)
}

/// How often a route answers well at `score`; `harder` scales the small
/// tier's rate (1 on the traffic of the coverage test).
pub fn answers_well(route: &str, score: f64, harder: f64) -> f64 {
    if route == "large" {
        0.9
    } else {
        harder * (1.0 - score)
    }
}

/// The demo's predictive table with one threshold for every slice, and
/// `explore` appended.
pub fn table(threshold: f64, explore: &str) -> String {
    demo_predictive(Some(threshold), "http://127.0.0.1:8089/v1") + explore
}

/// The running config, exploring at `share`, signed: its path and sha256.
pub fn signed_running(pipeline: &Pipeline, tag: &str, share: f64) -> (PathBuf, String) {
    signed_running_with(pipeline, tag, share, None)
}

/// [`signed_running`] committing the label draw `(share, seed)`
/// (`[serving.explore.labels]`).
pub fn signed_running_with(
    pipeline: &Pipeline,
    tag: &str,
    share: f64,
    labels: Option<(f64, u64)>,
) -> (PathBuf, String) {
    let name = format!("candidate-running-{tag}-{share}");
    let path = pipeline.path(&format!("{name}.toml"));
    let mut explore = if share > 0.0 {
        format!("\n[serving.explore]\nshare = {share}\n")
    } else {
        String::new()
    };
    if let Some((label_share, seed)) = labels {
        explore.push_str(&format!(
            "\n[serving.explore.labels]\nshare = {label_share}\nseed = {seed}\n"
        ));
    }
    std::fs::write(&path, table(RUNNING_THRESHOLD, &explore)).unwrap();
    let out = pipeline.path(&name);
    pipeline
        .gate_pinned(&[&path], "0.1", &out)
        .assert()
        .success();
    let config = out.join("route-config.v1.json");
    let sha256 = routeval::digest::sha256_hex(&std::fs::read(&config).unwrap());
    (config, sha256)
}

/// `n` requests of the running config (threshold 0.5, exploring at
/// `share`) as serve records them, into `path`; each record's truth: whether
/// its answer was acceptable.
pub fn simulate(
    path: &Path,
    sha256: &str,
    share: f64,
    n: usize,
    seed: u64,
) -> HashMap<String, bool> {
    simulate_traffic(path, sha256, share, n, seed, 1.0)
}

/// [`simulate`] on traffic where the small tier answers well `harder` times
/// as often.
pub fn simulate_traffic(
    path: &Path,
    sha256: &str,
    share: f64,
    n: usize,
    seed: u64,
    harder: f64,
) -> HashMap<String, bool> {
    simulate_with(path, sha256, share, n, seed, |random, index| {
        let score = random.unit();
        Request {
            slice: SLICES[index % SLICES.len()].to_owned(),
            score,
            thresholds: vec![RUNNING_THRESHOLD],
            ok: vec![
                random.unit() < answers_well("small", score, harder),
                random.unit() < answers_well("large", score, harder),
            ],
        }
    })
}

/// One request of a simulated day: its slice and score, the running
/// config's thresholds for its slice, and whether each tier answers it
/// well, cheapest first.
pub struct Request {
    pub slice: String,
    pub score: f64,
    pub thresholds: Vec<f64>,
    pub ok: Vec<bool>,
}

/// The routes of the demo's tables, cheapest first, by their number.
pub fn routes(tiers: usize) -> &'static [&'static str] {
    if tiers == 3 {
        &["small", "mid", "large"]
    } else {
        &["small", "large"]
    }
}

/// `n` requests drawn by `request`, decided as the running config exploring
/// at `share` decides them and written as serve records them, into `path`;
/// each record's truth: whether its answer was acceptable.
pub fn simulate_with(
    path: &Path,
    sha256: &str,
    share: f64,
    n: usize,
    seed: u64,
    mut request: impl FnMut(&mut Random, usize) -> Request,
) -> HashMap<String, bool> {
    let mut random = Random::new(seed);
    let mut text = String::new();
    let mut truth = HashMap::with_capacity(n);
    for index in 0..n {
        let Request {
            slice,
            score,
            thresholds,
            ok,
        } = request(&mut random, index);
        let tiers = ok.len();
        let policy = thresholds
            .iter()
            .filter(|threshold| score >= **threshold)
            .count();
        let explored = random.unit() < share;
        let pick = ((random.unit() * tiers as f64) as usize).min(tiers - 1);
        let tier = if explored { pick } else { policy };
        let propensity = if tier == policy {
            1.0 - share + share / tiers as f64
        } else {
            share / tiers as f64
        };
        let route = routes(tiers)[tier];
        let id = format!("req-{seed}-{index}");
        truth.insert(id.clone(), ok[tier]);
        let record = json!({
            "id": id,
            "timestamp": 1_780_000_000_000i64 + index as i64,
            "slice": slice,
            "route": route,
            "decided_route": route,
            "reason": format!("routed-{route}"),
            "score": score,
            "status": "ok",
            "cost_usd": if route == "large" { 0.001 } else { 0.0001 },
            "config_version": 1,
            "config_sha256": sha256,
            "propensity": propensity,
            "draw": if explored { "explore" } else { "policy" },
        });
        text.push_str(&record.to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
    truth
}

/// `sample --label-share` of `records`, every drawn record's verdict filled
/// in from the truth: the label set's path.
pub fn labelled(records: &Path, share: f64, seed: u64, truth: &HashMap<String, bool>) -> PathBuf {
    let labels = records.with_extension("labels.jsonl");
    label_set(records, &labels, share, seed, None, |id| truth[id]);
    labels
}

/// `sample --label-share` (and `--audit-share`) of `records` into `out`,
/// every drawn row's `ok` set by `verdict` and every audited row's
/// The label set `config` committed (`sample --records --config`), every
/// drawn row labelled with its truth.
pub fn labelled_committed(records: &Path, config: &Path, truth: &HashMap<String, bool>) -> PathBuf {
    let labels = records.with_extension("labels.jsonl");
    routeval()
        .args(["sample", "--records"])
        .arg(records)
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(&labels)
        .assert()
        .success();
    fill_labels(&labels, None, |id| truth[id]);
    labels
}

/// `audited_ok` by the truth `audited` gives.
pub fn label_set(
    records: &Path,
    out: &Path,
    share: f64,
    seed: u64,
    audit: Option<(f64, &HashMap<String, bool>)>,
    verdict: impl Fn(&str) -> bool,
) {
    let mut command = routeval();
    command
        .args(["sample", "--records"])
        .arg(records)
        .args(["--label-share", &share.to_string()])
        .args(["--seed", &seed.to_string()])
        .arg("--out")
        .arg(out);
    if let Some((audit, _)) = audit {
        command.args(["--audit-share", &audit.to_string()]);
    }
    command.assert().success();
    fill_labels(out, audit, verdict);
}

/// Every row of the label set `out` labelled by `verdict`, and with
/// `audit` every audited row's `audited_ok` by its truth.
fn fill_labels(
    out: &Path,
    audit: Option<(f64, &HashMap<String, bool>)>,
    verdict: impl Fn(&str) -> bool,
) {
    let filled: String = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|line| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            assert_eq!(row["ok"], Value::Null, "drawn unlabelled: {row}");
            let id = row["record_id"].as_str().unwrap().to_owned();
            row["ok"] = json!(verdict(&id));
            if let Some((_, truth)) = audit
                && row["audit"] == json!(true)
            {
                row["audited_ok"] = json!(truth[&id]);
            }
            row.to_string() + "\n"
        })
        .collect();
    std::fs::write(out, filled).unwrap();
}

pub fn replay(
    pipeline: &Pipeline,
    config: &Path,
    candidate: &Path,
    records: &Path,
    labels: &Path,
) -> std::process::Output {
    replay_command(pipeline, config, candidate, records, labels)
        .output()
        .unwrap()
}

pub fn replay_command(
    pipeline: &Pipeline,
    config: &Path,
    candidate: &Path,
    records: &Path,
    labels: &Path,
) -> assert_cmd::Command {
    let mut command = routeval();
    command
        .args([
            "replay",
            "candidate",
            "--json",
            "--confidence",
            "0.9",
            "--records",
        ])
        .arg(records)
        .arg("--config")
        .arg(config)
        .arg("--candidate")
        .arg(candidate)
        .arg("--results")
        .arg(pipeline.out.join("graded-scored.parquet"))
        .arg("--labels")
        .arg(labels);
    command
}

/// The candidate table, written under `tag`.
pub fn candidate(pipeline: &Pipeline, tag: &str) -> PathBuf {
    candidate_at(pipeline, tag, CANDIDATE_THRESHOLD)
}

pub fn candidate_at(pipeline: &Pipeline, tag: &str, threshold: f64) -> PathBuf {
    let path = pipeline.path(&format!("candidate-{tag}.toml"));
    std::fs::write(&path, table(threshold, "")).unwrap();
    path
}
