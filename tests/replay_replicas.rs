//! `routeval replay replicas`: DOMAIN.md's worked example, the Mooncake
//! conversation trace against counts computed here independently, the
//! router's stale signals and lost index, calibration, and bad traces.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use routeval::schema::ReplayDocument;

use crate::common::data_dir;
use crate::common::{Random, routeval};

/// One request of a trace, as the test writes it.
#[derive(Debug, Clone)]
struct Line {
    timestamp: u64,
    input: u64,
    output: u64,
    blocks: Vec<u64>,
}

fn write_trace(path: &Path, lines: &[Line]) {
    let mut text = String::new();
    for line in lines {
        writeln!(
            text,
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": {:?}}}",
            line.timestamp, line.input, line.output, line.blocks
        )
        .unwrap();
    }
    std::fs::write(path, text).unwrap();
}

fn replay(trace: &Path, flags: &[&str]) -> ReplayDocument {
    let output = routeval()
        .args(["replay", "replicas", "--trace"])
        .arg(trace)
        .args(flags)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a replay document of the pinned schema")
}

fn policy<'a>(document: &'a ReplayDocument, name: &str) -> &'a routeval::schema::PolicyResult {
    document
        .policies
        .iter()
        .find(|policy| policy.name == name)
        .unwrap_or_else(|| panic!("no policy {name}"))
}

/// DOMAIN.md's support chat: 8 replicas, a 2,000-token system prompt, 4,000
/// tokens of history by turn five, 150 new tokens. Blocks of 50 tokens make
/// the example's token counts whole blocks. Every conversation's turn four
/// comes first, then the turn fives in a shuffled order.
fn support_chat(conversations: u64, seed: u64) -> (Vec<Line>, Vec<usize>) {
    let system: Vec<u64> = (1..=40).collect();
    let mut next_id = 1000;
    let mut fourth = Vec::new();
    for _ in 0..conversations {
        let mut blocks = system.clone();
        blocks.extend(next_id..next_id + 80);
        next_id += 80;
        fourth.push(blocks);
    }
    let mut order: Vec<usize> = (0..conversations as usize).collect();
    let mut random = Random::new(seed);
    for index in (1..order.len()).rev() {
        order.swap(index, (random.next_u64() % (index as u64 + 1)) as usize);
    }
    let mut lines = Vec::new();
    for blocks in &fourth {
        lines.push(Line {
            timestamp: lines.len() as u64 * 1000,
            input: 6000,
            output: 1,
            blocks: blocks.clone(),
        });
    }
    for &conversation in &order {
        let mut blocks = fourth[conversation].clone();
        blocks.extend(next_id..next_id + 3);
        next_id += 3;
        lines.push(Line {
            timestamp: lines.len() as u64 * 1000,
            input: 6150,
            output: 1,
            blocks,
        });
    }
    (lines, order)
}

#[test]
fn the_worked_example_prefills_24_times_less_with_cache_aware_routing() {
    let directory = tempfile::tempdir().unwrap();
    let conversations = 800u64;
    let (lines, order) = support_chat(conversations, 7);
    let (all, fourth) = (
        directory.path().join("all.jsonl"),
        directory.path().join("four.jsonl"),
    );
    write_trace(&all, &lines);
    write_trace(&fourth, &lines[..conversations as usize]);
    let flags = [
        "--replicas",
        "8",
        "--block-tokens",
        "50",
        "--policy",
        "round-robin",
        "--policy",
        "sglang",
    ];
    let (both, first) = (replay(&all, &flags), replay(&fourth, &flags));
    // Turn five's prefill: the whole replay less the turn fours, which are
    // replayed identically on their own.
    let turn_five = |name: &str| {
        (policy(&both, name).prefill_tokens - policy(&first, name).prefill_tokens) as f64
            / conversations as f64
    };
    // Round robin sends turn four of conversation c to replica c mod 8 and
    // the j-th turn five to replica j mod 8: it finds its history only when
    // those agree, and the system prompt everywhere.
    let home = order
        .iter()
        .enumerate()
        .filter(|&(position, &conversation)| position % 8 == conversation % 8)
        .count() as f64;
    let exact = 150.0 + 4000.0 * (1.0 - home / conversations as f64);
    assert_eq!(turn_five("round-robin"), exact);
    assert!(
        (turn_five("round-robin") - 3650.0).abs() < 0.03 * 3650.0,
        "round robin: {} tokens, DOMAIN.md expects about 3,650",
        turn_five("round-robin")
    );
    assert_eq!(turn_five("sglang"), 150.0);
    assert!(turn_five("round-robin") / turn_five("sglang") > 22.0);
    // Each replica's requests: round robin's in turn, and cache-aware's in
    // pairs, each conversation's turn five where its turn four went.
    let round_robin = policy(&both, "round-robin");
    assert_eq!(round_robin.replica_requests, vec![200; 8]);
    assert_eq!(round_robin.busiest_share, 0.125);
    let sglang = policy(&both, "sglang");
    assert_eq!(sglang.replica_requests.len(), 8);
    assert_eq!(sglang.replica_requests.iter().sum::<u64>(), 1600);
    assert!(
        sglang.replica_requests.iter().all(|count| count % 2 == 0),
        "{:?}",
        sglang.replica_requests
    );
    let busiest = *sglang.replica_requests.iter().max().unwrap();
    assert_eq!(sglang.busiest_share, busiest as f64 / 1600.0);
}

