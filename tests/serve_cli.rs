//! `routeval serve` through the binary: what was gated is what is served.
//! The demo's signed configs (two-tier predictive, three-tier predictive,
//! cascade) serve every prompt of the demo's dataset in front of serve-sim;
//! each prompt's tier is the kernel's for the score the pinned router gives
//! it, and each slice's live quality, cost and escalation are the gate's for
//! the same table on results scored that way. Also: keys, refused configs
//! at start and on reload, bad requests, and the records read as they are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::{
    EU_KEY, KEY, NOWHERE_KEY, Pipeline, Served, base_url, column, demo_prompts, gate_single,
    header_of, log_events, repo, routeval, serve_command, signed_single, start_serve, start_sim,
    write_keys,
};

/// What serve answered one prompt: the tier header, the body, the decision.
struct Answered {
    tier: String,
    route: String,
    text: String,
    decision: Value,
}

fn ask_all(served: &Served, prompts: &[(String, String, String)]) -> Vec<Answered> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = routeval::client::http_client(16).unwrap();
    runtime.block_on(async {
        let mut answers = Vec::new();
        for chunk in prompts.chunks(16) {
            let calls = chunk.iter().map(|(_, slice, prompt)| {
                let client = client.clone();
                let body = json!({
                    "model": "support-assistant",
                    "messages": [{"role": "user", "content": prompt}],
                    "temperature": 0.0,
                    "max_tokens": 256,
                    "seed": 7,
                });
                let chat = served.url("/v1/chat/completions");
                let route = served.url("/v1/route");
                async move {
                    let send = |url: String| {
                        client
                            .post(url)
                            .bearer_auth(KEY)
                            .header("x-routeval-slice", slice)
                            .json(&body)
                            .send()
                    };
                    let response = send(chat).await.unwrap();
                    assert_eq!(response.status(), 200);
                    let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
                    let (tier, route_name) =
                        (header("x-routeval-tier"), header("x-routeval-route"));
                    let reply: Value = response.json().await.unwrap();
                    let decision: Value = send(route).await.unwrap().json().await.unwrap();
                    Answered {
                        tier,
                        route: route_name,
                        text: reply["choices"][0]["message"]["content"]
                            .as_str()
                            .unwrap()
                            .to_owned(),
                        decision,
                    }
                }
            });
            answers.extend(futures_util::future::join_all(calls).await);
        }
        answers
    })
}

/// `POST /v1/route`'s answer, read strictly: a key added or dropped fails.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "read to pin the document's keys and types")]
struct RouteDecision {
    schema_version: u32,
    logical_model: String,
    slice: String,
    policy: String,
    route: String,
    model: Option<String>,
    tier: Option<String>,
    routes: Vec<String>,
    score: Option<f64>,
    propensity: f64,
    draw: String,
    thresholds: Vec<routeval::schema::Threshold>,
    verifier: Option<String>,
    reason: String,
    config_id: String,
    config_version: u64,
    config_sha256: String,
}

/// The tier a route's name stands for in the signed config.
fn tier_of(config: &Value, route: &str) -> String {
    config["table"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|found| found["name"] == route)
        .unwrap()["tier"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A streamed request gets what the whole one got: the same tier, and the
/// same answer, released only once verified (for the first stage) and
/// passed through as SSE.
fn streamed_like_whole(
    pipeline: &Pipeline,
    config: &Path,
    keys: &Path,
    prompts: &[(String, String, String)],
    answers: &[Answered],
) {
    let served = start_serve(
        config,
        &pipeline.out.join("keys/demo.key.pub"),
        &pipeline.out.join("router.bin"),
        keys,
        &pipeline.path("records-streamed"),
        &["--trust-slice-header"],
    );
    let mut tiers = std::collections::BTreeSet::new();
    for ((_, slice, prompt), whole) in prompts.iter().zip(answers).take(40) {
        let body = json!({
            "model": "support-assistant",
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": 256,
            "seed": 7,
            "stream": true,
        });
        let text = served.post(KEY, slice, &body, &["-N"]);
        let tier = header_of(&text, "x-routeval-tier");
        assert_eq!(tier, whole.tier, "{prompt}");
        assert!(text.contains("content-type: text/event-stream"), "{text}");
        let streamed: String = text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .filter_map(|data| {
                let chunk: Value = serde_json::from_str(data).unwrap();
                chunk["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(streamed, whole.text, "{prompt}");
        tiers.insert(tier.to_owned());
    }
    served.stop();
    assert_eq!(tiers.len(), 2, "both stages answered some: {tiers:?}");
}

/// A cascade's first stage in the signed config.
fn routes_first(config: &Value) -> String {
    config["table"]["policy"]["cascade"]["small"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn threshold(value: &Value) -> f64 {
    value.as_f64().unwrap_or_else(|| match value.as_str() {
        Some("inf") => f64::INFINITY,
        other => panic!("not a threshold: {other:?}"),
    })
}

/// The demo's rows as the gate scores them, and what the run answered.
struct DemoRows {
    graded: PathBuf,
    /// The calibration part: the prompts the deployed router never saw,
    /// the rows the gate certifies on, as (id, slice, prompt).
    prompts: Vec<(String, String, String)>,
    row_of: BTreeMap<String, usize>,
    full_scores: Vec<Value>,
    verifier_scores: Vec<Value>,
    slices: Vec<Value>,
    oks: BTreeMap<&'static str, Vec<Value>>,
    run_text: BTreeMap<(String, String), String>,
}

impl DemoRows {
    fn of(pipeline: &Pipeline) -> DemoRows {
        let graded = pipeline.out.join("graded-scored.parquet");
        let ids = column(&pipeline.full, "id");
        let full_scores = column(&pipeline.full, "router_score");
        let verifier_scores = column(&graded, "score");
        let slices = column(&graded, "slice");
        let row_of: BTreeMap<String, usize> = ids
            .iter()
            .enumerate()
            .map(|(row, id)| (id.as_str().unwrap().to_owned(), row))
            .collect();
        // The calibration part: the prompts the deployed router never saw, the
        // rows the gate certifies on.
        let prompts: Vec<(String, String, String)> = demo_prompts()
            .into_iter()
            .filter(|(id, _, _)| row_of.contains_key(id))
            .collect();
        assert_eq!(prompts.len(), ids.len());
        let ok_of = |tier: &str| column(&graded, &format!("{tier}_ok"));
        let oks: BTreeMap<&str, Vec<Value>> = ["small", "mid", "large"]
            .into_iter()
            .map(|tier| (tier, ok_of(tier)))
            .collect();
        let responses =
            routeval::schema::read_all_responses(&pipeline.out.join("run/responses.parquet"))
                .unwrap();
        let run_text: BTreeMap<(String, String), String> = responses
            .iter()
            .filter_map(|row| Some(((row.id.clone(), row.tier.to_string()), row.text.clone()?)))
            .collect();
        DemoRows {
            graded,
            prompts,
            row_of,
            full_scores,
            verifier_scores,
            slices,
            oks,
            run_text,
        }
    }
}

/// A signed config served on the demo's prompts: its path and the route
/// each (slice, prompt) was served by.
struct ServedConfig {
    config: PathBuf,
    routes: RoutesByPrompt,
}

/// Gates `candidate` on the demo's rows and on the scores serve computes,
/// serves the signed config (beside `shadow`, if given) on every prompt,
/// and checks that each answer, decision, record and per-slice metric is
/// what the gate signed; `tag` keeps the files of one test apart.
fn serves_as_signed(
    pipeline: &Pipeline,
    candidate: &str,
    tag: &str,
    shadow: Option<&ServedConfig>,
) -> ServedConfig {
    let dataset = repo().join("datasets/demo/prompts.jsonl");
    let sim = start_sim(
        &dataset,
        routeval::upstream_sim::SimSettings {
            seed: 7,
            ..routeval::upstream_sim::SimSettings::default()
        },
    );
    let url = base_url(&sim);
    let keys = pipeline.path(&format!("{tag}-keys.toml"));
    write_keys(&keys);
    let demo = DemoRows::of(pipeline);
    let (graded, prompts) = (&demo.graded, &demo.prompts);
    let policy = if candidate == "cascade.toml" {
        "cascade"
    } else {
        "predictive"
    };
    let signed_report = pipeline.gate(
        candidate,
        &url,
        graded,
        &format!("{tag}-signed-{policy}-{candidate}"),
    );
    assert!(
        signed_report["emitted"].is_object(),
        "{candidate}: {signed_report}"
    );
    let gate_dir = pipeline.path(&format!("{tag}-signed-{policy}-{candidate}"));
    let config_path = gate_dir.join("route-config.v1.json");
    let config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    // The gate on the same table, with the scores serve computes.
    let scored = if policy == "cascade" {
        graded
    } else {
        &pipeline.full
    };
    let live_report = pipeline.gate(
        candidate,
        &url,
        scored,
        &format!("{tag}-live-{policy}-{candidate}"),
    );
    let records = pipeline.path(&format!("{tag}-records-{candidate}"));
    // The shadow's check reads each record's prompt: kept once asked.
    let mut flags = vec![
        "--trust-slice-header".to_owned(),
        "--records-prompts".to_owned(),
        "full".to_owned(),
    ];
    if let Some(shadow) = shadow {
        flags.extend(["--shadow".to_owned(), shadow.config.display().to_string()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let served = start_serve(
        &config_path,
        &pipeline.out.join("keys/demo.key.pub"),
        &pipeline.out.join("router.bin"),
        &keys,
        &records,
        &flags,
    );
    let answers = ask_all(&served, prompts);
    served.stop();
    if let Some(shadow) = shadow {
        shadow_is_what_the_candidate_serves(&records, &shadow.routes);
    }
    if candidate == "cascade.toml" {
        streamed_like_whole(pipeline, &config_path, &keys, prompts, &answers);
    }
    let per_slice = each_answer_is_the_signed_tier(candidate, &config, &demo, &answers);
    let reasons = the_records_and_metrics_are_the_gates(
        candidate,
        &records,
        (&signed_report, &live_report),
        &per_slice,
        prompts.len(),
    );
    let kind = config["table"]["policy"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    // The records pass through drift as they are: a healthy run.
    routeval()
        .args(["drift", "--records"])
        .arg(&records)
        .arg("--config")
        .arg(&config_path)
        .arg("--out")
        .arg(pipeline.path(&format!("{tag}-drift-{candidate}.json")))
        .assert()
        .success();
    routeval()
        .args(["replay", "hedge", "--records"])
        .arg(&records)
        .assert()
        .success();
    if kind == "cascade" {
        assert!(
            reasons.contains_key("cascade-accepted") && reasons.contains_key("escalated"),
            "{reasons:?}"
        );
    }
    drop(sim);
    ServedConfig {
        config: config_path,
        routes: prompts
            .iter()
            .zip(&answers)
            .map(|((_, slice, prompt), answer)| {
                ((slice.clone(), prompt.clone()), answer.route.clone())
            })
            .collect(),
    }
}

/// Each answer is the tier the signed thresholds pick for the prompt's
/// score, with the text the run graded, and its decision says so; the
/// served outcomes per slice: (prompts, acceptable, escalated).
fn each_answer_is_the_signed_tier(
    candidate: &str,
    config: &Value,
    demo: &DemoRows,
    answers: &[Answered],
) -> BTreeMap<String, (u64, u64, u64)> {
    let DemoRows {
        prompts,
        row_of,
        full_scores,
        verifier_scores,
        slices,
        oks,
        run_text,
        ..
    } = demo;
    let policy_json = &config["table"]["policy"];
    let (kind, body) = policy_json.as_object().unwrap().iter().next().unwrap();
    let mut per_slice: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for ((id, slice, _), answer) in prompts.iter().zip(answers) {
        let row = row_of[id];
        assert_eq!(slices[row].as_str().unwrap(), slice);
        let (routes, thresholds): (Vec<String>, Vec<f64>) = match kind.as_str() {
            "predictive" => (
                vec![
                    body["small"].as_str().unwrap().to_owned(),
                    body["large"].as_str().unwrap().to_owned(),
                ],
                vec![threshold(&body["thresholds"]["slices"][slice])],
            ),
            "predictive_tiers" => (
                body["tiers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|tier| tier.as_str().unwrap().to_owned())
                    .collect(),
                body["thresholds"]["slices"][slice]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(threshold)
                    .collect(),
            ),
            "cascade" => (
                vec![
                    body["small"].as_str().unwrap().to_owned(),
                    body["large"].as_str().unwrap().to_owned(),
                ],
                vec![threshold(&body["thresholds"]["slices"][slice])],
            ),
            other => panic!("{other}"),
        };
        let decision: RouteDecision = serde_json::from_value(answer.decision.clone())
            .unwrap_or_else(|error| panic!("{error}: {}", answer.decision));
        assert_eq!(
            decision.schema_version,
            routeval::serve::ROUTE_DECISION_SCHEMA_VERSION
        );
        assert_eq!(&decision.slice, slice);
        // These configs do not explore: every decision is the policy's.
        assert_eq!(
            (decision.propensity, decision.draw.as_str()),
            (1.0, "policy")
        );
        assert!(
            crate::common::undocumented_keys("## Route decisions", &[&answer.decision]).is_empty(),
            "{}",
            answer.decision
        );
        if kind == "cascade" {
            assert_eq!(decision.reason, "cascade-start");
            assert_eq!(decision.route, routes_first(config));
        } else {
            assert_eq!(
                decision.route, answer.route,
                "{id}: the decision is what was served"
            );
        }
        let score = if kind == "cascade" {
            verifier_scores[row].as_f64().unwrap()
        } else {
            let full = full_scores[row].as_f64().unwrap();
            assert_eq!(
                answer.decision["score"].as_f64(),
                Some(full),
                "{id}: serve's score is `router score`'s"
            );
            full
        };
        let expected_tier = thresholds
            .iter()
            .take_while(|&&threshold| score >= threshold)
            .count();
        let expected = tier_of(config, &routes[expected_tier]);
        assert_eq!(
            answer.tier, expected,
            "{candidate} {id}: score {score} thresholds {thresholds:?}"
        );
        assert_eq!(answer.route, routes[expected_tier]);
        assert_eq!(
            Some(&answer.text),
            run_text.get(&(id.clone(), expected.clone())),
            "{candidate} {id}: the answer is the tier's, as the run graded it"
        );
        let counts = per_slice.entry(slice.clone()).or_default();
        counts.0 += 1;
        counts.1 += u64::from(oks[expected.as_str()][row].as_bool().unwrap());
        counts.2 += u64::from(expected_tier > 0);
    }
    per_slice
}

/// Per slice: live quality and escalation from what was served, cost from
/// serve's own records, all equal to the gate's on the same rows; the
/// records' reasons, counted.
fn the_records_and_metrics_are_the_gates(
    candidate: &str,
    records: &Path,
    (signed_report, live_report): (&Value, &Value),
    per_slice: &BTreeMap<String, (u64, u64, u64)>,
    prompts: usize,
) -> BTreeMap<String, u64> {
    // Per slice: live quality and escalation from what was served, cost
    // from serve's own records, all equal to the gate's on the same rows.
    let mut costs: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for part in routeval::records::record_parts(records).unwrap() {
        assert!(
            part.extension().unwrap() == "parquet",
            "rolled on stop: {}",
            part.display()
        );
        for ((slice, cost), reason) in column(&part, "slice")
            .iter()
            .zip(column(&part, "cost_usd"))
            .zip(column(&part, "reason"))
        {
            let entry = costs.entry(slice.as_str().unwrap().to_owned()).or_default();
            entry.0 += cost.as_f64().unwrap();
            entry.1 += 1;
            *reasons
                .entry(reason.as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(costs.values().map(|(_, n)| n).sum::<u64>(), prompts as u64);
    let live_candidate = &live_report["candidates"][0];
    for metrics in live_candidate["slices"].as_array().unwrap() {
        let slice = metrics["slice"].as_str().unwrap();
        let (n, ok, escalated) = per_slice[slice];
        assert_eq!(metrics["n"].as_u64(), Some(n));
        assert_eq!(
            metrics["quality"].as_f64().unwrap(),
            ok as f64 / n as f64,
            "{candidate} {slice}"
        );
        assert_eq!(
            metrics["escalation_rate"].as_f64().unwrap(),
            escalated as f64 / n as f64,
            "{candidate} {slice}"
        );
        let (cost, count) = costs[slice];
        let mean = metrics["mean_cost"].as_f64().unwrap();
        assert!(
            (cost / count as f64 - mean).abs() <= 1e-12 * mean.max(1e-9),
            "{candidate} {slice}: live {} gate {mean}",
            cost / count as f64
        );
    }
    let signed_quality = signed_report["candidates"][0]["overall"]["quality"]
        .as_f64()
        .unwrap();
    let live_quality = live_candidate["overall"]["quality"].as_f64().unwrap();
    // The certificate is about the scorer serve runs: what was signed
    // is what was served, to the last row.
    assert_eq!(signed_quality, live_quality, "{candidate}");
    assert_eq!(
        signed_report["candidates"][0]["slices"], live_candidate["slices"],
        "{candidate}"
    );
    reasons
}

#[test]
fn a_two_tier_predictive_config_serves_what_the_gate_signed() {
    serves_as_signed(Pipeline::shared(), "predictive.toml", "two-tier", None);
}

#[test]
fn a_three_tier_config_serves_what_the_gate_signed_and_its_shadow_decides_as_served_alone() {
    let pipeline = Pipeline::shared();
    let two_tier = serves_as_signed(pipeline, "predictive.toml", "shadowed", None);
    serves_as_signed(
        pipeline,
        "predictive-three-tier.toml",
        "shadowing",
        Some(&two_tier),
    );
}

#[test]
fn a_cascade_serves_what_the_gate_signed_streamed_or_whole() {
    serves_as_signed(Pipeline::shared(), "cascade.toml", "cascade", None);
}

/// Every record of `records` has the shadowed candidate's decision: the
/// route it served the same slice and prompt with, when it was served
/// (which the kernel's tier for `router score`'s score was checked to be).
fn shadow_is_what_the_candidate_serves(records: &Path, served_by_candidate: &RoutesByPrompt) {
    let mut shadowed = 0;
    // Read as drift and sample read them: the prompt is kept once, in the
    // messages.
    routeval::records::for_each_record(
        records,
        &routeval::records::FieldNames::default(),
        |_, record| {
            let key = (
                record.slice.to_string(),
                record.prompt_text().unwrap().into_owned(),
            );
            let route = record.shadow_route.as_deref().unwrap();
            assert_eq!(route, served_by_candidate[&key], "{key:?}");
            assert_eq!(
                record.shadow_reason.as_ref().map(ToString::to_string),
                Some(format!("routed-{route}")),
                "{key:?}"
            );
            assert_eq!(record.shadow_config_version, Some(1));
            shadowed += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(shadowed, served_by_candidate.len());
}

/// The route a config served each (slice, prompt) with.
type RoutesByPrompt = BTreeMap<(String, String), String>;

/// Puts `config` and its signature where serve watches (`live`), the
/// signature first, as a deploy tool replaces them.
fn install(config: &Path, live: &Path) {
    std::fs::copy(
        routeval::routes::signature_path(config),
        routeval::routes::signature_path(live),
    )
    .unwrap();
    std::fs::copy(config, live).unwrap();
}

/// What the tests below start from: the shared demo pipeline, a serve-sim
/// (by default one whose tokens come a tenth of a second apart: a stream a
/// client can leave, or a deadline can cut), the keys, and a one-route
/// config signed for that sim under the test's own name.
struct OneRoute {
    pipeline: &'static Pipeline,
    name: &'static str,
    sim: routeval::upstream_sim::RunningSim,
    keys: PathBuf,
    config: PathBuf,
}

impl OneRoute {
    fn new(name: &'static str) -> OneRoute {
        OneRoute::with(
            name,
            routeval::upstream_sim::SimSettings {
                tokens_per_second: 10.0,
                ..routeval::upstream_sim::SimSettings::default()
            },
        )
    }

    /// Before a serve-sim that answers at once.
    fn fast(name: &'static str) -> OneRoute {
        OneRoute::with(name, routeval::upstream_sim::SimSettings::default())
    }

    fn with(name: &'static str, settings: routeval::upstream_sim::SimSettings) -> OneRoute {
        let pipeline = Pipeline::shared();
        let sim = start_sim(&repo().join("datasets/demo/prompts.jsonl"), settings);
        let keys = pipeline.path(&format!("{name}-keys.toml"));
        write_keys(&keys);
        let config = signed_single(pipeline, &base_url(&sim), name, None);
        OneRoute {
            pipeline,
            name,
            sim,
            keys,
            config,
        }
    }

    /// A path of this test's own in the shared pipeline.
    fn path(&self, what: &str) -> PathBuf {
        self.pipeline.path(&format!("{}-{what}", self.name))
    }

    fn pubkey(&self) -> PathBuf {
        self.pipeline.out.join("keys/demo.key.pub")
    }

    fn router(&self) -> PathBuf {
        self.pipeline.out.join("router.bin")
    }

    /// serve of `config`, writing its records to `records`.
    fn serve_config(&self, config: &Path, records: &Path, extra: &[&str]) -> Served {
        start_serve(
            config,
            &self.pubkey(),
            &self.router(),
            &self.keys,
            records,
            extra,
        )
    }

    /// serve of the signed config, writing its records under `records`.
    fn serve(&self, records: &str, extra: &[&str]) -> Served {
        self.serve_config(&self.config, &self.path(records), extra)
    }
}

/// The status of `GET path`.
fn status_of(served: &Served, path: &str) -> String {
    let output = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &served.url(path),
        ])
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

/// The status of a chat request for the demo's first prompt.
fn chat(served: &Served) -> String {
    let (_, slice, prompt) = demo_prompts().into_iter().next().unwrap();
    let body =
        json!({"model": "support-assistant", "messages": [{"role": "user", "content": prompt}]})
            .to_string();
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {KEY}"))
        .args(["-H", &format!("x-routeval-slice: {slice}"), "-d", &body])
        .arg(served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

/// A chat request for the demo's prompt with the longest answer: many
/// tokens, so several seconds at ten a second.
fn long_request(stream: bool) -> String {
    let long = std::fs::read_to_string(repo().join("datasets/demo/prompts.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .max_by_key(|row| row["reference"].as_str().map_or(0, str::len))
        .unwrap()["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    json!({"model": "support-assistant", "stream": stream, "messages": [{"role": "user", "content": long}]})
        .to_string()
}

/// `curl` of `body` to serve's chat endpoint with the demo key: its output
/// and whether it exited cleanly.
fn curl_chat(served: &Served, flags: &[&str], body: &str) -> (String, bool) {
    let output = Command::new("curl")
        .args(flags)
        .arg("-H")
        .arg(format!("Authorization: Bearer {KEY}"))
        .args(["-d", body])
        .arg(served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.status.success(),
    )
}

/// The values of `names`' columns on every record under `records`.
fn record_columns(records: &Path, names: &[&str]) -> Vec<Vec<Value>> {
    let mut rows = Vec::new();
    for part in routeval::records::record_parts(records).unwrap() {
        let columns: Vec<Vec<Value>> = names.iter().map(|name| column(&part, name)).collect();
        for row in 0..columns[0].len() {
            rows.push(columns.iter().map(|column| column[row].clone()).collect());
        }
    }
    rows
}

/// A copy of `config` with one byte changed, beside its signature.
fn tampered_copy(setup: &OneRoute, config: &Path) -> PathBuf {
    let tampered = setup.path("tampered.json");
    let text = std::fs::read_to_string(config)
        .unwrap()
        .replace("\"policy\"", "\"policy\" ");
    std::fs::write(&tampered, text).unwrap();
    std::fs::copy(
        routeval::routes::signature_path(config),
        routeval::routes::signature_path(&tampered),
    )
    .unwrap();
    tampered
}

/// The test's table gated and signed by a key serve does not trust.
fn signed_by_stranger(setup: &OneRoute) -> PathBuf {
    let stranger = setup.path("stranger.key");
    routeval()
        .args(["keygen", "--out"])
        .arg(&stranger)
        .assert()
        .success();
    let out = setup.path("stranger");
    gate_single(
        setup.pipeline,
        &setup.pipeline.path(&format!("{}.toml", setup.name)),
        &out,
        Some(&stranger),
        true,
    )
    .assert()
    .success();
    out.join("route-config.v1.json")
}

/// serve started on `config` with `router`, run to its end.
fn start_output(
    setup: &OneRoute,
    config: &Path,
    router: &Path,
    records: &Path,
) -> std::process::Output {
    serve_command(config, &setup.pubkey(), router, &setup.keys, records)
        .output()
        .unwrap()
}

#[test]
fn a_config_serve_cannot_trust_is_refused_at_start_in_one_line() {
    let setup = OneRoute::fast("refused");
    let v1 = setup.config.clone();
    let router = setup.router();
    let tampered = tampered_copy(&setup, &v1);
    let unsigned = setup.path("unsigned.json");
    std::fs::copy(&v1, &unsigned).unwrap();
    let other_router = setup.path("other-router.bin");
    let mut bytes = std::fs::read(&router).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&other_router, bytes).unwrap();
    let expired_out = setup.path("expired");
    gate_single(
        setup.pipeline,
        &setup.pipeline.path("refused.toml"),
        &expired_out,
        None,
        true,
    )
    .args(["--at", "2020-01-01T00:00:00Z", "--ttl-days", "1"])
    .assert()
    .success();
    let expired = expired_out.join("route-config.v1.json");
    let by_stranger = signed_by_stranger(&setup);
    // A config of the schema before `serving`, properly signed: it verifies,
    // and serve names what it lacks.
    let older = setup.path("older.json");
    let mut value: Value = serde_json::from_slice(&std::fs::read(&v1).unwrap()).unwrap();
    value.as_object_mut().unwrap().remove("serving");
    value["schema"] = json!("routeval.route-config/2");
    let config: routeval::routes::RouteConfig = serde_json::from_value(value).unwrap();
    let bytes = config.canonical_bytes();
    std::fs::write(&older, &bytes).unwrap();
    let secret = routeval::routes::load_secret(&setup.pipeline.out.join("keys/demo.key")).unwrap();
    let comment = config.trusted_comment(&routeval::digest::sha256_hex(&bytes));
    std::fs::write(
        routeval::routes::signature_path(&older),
        routeval::routes::sign(&secret, &bytes, &comment).unwrap(),
    )
    .unwrap();
    routeval()
        .arg("verify")
        .arg(&older)
        .arg("--pubkey")
        .arg(setup.pubkey())
        .assert()
        .success();
    for (config, router, says) in [
        (
            &older,
            &router,
            "a routeval.route-config/2 config has no `serving` block",
        ),
        (&expired, &router, "expired at 2020-01-02"),
        (&by_stranger, &router, "signature"),
        (&tampered, &router, "signature"),
        (&unsigned, &router, "cannot read the signature"),
        (
            &v1,
            &other_router,
            "is not the router the thresholds were calibrated on",
        ),
    ] {
        let output = start_output(&setup, config, router, &setup.path("refused-records"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
}

#[test]
fn a_second_serve_on_the_same_records_is_refused() {
    let setup = OneRoute::fast("second");
    let records = setup.path("records");
    let served = setup.serve("records", &[]);
    // A second serve would interleave two journals.
    let second = start_output(&setup, &setup.config, &setup.router(), &records);
    served.stop();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("another routeval serve is writing to this directory")
            && stderr.contains("give another --records"),
        "{stderr}"
    );
}

#[test]
fn keys_tenants_and_bad_requests_are_answered_and_recorded_without_key_material() {
    let setup = OneRoute::fast("clients");
    let records = setup.path("records");
    // `sample` below reads the prompts, which serve keeps only when asked.
    let served = setup.serve("records", &["--records-prompts", "redacted"]);
    let body_file = setup.path("body.json");
    let client = |key: Option<&str>, slice: Option<&str>, body: String| {
        std::fs::write(&body_file, body).unwrap();
        let mut command = Command::new("curl");
        command
            .args([
                "-s",
                "-i",
                "-X",
                "POST",
                &served.url("/v1/chat/completions"),
                "--data-binary",
            ])
            .arg(format!("@{}", body_file.display()));
        if let Some(key) = key {
            command.args(["-H", &format!("Authorization: Bearer {key}")]);
        }
        if let Some(slice) = slice {
            command.args(["-H", &format!("x-routeval-slice: {slice}")]);
        }
        String::from_utf8(command.output().unwrap().stdout).unwrap()
    };
    let (_, slice, prompt) = demo_prompts().into_iter().next().unwrap();
    let body =
        json!({"model": "support-assistant", "messages": [{"role": "user", "content": prompt}]})
            .to_string();
    let unauthorized = client(Some("sk-not-a-key"), Some(&slice), body.clone());
    assert!(unauthorized.starts_with("HTTP/1.1 401"), "{unauthorized}");
    assert!(!unauthorized.contains("sk-not-a-key"));
    assert!(client(None, None, body.clone()).starts_with("HTTP/1.1 401"));
    // Without --trust-slice-header the key's tenant is the slice: a tenant
    // the table does not name gets the strongest tier.
    let claimed = client(Some(KEY), Some(&slice), body.clone());
    assert!(claimed.contains("x-routeval-tier: large"), "{claimed}");
    // The EU tenant is served only from the EU route (large), whatever
    // slice it claims; a tenant whose region no route serves is refused.
    let eu = client(Some(EU_KEY), Some(&slice), body.clone());
    assert!(eu.contains("x-routeval-route: large"), "{eu}");
    let nowhere = client(Some(NOWHERE_KEY), Some(&slice), body.clone());
    assert!(nowhere.starts_with("HTTP/1.1 403"), "{nowhere}");
    let malformed = client(Some(KEY), None, "{\"model\":".to_owned());
    assert!(
        malformed.starts_with("HTTP/1.1 400") && malformed.contains("\"param\":\"body\""),
        "{malformed}"
    );
    let no_messages = client(
        Some(KEY),
        None,
        json!({"model": "support-assistant"}).to_string(),
    );
    assert!(
        no_messages.contains("\"param\":\"messages\""),
        "{no_messages}"
    );
    let huge = client(Some(KEY), None, "x".repeat(5 << 20));
    assert!(
        huge.contains("HTTP/1.1 413") && huge.contains("\"param\":\"body\""),
        "{}",
        &huge[..300.min(huge.len())]
    );
    let metrics = String::from_utf8(
        Command::new("curl")
            .args(["-s", &served.url("/metrics")])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        metrics.contains(
            "routeval_requests_total{route=\"-\",reason=\"unauthorized\",status=\"error\"} 2"
        ),
        "{metrics}"
    );
    served.stop();
    // The records: every request, no key material, readable as they are.
    let mut all = String::new();
    for row in record_columns(&records, &["reason", "slice"]) {
        all.push_str(&format!("{} {}\n", row[0], row[1]));
    }
    assert!(all.contains("\"unauthorized\""), "{all}");
    assert!(all.contains("\"constrained\" \"nowhere\""), "{all}");
    let raw: Vec<u8> = routeval::records::record_parts(&records)
        .unwrap()
        .iter()
        .flat_map(|part| std::fs::read(part).unwrap())
        .collect();
    for key in [KEY, EU_KEY, NOWHERE_KEY, "sk-not-a-key"] {
        assert!(
            !raw.windows(key.len())
                .any(|window| window == key.as_bytes()),
            "{key} in the records"
        );
    }
    routeval()
        .args(["sample", "--per-slice", "1", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(setup.path("sample.jsonl"))
        .assert()
        .success();
    routeval()
        .args(["replay", "fallback", "--records"])
        .arg(&records)
        .args(["--route", "large", "--fallback-ttft-ms", "1000"])
        .assert()
        .code(0);
}

#[test]
fn a_reload_takes_the_next_version_and_refuses_rollbacks_tampering_and_strangers() {
    let setup = OneRoute::fast("reloads");
    let v1 = setup.config.clone();
    let tampered = tampered_copy(&setup, &v1);
    let by_stranger = signed_by_stranger(&setup);
    let live = setup.path("live.json");
    install(&v1, &live);
    let live_records = setup.path("live-records");
    let served_live = setup.serve_config(&live, &live_records, &[]);
    let metrics_of = |served: &Served| {
        String::from_utf8(
            Command::new("curl")
                .args(["-s", &served.url("/metrics")])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    let wait_for = |served: &Served, text: &str| {
        for _ in 0..40 {
            if metrics_of(served).contains(text) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("never: {text}\n{}", metrics_of(served));
    };
    std::fs::copy(&tampered, &live).unwrap();
    wait_for(
        &served_live,
        "routeval_config_reloads_total{outcome=\"refused\"} 1",
    );
    assert!(metrics_of(&served_live).contains("} 1\n# HELP routeval_config_expired"));
    let v2 = signed_single(
        setup.pipeline,
        &base_url(&setup.sim),
        "reloads-v2",
        Some(&v1),
    );
    install(&v2, &live);
    wait_for(
        &served_live,
        "routeval_config_reloads_total{outcome=\"applied\"} 1",
    );
    assert!(
        metrics_of(&served_live).contains("} 2\n# HELP routeval_config_expired"),
        "{}",
        metrics_of(&served_live)
    );
    // Back to v1 is a rollback.
    install(&v1, &live);
    wait_for(
        &served_live,
        "routeval_config_reloads_total{outcome=\"refused\"} 2",
    );
    assert!(metrics_of(&served_live).contains("} 2\n# HELP routeval_config_expired"));
    // A config signed by another key is refused on reload too.
    install(&by_stranger, &live);
    wait_for(
        &served_live,
        "routeval_config_reloads_total{outcome=\"refused\"} 3",
    );
    assert!(metrics_of(&served_live).contains("} 2\n# HELP routeval_config_expired"));
    // The running v2 back in the file is no change; SIGHUP asks anyway, and
    // serve says the config is unchanged.
    install(&v2, &live);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    served_live.signal("HUP");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let log = served_live.stop_with_log();
    let unchanged = log_events(&log, "config_unchanged");
    assert_eq!(unchanged.len(), 1, "SIGHUP on an unchanged config: {log}");
    assert_eq!(unchanged[0]["config_version"], 2, "{log}");
    let refused = log_events(&log, "config_reload_refused");
    assert_eq!(refused.len(), 3, "{log}");
    // Each names the version that kept serving.
    let kept: Vec<&Value> = refused.iter().map(|line| &line["config_version"]).collect();
    assert_eq!(kept, [&json!(1), &json!(2), &json!(2)], "{log}");
    assert!(refused.iter().all(|line| line["level"] == "error"), "{log}");
    assert!(!log.contains(KEY) && !log.contains(EU_KEY), "{log}");
    // The records directory remembers v2: a restart on v1 is a rollback too.
    let restart = start_output(&setup, &v1, &setup.router(), &live_records);
    let stderr = String::from_utf8_lossy(&restart.stderr);
    assert_eq!(restart.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is a rollback: version 2"), "{stderr}");
}

#[test]
fn an_expired_config_keeps_serving_and_strict_expiry_refuses_it() {
    let setup = OneRoute::new("expiry");
    // Signed so that it expires four seconds from now.
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 86_400
        + 4;
    let expiring_out = setup.path("expiring");
    gate_single(
        setup.pipeline,
        &setup.pipeline.path("expiry.toml"),
        &expiring_out,
        None,
        true,
    )
    .args(["--ttl-days", "1", "--at"])
    .arg(routeval::clock::format_rfc3339(created))
    .assert()
    .success();
    let expiring = expiring_out.join("route-config.v1.json");
    let lenient = setup.serve_config(&expiring, &setup.path("lenient"), &[]);
    let strict = setup.serve_config(&expiring, &setup.path("strict"), &["--strict-expiry"]);
    assert_eq!(status_of(&lenient, "/readyz"), "200");
    assert_eq!(chat(&strict), "200");
    std::thread::sleep(std::time::Duration::from_secs(5));
    // Expiry is every replica's at once: a replica that still answers
    // stays ready, and says it; one that refuses every request is not.
    assert_eq!(
        status_of(&lenient, "/readyz"),
        "200",
        "an expired config that still serves is ready"
    );
    assert_eq!(status_of(&lenient, "/healthz"), "200");
    assert_eq!(chat(&lenient), "200", "the last good config keeps serving");
    assert_eq!(chat(&strict), "503", "--strict-expiry refuses past expiry");
    assert_eq!(status_of(&strict, "/readyz"), "503");
    strict.stop();
    lenient.stop();
}

#[test]
fn behind_a_gateway_the_slice_header_splits_one_tenant_and_a_constraint_holds_another() {
    let setup = OneRoute::new("gateway");
    let served = setup.serve("records", &["--trust-slice-header"]);
    // The demo tenant's billing requests split between the tiers; the EU
    // tenant's, claiming the same slice, only ever reach the EU route.
    let mut routes: BTreeMap<(&str, String), u64> = BTreeMap::new();
    for (_, slice, prompt) in demo_prompts()
        .iter()
        .filter(|(_, slice, _)| slice == "billing")
        .take(20)
    {
        for key in [KEY, EU_KEY] {
            let body = json!({"model": "support-assistant", "messages": [{"role": "user", "content": prompt}]});
            let route = header_of(&served.post(key, slice, &body, &[]), "x-routeval-route");
            *routes.entry((key, route)).or_default() += 1;
        }
    }
    served.stop();
    assert!(
        routes.contains_key(&(KEY, "small".to_owned())),
        "{routes:?}"
    );
    assert!(
        routes.contains_key(&(KEY, "large".to_owned())),
        "{routes:?}"
    );
    assert_eq!(
        routes.get(&(EU_KEY, "large".to_owned())),
        Some(&20),
        "{routes:?}"
    );
}

#[test]
fn a_client_that_leaves_mid_stream_is_recorded_and_its_upstream_call_cancelled() {
    let setup = OneRoute::new("leaving");
    let served = setup.serve("records", &[]);
    let before = setup.sim.stats();
    let (received, _) = curl_chat(
        &served,
        &["-s", "-N", "--max-time", "0.5"],
        &long_request(true),
    );
    assert!(
        received.starts_with("data: "),
        "the stream had begun: {received}"
    );
    assert!(
        !received.contains("[DONE]"),
        "the client left before the end: {received}"
    );
    // Longer than any of the sim's answers takes at 10 tokens a second: an
    // upstream call serve had not cancelled would have completed by now.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let after = setup.sim.stats();
    assert_eq!(after.requests, before.requests + 1);
    assert_eq!(
        after.completed.values().sum::<u64>(),
        before.completed.values().sum::<u64>(),
        "the generation went on after the client left"
    );
    assert_eq!(chat(&served), "200", "serve keeps serving");
    served.stop();
    let finishes: Vec<Value> = record_columns(&setup.path("records"), &["finish_reason"])
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    assert_eq!(finishes, [json!("client_disconnected"), json!("stop")]);
}

#[test]
fn beyond_the_in_flight_bounds_a_request_is_refused_at_once_with_retry_after() {
    let setup = OneRoute::new("admission");
    for (flags, reason) in [
        (["--max-in-flight", "2"], "admission:total"),
        (["--max-in-flight-per-route", "2"], "admission:route"),
    ] {
        let served = setup.serve(reason, &flags);
        let slow = long_request(false);
        let calls: Vec<std::process::Child> = (0..4)
            .map(|_| {
                Command::new("curl")
                    .args([
                        "-s",
                        "-D",
                        "-",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code} %{time_total}\n",
                        "-H",
                    ])
                    .arg(format!("Authorization: Bearer {KEY}"))
                    .args(["-d", &slow])
                    .arg(served.url("/v1/chat/completions"))
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outcomes: Vec<String> = calls
            .into_iter()
            .map(|call| String::from_utf8(call.wait_with_output().unwrap().stdout).unwrap())
            .collect();
        let last_line = |text: &str| text.trim_end().lines().last().unwrap().to_owned();
        let timed = |code: &str| -> Vec<f64> {
            outcomes
                .iter()
                .map(|text| last_line(text))
                .filter_map(|line| {
                    let (status, time) = line.split_once(' ')?;
                    (status == code).then(|| time.parse().unwrap())
                })
                .collect()
        };
        let (answered, refused) = (timed("200"), timed("429"));
        assert_eq!((answered.len(), refused.len()), (2, 2), "{outcomes:?}");
        assert!(
            refused
                .iter()
                .all(|refused| answered.iter().all(|answered| refused < answered)),
            "refusals come at once, before the admitted answers end: {outcomes:?}"
        );
        assert!(
            outcomes
                .iter()
                .filter(|text| last_line(text).starts_with("429"))
                .all(|text| text.to_ascii_lowercase().contains("retry-after: 1")),
            "{outcomes:?}"
        );
        assert_eq!(chat(&served), "200", "the slots came back");
        served.stop();
        let refusals = record_columns(&setup.path(reason), &["reason", "status"])
            .into_iter()
            .filter(|row| row[0] == json!(reason) && row[1] == json!("rate_limited"))
            .count();
        assert_eq!(refusals, 2, "{reason}");
    }
}

#[test]
fn a_stalled_answer_is_a_504_and_a_stalled_stream_ends_in_an_error() {
    let setup = OneRoute::new("stalls");
    let served = setup.serve(
        "records",
        &[
            "--first-token-timeout-ms",
            "300",
            "--stall-timeout-ms",
            "50",
        ],
    );
    let (late, _) = curl_chat(
        &served,
        &["-s", "-w", "\n%{http_code} %{time_total}"],
        &long_request(false),
    );
    let (body, outcome) = late.rsplit_once('\n').unwrap();
    // serve streams from the route for a client that did not stream, so
    // the first token came in time and the stall timer bounds the rest: a
    // 504 at all says it did, as the answer takes 2 s.
    let (status, _) = outcome.split_once(' ').unwrap();
    assert_eq!(status, "504", "{late}");
    assert!(body.contains("--stall-timeout-ms"), "{body}");
    let (received, clean) = curl_chat(&served, &["-s", "-N"], &long_request(true));
    assert!(received.starts_with("data: "), "{received}");
    assert!(
        !received.contains("[DONE]"),
        "a stalled stream is not finished: {received}"
    );
    assert!(!clean, "the client sees the stream end in an error");
    served.stop();
    let outcomes = record_columns(&setup.path("records"), &["status", "finish_reason"]);
    assert_eq!(
        outcomes,
        [
            vec![json!("timeout"), json!("stall")],
            vec![json!("timeout"), json!("stall")]
        ],
        "the assembled answer and the stream both stalled"
    );
}

#[test]
fn the_total_deadline_ends_a_stream_that_flows_but_runs_too_long() {
    let setup = OneRoute::new("total");
    let served = setup.serve("records", &["--total-timeout-ms", "700"]);
    let (received, _) = curl_chat(&served, &["-s", "-N"], &long_request(true));
    assert!(
        received.matches("data: ").count() > 2,
        "it flowed for a while: {received}"
    );
    assert!(!received.contains("[DONE]"), "{received}");
    served.stop();
    let finishes = record_columns(&setup.path("records"), &["finish_reason"]);
    assert_eq!(finishes, [vec![json!("total_deadline")]]);
}

#[test]
fn after_a_kill_the_next_serve_keeps_every_journaled_request_and_drops_a_torn_line() {
    let setup = OneRoute::new("killed");
    let records = setup.path("records");
    let served = setup.serve("records", &[]);
    for _ in 0..5 {
        assert_eq!(chat(&served), "200");
    }
    // The writer syncs each batch it drains: wait for the fifth.
    let journal = records.join("part-000001.jsonl");
    for _ in 0..50 {
        if std::fs::read_to_string(&journal).is_ok_and(|text| text.lines().count() == 5) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    served.signal("KILL");
    drop(served);
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        5
    );
    let mut torn = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(&mut torn, b"{\"id\": \"half-writ").unwrap();
    drop(torn);
    let served = setup.serve("records", &[]);
    assert!(!journal.exists(), "the killed serve's journal was rolled");
    assert_eq!(column(&records.join("part-000001.parquet"), "id").len(), 5);
    assert_eq!(chat(&served), "200");
    served.stop();
    assert_eq!(column(&records.join("part-000002.parquet"), "id").len(), 1);
}

#[test]
fn records_serve_did_not_make_are_never_taken_for_its_own() {
    let setup = OneRoute::new("foreign");
    let records = setup.path("records");
    let served = setup.serve("records", &[]);
    assert_eq!(chat(&served), "200");
    served.stop();
    // A directory of someone's journals, and a link by a journal's name in
    // serve's own directory.
    let theirs = setup.path("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    let their_journal = theirs.join("part-000001.jsonl");
    std::fs::write(&their_journal, "{\"id\": \"mine\"}\n").unwrap();
    let outside = setup.path("outside.jsonl");
    std::fs::write(&outside, "{\"id\": \"keep\"}\n{\"id\": \"torn").unwrap();
    std::os::unix::fs::symlink(&outside, records.join("part-000009.jsonl")).unwrap();
    for (directory, says) in [
        (&theirs, "was not made by routeval serve"),
        (&records, "part-000009.jsonl"),
    ] {
        let refused = serve_command(
            &setup.config,
            &setup.pubkey(),
            &setup.router(),
            &setup.keys,
            directory,
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(&their_journal).unwrap(),
        "{\"id\": \"mine\"}\n"
    );
    assert_eq!(
        std::fs::read_dir(&theirs).unwrap().count(),
        1,
        "nothing written there"
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "{\"id\": \"keep\"}\n{\"id\": \"torn",
        "the link's target is untouched"
    );
    assert!(std::fs::symlink_metadata(records.join("part-000009.jsonl")).is_ok());
}

#[test]
fn the_gate_will_not_sign_a_predictive_candidate_whose_scorer_is_open() {
    let setup = OneRoute::new("unpinned");
    let report = setup.path("report");
    let output = gate_single(
        setup.pipeline,
        &setup.pipeline.path("unpinned.toml"),
        &report,
        None,
        false,
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let gate: routeval::schema::GateReport =
        serde_json::from_slice(&std::fs::read(report.join("gate-report.json")).unwrap()).unwrap();
    let failure = &gate.candidates[0].failures[0];
    assert_eq!(failure.rule, routeval::schema::Rule::Serving);
    assert!(failure.message.contains("--router"), "{}", failure.message);
    assert!(gate.emitted.is_none());
}