/// The Mooncake conversation trace's requests, for independent counts.
fn mooncake(directory: &Path) -> (PathBuf, Vec<(u64, Vec<u64>)>) {
    let path = directory.join("mooncake/conversation_trace.jsonl");
    let requests = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let blocks = value["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap())
                .collect();
            (value["input_length"].as_u64().unwrap(), blocks)
        })
        .collect();
    (path, requests)
}

/// Prompt tokens served from cache when request i goes to replica
/// `assign(i)` and every replica caches every block it has seen.
fn cached_tokens(
    requests: &[(u64, Vec<u64>)],
    replicas: usize,
    assign: impl Fn(usize) -> usize,
) -> u64 {
    let mut seen = vec![HashSet::new(); replicas];
    let mut cached = 0;
    for (index, (input, blocks)) in requests.iter().enumerate() {
        let cache = &mut seen[assign(index)];
        let hits = blocks
            .iter()
            .take_while(|block| cache.contains(*block))
            .count() as u64;
        cached += (hits * 512).min(*input);
        cache.extend(blocks.iter().copied());
    }
    cached
}

#[test]
fn on_the_mooncake_trace_cache_aware_routing_nears_the_ceiling_and_round_robin_keeps_a_third() {
    let Some(directory) = data_dir("replay_replicas::mooncake") else {
        return;
    };
    let (trace, requests) = mooncake(&directory);
    let document = replay(&trace, &["--replicas", "8"]);
    let prompt: u64 = requests.iter().map(|(input, _)| input).sum();
    assert_eq!(document.trace.requests, 12_031);
    assert_eq!(document.trace.prompt_tokens, prompt);

    let round_robin = policy(&document, "round-robin");
    assert_eq!(
        round_robin.cached_tokens,
        cached_tokens(&requests, 8, |index| index % 8)
    );
    let ceiling = cached_tokens(&requests, 1, |_| 0) as f64 / prompt as f64;
    assert_eq!(document.trace.ceiling_hit_rate, ceiling);

    let cache_aware = policy(&document, "sglang").hit_rate;
    assert!(
        cache_aware > ceiling - 0.05 && cache_aware <= ceiling,
        "cache-aware {cache_aware:.3} against the ceiling {ceiling:.3}"
    );
    let share = round_robin.hit_rate / ceiling;
    assert!(
        (0.25..0.45).contains(&share),
        "round robin keeps {share:.2} of the ceiling"
    );
    for result in &document.policies {
        assert!(
            result.hit_rate <= ceiling,
            "{} beats the ceiling",
            result.name
        );
        assert_eq!(result.requests, 12_031, "{}", result.name);
    }
}

/// Multi-turn conversations: a shared system block, then each turn extends
/// the conversation's previous prompt; arrivals about `gap_ms` apart.
fn conversations(requests: usize, gap_ms: u64, seed: u64) -> Vec<Line> {
    let mut random = Random::new(seed);
    let mut live: Vec<Vec<u64>> = Vec::new();
    let mut next_id = 1;
    let mut lines = Vec::new();
    let mut clock = 0;
    while lines.len() < requests {
        let blocks = if live.len() < 40 || random.unit() < 0.2 {
            live.push(vec![0]);
            live.len() - 1
        } else {
            (random.next_u64() % live.len() as u64) as usize
        };
        let conversation = &mut live[blocks];
        let new = 1 + random.next_u64() % 4;
        conversation.extend(next_id..next_id + new);
        next_id += new;
        clock += (random.unit() * 2.0 * gap_ms as f64) as u64;
        lines.push(Line {
            timestamp: clock,
            input: conversation.len() as u64 * 512 - 100,
            output: 50 + random.next_u64() % 400,
            blocks: conversation.clone(),
        });
    }
    lines
}

#[test]
fn a_router_that_counts_its_own_dispatches_does_not_pile_onto_a_stale_idle_replica() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &conversations(3000, 60, 1));
    let document = replay(
        &trace,
        &[
            "--replicas",
            "8",
            "--scrape-ms",
            "2000",
            "--policy",
            "least-load",
            "--policy",
            "least-load:count-dispatched=true",
        ],
    );
    let (stale, counted) = (
        policy(&document, "least-load"),
        policy(&document, "least-load:count-dispatched=true"),
    );
    assert!(
        stale.herding_s > 2.0 * counted.herding_s && stale.ttft_ms.p95 > counted.ttft_ms.p95,
        "stale: {} s herding, p95 {} ms; counted: {} s, {} ms",
        stale.herding_s,
        stale.ttft_ms.p95,
        counted.herding_s,
        counted.ttft_ms.p95
    );
}

#[test]
fn a_lost_index_falls_back_to_least_load_and_recovers() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    let lines = conversations(6000, 100, 2);
    write_trace(&trace, &lines);
    let flags = ["--replicas", "8", "--policy", "sglang", "--window", "60s"];
    let intact = replay(&trace, &flags);
    let mut lost_flags = flags.to_vec();
    lost_flags.extend(["--index-loss-at", "300s"]);
    let lost = replay(&trace, &lost_flags);
    let (intact, lost) = (policy(&intact, "sglang"), policy(&lost, "sglang"));
    assert_eq!(
        intact.windows[..5],
        lost.windows[..5],
        "nothing changes before the loss"
    );
    assert!(
        lost.windows[5].hit_rate < intact.windows[5].hit_rate - 0.1,
        "the window of the loss: {} against {}",
        lost.windows[5].hit_rate,
        intact.windows[5].hit_rate
    );
    let last = lost.windows.len() - 2;
    assert!(
        lost.windows[last].hit_rate > intact.windows[last].hit_rate - 0.05,
        "recovered by the end: {} against {}",
        lost.windows[last].hit_rate,
        intact.windows[last].hit_rate
    );
}

#[test]
fn an_index_that_outlives_the_engine_cache_counts_affinity_misses() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &conversations(2000, 100, 3));
    let unbounded = replay(&trace, &["--replicas", "4", "--policy", "sglang"]);
    let bounded = replay(
        &trace,
        &[
            "--replicas",
            "4",
            "--cache-blocks",
            "200",
            "--policy",
            "sglang",
        ],
    );
    assert_eq!(policy(&unbounded, "sglang").index_drift_misses, 0);
    assert!(policy(&bounded, "sglang").index_drift_misses > 0);
    assert!(policy(&bounded, "sglang").hit_rate < policy(&unbounded, "sglang").hit_rate);
}

#[test]
fn csv_and_parquet_traces_replay_as_their_json_lines() {
    let directory = tempfile::tempdir().unwrap();
    let lines = conversations(500, 100, 4);
    let jsonl = directory.path().join("trace.jsonl");
    write_trace(&jsonl, &lines);
    let csv = directory.path().join("trace.csv");
    let mut text = String::from("timestamp,input_length,output_length,hash_ids\n");
    for line in &lines {
        let ids: Vec<String> = line.blocks.iter().map(u64::to_string).collect();
        writeln!(
            text,
            "{},{},{},{}",
            line.timestamp,
            line.input,
            line.output,
            ids.join(" ")
        )
        .unwrap();
    }
    std::fs::write(&csv, text).unwrap();
    let parquet = directory.path().join("trace.parquet");
    write_parquet_trace(&parquet, &lines);
    let flags = [
        "--replicas",
        "4",
        "--policy",
        "sglang",
        "--policy",
        "round-robin",
    ];
    let expected = replay(&jsonl, &flags);
    for other in [&csv, &parquet] {
        let mut document = replay(other, &flags);
        document.trace.path = expected.trace.path.clone();
        assert_eq!(document, expected, "{}", other.display());
    }
}

fn write_parquet_trace(path: &Path, lines: &[Line]) {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, ListBuilder, UInt64Builder};
    use arrow::record_batch::RecordBatch;

    let column = |values: Vec<i64>| Arc::new(Int64Array::from(values)) as ArrayRef;
    let mut ids = ListBuilder::new(UInt64Builder::new());
    for line in lines {
        ids.values().append_slice(&line.blocks);
        ids.append(true);
    }
    let batch = RecordBatch::try_from_iter([
        (
            "timestamp",
            column(lines.iter().map(|line| line.timestamp as i64).collect()),
        ),
        (
            "input_length",
            column(lines.iter().map(|line| line.input as i64).collect()),
        ),
        (
            "output_length",
            column(lines.iter().map(|line| line.output as i64).collect()),
        ),
        ("hash_ids", Arc::new(ids.finish()) as ArrayRef),
    ])
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

#[test]
fn calibration_searches_the_first_half_and_checks_the_second() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &conversations(3000, 40, 5));
    let out = directory.path().join("replay.json");
    let output = routeval()
        .args([
            "replay",
            "replicas",
            "--replicas",
            "4",
            "--calibrate",
            "--trace",
        ])
        .arg(&trace)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let written = std::fs::read_to_string(&out).unwrap();
    let document: ReplayDocument = serde_json::from_str(&written).unwrap();
    // A version 2 document, written before the flags named their router,
    // still reads: its flags were SGLang router flags.
    let mut older: serde_json::Value = serde_json::from_str(&written).unwrap();
    older["schema_version"] = serde_json::json!(2);
    let calibration_object = older["calibration"].as_object_mut().unwrap();
    calibration_object.remove("router").unwrap();
    let flags = calibration_object.remove("router_flags").unwrap();
    calibration_object.insert("sglang_flags".to_owned(), flags.clone());
    let read: ReplayDocument = serde_json::from_value(older).unwrap();
    let read = read.calibration.unwrap();
    assert_eq!(
        (read.router.as_str(), &read.router_flags),
        ("sglang", &flags.as_str().unwrap().to_owned())
    );
    let calibration = document.calibration.expect("a calibration");
    assert_eq!(
        (calibration.train_requests, calibration.holdout_requests),
        (1500, 1500)
    );
    assert_eq!(calibration.grid.points, 2 * (125 + 124));
    let chosen = &calibration.cache_aware;
    // The chosen point is the best of the grid on the first half: no
    // baseline that is also a grid point can beat it there.
    let sglang = calibration
        .baselines
        .iter()
        .find(|baseline| baseline.name == "sglang")
        .expect("SGLang's defaults are always a baseline");
    assert!(chosen.policy.train.objective <= sglang.train.objective);
    assert!(chosen.best_on_holdout.holdout.objective <= chosen.policy.holdout.objective);
    // It must hold against SGLang's defaults and the fixed policies; the
    // scorer is another family, shown beside it.
    let beaten = calibration
        .baselines
        .iter()
        .filter(|baseline| {
            !baseline.name.starts_with("scorer") && !baseline.name.starts_with("cache-aware")
        })
        .any(|baseline| baseline.holdout.objective < chosen.policy.holdout.objective);
    assert_eq!(chosen.wins_on_holdout, !beaten);
    assert!(
        calibration
            .baselines
            .iter()
            .any(|baseline| baseline.name == "scorer")
    );
    // What a router is handed is the choice only when it held; else the
    // preset it did not beat.
    let handed = if chosen.wins_on_holdout {
        &chosen.policy
    } else {
        sglang
    };
    let param = |key: &str| handed.params[key].as_f64().unwrap();
    let flags = format!(
        "--cache-threshold {} --balance-abs-threshold {} --balance-rel-threshold {}",
        param("cache_threshold"),
        param("abs_gap"),
        param("rel_gap")
    );
    assert_eq!(calibration.router_flags, flags);
    assert_eq!(calibration.router, "sglang");
    assert!(
        stdout.contains(&format!("flags for sglang: {flags}")),
        "{stdout}"
    );
    assert!(stdout.contains("kind: EndpointPickerConfig"), "{stdout}");
    // The picker gets the chosen weights only when they held, else the
    // preset's 3/2/2.
    let scorer = &calibration.scorer;
    let weight = |key: &str| {
        if scorer.wins_on_holdout {
            scorer.policy.params[key].as_f64().unwrap()
        } else {
            [
                ("prefix_weight", 3.0),
                ("queue_weight", 2.0),
                ("kv_weight", 2.0),
            ]
            .into_iter()
            .find(|(name, _)| *name == key)
            .unwrap()
            .1
        }
    };
    for (plugin, key) in [
        ("prefix-cache-scorer", "prefix_weight"),
        ("queue-scorer", "queue_weight"),
        ("kv-cache-utilization-scorer", "kv_weight"),
    ] {
        let line = format!("pluginRef: {plugin}\n    weight: {:?}\n", weight(key));
        assert_eq!(
            calibration.endpoint_picker.contains(&line),
            weight(key) > 0.0,
            "{line}{}",
            calibration.endpoint_picker
        );
    }
    the_picker_config_is_valid(&calibration.endpoint_picker, directory.path());
}

/// `yaml` validates against the llm-d router's `EndpointPickerConfig`
/// schema (transcribed in tests/fixtures with its source), each
/// `pluginRef` names a plugin, each plugin is of a type the router knows,
/// and each weight is a float.
fn the_picker_config_is_valid(yaml: &str, directory: &Path) {
    let Some(python) = crate::common::test_python("the endpoint-picker schema check") else {
        return;
    };
    let config = directory.join("endpoint-picker.yaml");
    std::fs::write(&config, yaml).unwrap();
    let schema = crate::common::repo().join("tests/fixtures/endpoint-picker-config.schema.json");
    let script = format!(
        r#"
import json, yaml, jsonschema
schema = json.load(open({schema:?}))
config = yaml.safe_load(open({config:?}))
jsonschema.Draft202012Validator(schema).validate(config)
names = {{plugin.get("name", plugin["type"]) for plugin in config["plugins"]}}
for plugin in config["plugins"]:
    assert plugin["type"] in schema["x-known-plugin-types"], plugin
for profile in config["schedulingProfiles"]:
    for entry in profile["plugins"]:
        assert entry["pluginRef"] in names, entry
        if "weight" in entry:
            assert isinstance(entry["weight"], float), entry
print("valid")
"#,
        schema = schema.display().to_string(),
        config = config.display().to_string(),
    );
    assert_eq!(crate::common::run_python(&python, &script).trim(), "valid");
}

#[test]
fn bad_traces_get_one_line_exit_2_and_no_output() {
    let directory = tempfile::tempdir().unwrap();
    let good = r#"{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}"#;
    let cases: [(&str, String, &str); 6] = [
        (
            "missing.jsonl",
            format!("{good}\n{{\"timestamp\": 5, \"output_length\": 3, \"hash_ids\": [1]}}\n"),
            "line 2, field \"input_length\": missing",
        ),
        (
            "negative.jsonl",
            format!(
                "{good}\n{{\"timestamp\": 5, \"input_length\": -4, \"output_length\": 3, \"hash_ids\": [1]}}\n"
            ),
            "line 2, field \"input_length\": -4 is negative",
        ),
        (
            "unsorted.jsonl",
            format!(
                "{{\"timestamp\": 9, \"input_length\": 4, \"output_length\": 3, \"hash_ids\": [1]}}\n{good}\n"
            ),
            "line 2, field \"timestamp\": 0 comes before the previous request's 9",
        ),
        ("empty.jsonl", String::new(), "the trace has no requests"),
        (
            "ids.csv",
            "timestamp,input_length,output_length,hash_ids\n0,5,5,1 x\n".to_owned(),
            "line 2, field \"hash_ids\": \"x\" is not a block id",
        ),
        (
            "zero.jsonl",
            format!("{good}\n"),
            "--replicas: must be at least 1",
        ),
    ];
    for (name, text, expected) in cases {
        let trace = directory.path().join(name);
        std::fs::write(&trace, text).unwrap();
        let out = directory.path().join(format!("{name}.json"));
        let replicas = if name == "zero.jsonl" { "0" } else { "4" };
        let output = routeval()
            .args(["replay", "replicas", "--replicas", replicas, "--trace"])
            .arg(&trace)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        if name != "zero.jsonl" && name != "empty.jsonl" {
            assert!(
                stderr.contains(trace.to_str().unwrap()),
                "{name} names the file: {stderr}"
            );
        }
        assert!(!out.exists(), "{name}: nothing written");
    }
}

#[test]
fn a_run_replays_with_its_prompts_cut_into_blocks() {
    use crate::common::{Tuning, base_url, run_command, start_sim, write_config};

    let directory = tempfile::tempdir().unwrap();
    let dataset = directory.path().join("prompts.jsonl");
    let system = "You are the support assistant of an online shop. ".repeat(100);
    let lines: Vec<String> = (0..40)
        .map(|index| {
            serde_json::json!({
                "id": format!("q{index}"),
                "slice": "support",
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": format!("Where is order {index}?")},
                ],
                "reference": "shipped",
                "rubric": "exact",
            })
            .to_string()
        })
        .collect();
    std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
    let sim = start_sim(&dataset, routeval::upstream_sim::SimSettings::default());
    let tuning = Tuning {
        verifier: false,
        ..Tuning::default()
    };
    let config = write_config(directory.path(), &base_url(&sim), &tuning);
    let run = directory.path().join("run");
    run_command(&config, &dataset, &run, &directory.path().join("cache"))
        .assert()
        .success();
    let replay_run = |extra: &[&str]| {
        routeval()
            .args([
                "replay",
                "replicas",
                "--replicas",
                "4",
                "--json",
                "--from-run",
            ])
            .arg(&run)
            .args(extra)
            .output()
            .unwrap()
    };
    let output = replay_run(&["--policy", "round-robin", "--policy", "sglang"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let document: ReplayDocument = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document.trace.requests, 40);
    // The 5,000-character system prompt is two whole 2,048-character
    // blocks: every replica serves them from cache after its first request.
    for result in &document.policies {
        assert!(
            result.hit_rate > 0.6,
            "{}: {}",
            result.name,
            result.hit_rate
        );
        assert!(result.cached_tokens >= (40 - 4) * 1024, "{}", result.name);
    }
    let again: ReplayDocument = serde_json::from_slice(
        &replay_run(&["--policy", "round-robin", "--policy", "sglang"]).stdout,
    )
    .unwrap();
    assert_eq!(again, document, "a seed gives the same replay");

    std::fs::write(&dataset, lines[..10].join("\n") + "\n").unwrap();
    let changed = replay_run(&[]);
    assert_eq!(changed.status.code(), Some(2));
    let stderr = String::from_utf8(changed.stderr).unwrap();
    assert!(
        stderr.contains("the dataset changed since the run"),
        "{stderr}"
    );
}

#[test]
fn the_report_charts_a_replay_alone_or_beside_graded_results() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &conversations(2000, 100, 6));
    let document = directory.path().join("replay.json");
    routeval()
        .args([
            "replay",
            "replicas",
            "--replicas",
            "4",
            "--index-loss-at",
            "100s",
            "--trace",
        ])
        .arg(&trace)
        .arg("--out")
        .arg(&document)
        .assert()
        .success();
    let alone = directory.path().join("alone");
    routeval()
        .args(["report", "--title", "pool <check>", "--replay"])
        .arg(&document)
        .arg("--out")
        .arg(&alone)
        .assert()
        .success();
    let html = std::fs::read_to_string(alone.join("report.html")).unwrap();
    let replayed: ReplayDocument =
        serde_json::from_str(&std::fs::read_to_string(&document).unwrap()).unwrap();
    assert!(
        html.contains("<h1>pool &lt;check&gt;</h1>"),
        "the title is escaped"
    );
    assert!(html.contains("Hit rate over time"));
    assert!(html.contains("lost its prefix index"));
    for policy in &replayed.policies {
        assert!(
            html.contains(&format!("<td>{}</td>", policy.name)),
            "{}",
            policy.name
        );
    }
    let summary = std::fs::read_to_string(alone.join("summary.md")).unwrap();
    let rows = summary
        .lines()
        .filter(|line| line.starts_with("| "))
        .count();
    assert_eq!(rows, 1 + replayed.policies.len(), "{summary}");

    let both = directory.path().join("both");
    routeval()
        .args(["report", "--results"])
        .arg(crate::common::example_results())
        .arg("--replay")
        .arg(&document)
        .arg("--out")
        .arg(&both)
        .assert()
        .success();
    let html = std::fs::read_to_string(both.join("report.html")).unwrap();
    assert!(html.contains("Replica routing: replay of"));
    assert!(html.contains("Graded results"));

    let refused = routeval()
        .args(["report", "--gate", "g.json", "--replay"])
        .arg(&document)
        .arg("--out")
        .arg(directory.path().join("refused"))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("give --results too"), "{stderr}");
    assert!(!directory.path().join("refused").exists());
}

#[test]
fn the_load_guard_stops_a_popular_prefix_from_herding_onto_one_replica() {
    // Most requests ask about one long document (20 shared blocks and one of
    // their own); the rest are unrelated. The pool has room for all of them,
    // one replica does not.
    let mut random = Random::new(8);
    let mut next_id = 100;
    let lines: Vec<Line> = (0..3000)
        .map(|index| {
            let mut blocks: Vec<u64> = if random.unit() < 0.8 {
                (1..=20).collect()
            } else {
                let start = next_id;
                next_id += 20;
                (start..start + 20).collect()
            };
            blocks.push(next_id);
            next_id += 1;
            Line {
                timestamp: index * 50,
                input: 21 * 512,
                output: 300,
                blocks,
            }
        })
        .collect();
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &lines);
    let document = replay(
        &trace,
        &[
            "--replicas",
            "4",
            "--max-batch",
            "64",
            "--prefill-tokens-per-s",
            "40000",
            "--policy",
            "cache-aware:abs-gap=inf",
            "--policy",
            "cache-aware:abs-gap=4,rel-gap=1.5",
        ],
    );
    let (unguarded, guarded) = (
        policy(&document, "cache-aware:abs-gap=inf"),
        policy(&document, "cache-aware:abs-gap=4,rel-gap=1.5"),
    );
    assert!(
        unguarded.herding_s > 2.0 * guarded.herding_s,
        "herding: {} s unguarded, {} s guarded",
        unguarded.herding_s,
        guarded.herding_s
    );
    assert!(
        unguarded.ttft_ms.p95 > 2.0 * guarded.ttft_ms.p95,
        "p95 TTFT: {} ms unguarded, {} ms guarded",
        unguarded.ttft_ms.p95,
        guarded.ttft_ms.p95
    );
    assert!(
        guarded.hit_rate < unguarded.hit_rate,
        "the guard pays in cache hits"
    );
}

#[test]
fn docs_schema_names_every_field_of_the_replay_document() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &conversations(200, 100, 9));
    let output = routeval()
        .args([
            "replay",
            "replicas",
            "--replicas",
            "2",
            "--calibrate",
            "--json",
            "--trace",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = docs
        .split("## replay.json")
        .nth(1)
        .expect("docs/schema.md documents replay.json");
    let mut missing = Vec::new();
    let mut visit = |object: &serde_json::Value| {
        for key in crate::common::keys(object) {
            if !section.contains(&format!("`{key}`"))
                && !section.contains(&format!("{key},"))
                && !section.contains(&format!("{{{key}"))
                && !section.contains(&format!("{key}}}"))
            {
                missing.push(key.to_owned());
            }
        }
    };
    let calibration = &document["calibration"];
    for object in [
        &document,
        &document["trace"],
        &document["pool"],
        &document["policies"][0],
        &document["policies"][0]["ttft_ms"],
        &document["policies"][0]["queue_ms"],
        &document["policies"][0]["windows"][0],
        calibration,
        &calibration["grid"],
        &calibration["cache_aware"],
        &calibration["cache_aware"]["policy"],
        &calibration["cache_aware"]["policy"]["train"],
    ] {
        visit(object);
    }
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");
}

#[test]
fn the_replay_never_writes_over_its_trace() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("trace.jsonl");
    write_trace(&trace, &conversations(50, 100, 10));
    let before = std::fs::read(&trace).unwrap();
    let output = routeval()
        .args(["replay", "replicas", "--replicas", "2", "--trace"])
        .arg(&trace)
        .arg("--out")
        .arg(directory.path().join(".").join("trace.jsonl"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is also an input (--trace)"), "{stderr}");
    assert_eq!(std::fs::read(&trace).unwrap(), before);
}

#[test]
fn a_parquet_trace_of_float_block_ids_or_text_lengths_is_refused_not_rounded() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Builder, Int64Array, ListBuilder, StringArray};
    use arrow::record_batch::RecordBatch;

    let directory = tempfile::tempdir().unwrap();
    let write = |name: &str, input: ArrayRef, ids: ArrayRef| {
        let path = directory.path().join(name);
        let batch = RecordBatch::try_from_iter([
            (
                "timestamp",
                Arc::new(Int64Array::from(vec![0, 10])) as ArrayRef,
            ),
            ("input_length", input),
            (
                "output_length",
                Arc::new(Int64Array::from(vec![5, 5])) as ArrayRef,
            ),
            ("hash_ids", ids),
        ])
        .unwrap();
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        path
    };
    let mut floats = ListBuilder::new(Float64Builder::new());
    for ids in [[1.7, 2.2], [1.0, 3.0]] {
        floats.values().append_slice(&ids);
        floats.append(true);
    }
    let float_ids = write(
        "float-ids.parquet",
        Arc::new(Int64Array::from(vec![600, 600])),
        Arc::new(floats.finish()),
    );
    let mut ints = ListBuilder::new(arrow::array::UInt64Builder::new());
    for ids in [[1u64, 2], [1, 3]] {
        ints.values().append_slice(&ids);
        ints.append(true);
    }
    let text_lengths = write(
        "text-lengths.parquet",
        Arc::new(StringArray::from(vec!["600", "long"])),
        Arc::new(ints.finish()),
    );
    for (trace, expected) in [
        (
            &float_ids,
            "row 1, field \"hash_ids\": a list of Float64, expected integers",
        ),
        (
            &text_lengths,
            "column \"input_length\" has type Utf8, expected a number",
        ),
    ] {
        let out = trace.with_extension("json");
        let output = routeval()
            .args(["replay", "replicas", "--replicas", "4", "--trace"])
            .arg(trace)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!out.exists());
    }
}

#[test]
fn memory_follows_the_requests_not_the_time_they_span() {
    let directory = tempfile::tempdir().unwrap();
    // Two requests three thousand years apart.
    let trace = directory.path().join("gap.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n\
         {\"timestamp\": 100000000000000, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 3]}\n",
    )
    .unwrap();
    for flags in [
        vec!["--replicas", "4", "--window", "1m"],
        vec!["--replicas", "4", "--window", "0.001ms"],
        vec!["--replicas", "4", "--speedup", "0.5"],
    ] {
        let document = replay(&trace, &flags);
        for policy in &document.policies {
            assert_eq!(
                policy.windows.len(),
                2,
                "{flags:?}: {}",
                policy.windows.len()
            );
            assert_eq!(
                policy
                    .windows
                    .iter()
                    .map(|window| window.requests)
                    .sum::<u64>(),
                2
            );
        }
    }
    // Slowed so far that the simulation's clock cannot hold it: refused.
    routeval()
        .args([
            "replay",
            "replicas",
            "--replicas",
            "4",
            "--speedup",
            "1e-12",
            "--trace",
        ])
        .arg(&trace)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "more than 146,000 years into the replay",
        ));
}
