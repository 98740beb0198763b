//! `replay replicas --policy sglang@0.3` against the real SGLang router
//! (PyPI `sglang-router` 0.3.2, which `.ci/run` installs) in front of fake
//! workers on loopback that serve each request as the replay's pool model
//! does: the replay's cache hit rate and busiest replica's share agree with
//! what the router did, under load, one request at a time (where every tie
//! goes to the router's first worker) and on a hot shared document with the
//! load guard engaged (where the router keeps naming one holder).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{data_dir, python_named_by, repo, routeval};

/// The pool both sides run: 4 replicas, Mooncake's 512-token blocks, and
/// the replay's default engine ten times faster, so a case takes seconds.
const REPLICAS: usize = 4;
const BLOCK_TOKENS: u32 = 512;
const PREFILL_TOKENS_PER_S: f64 = 100_000.0;
const DECODE_MS_PER_TOKEN: f64 = 2.0;

#[derive(Debug)]
struct Outcome {
    hit_rate: f64,
    busiest_share: f64,
    replica_requests: Vec<u64>,
}

/// The real router's outcome on `trace`, driven by `mode`, with `flags`;
/// the driver is killed, and the router with it, if it runs past
/// `deadline`.
fn real_router(
    python: &std::ffi::OsStr,
    trace: &Path,
    mode: &str,
    flags: &[&str],
    deadline: Instant,
) -> Outcome {
    let mut child = Command::new(python)
        .arg(repo().join("tests/fixtures/sglang_router_drive.py"))
        .arg(trace)
        .arg(REPLICAS.to_string())
        .arg(mode)
        .arg(BLOCK_TOKENS.to_string())
        .arg(PREFILL_TOKENS_PER_S.to_string())
        .arg(DECODE_MS_PER_TOKEN.to_string())
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The driver stops the router it started however it ends, and the
    // kernel kills the router when the driver dies (PR_SET_PDEATHSIG), so
    // a driver that hangs is killed here with its router.
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the SGLang router drives ran past their 3 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    let replica_requests: Vec<u64> = seen["replica_requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .collect();
    let total: u64 = replica_requests.iter().sum();
    Outcome {
        hit_rate: seen["cached_tokens"].as_f64().unwrap() / seen["prompt_tokens"].as_f64().unwrap(),
        busiest_share: *replica_requests.iter().max().unwrap() as f64 / total as f64,
        replica_requests,
    }
}

/// `routeval replay replicas --json` of `trace` on the pool, with `extra`.
fn replay_document(trace: &Path, extra: &[&str]) -> Value {
    let output = routeval()
        .args(["replay", "replicas", "--json", "--trace"])
        .arg(trace)
        .args(["--replicas", &REPLICAS.to_string()])
        .args(["--block-tokens", &BLOCK_TOKENS.to_string()])
        .args(["--prefill-tokens-per-s", &PREFILL_TOKENS_PER_S.to_string()])
        .args(["--decode-ms-per-token", &DECODE_MS_PER_TOKEN.to_string()])
        // The fake workers batch without bound and the router's tree
        // forgets nothing in a case this short.
        .args(["--max-batch", "1000000", "--index-history", "1000000"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The replay of `trace` under `policy`, on the same pool.
fn replay(trace: &Path, policy: &str) -> Outcome {
    let document = replay_document(trace, &["--policy", policy]);
    let result = &document["policies"][0];
    Outcome {
        hit_rate: result["hit_rate"].as_f64().unwrap(),
        busiest_share: result["busiest_share"].as_f64().unwrap(),
        replica_requests: result["replica_requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|count| count.as_u64().unwrap())
            .collect(),
    }
}

fn write_trace(path: &Path, rows: &[Value]) {
    let mut file = std::fs::File::create(path).unwrap();
    for row in rows {
        writeln!(file, "{row}").unwrap();
    }
}

/// The first `count` rows of Mooncake's conversation trace, one every
/// `spacing_ms`: distinct arrival times, so the order in which requests
/// reach the router is the trace's.
fn conversation_rows(data: &Path, count: usize, spacing_ms: u64) -> Vec<Value> {
    std::fs::read_to_string(data.join("mooncake/conversation_trace.jsonl"))
        .unwrap()
        .lines()
        .take(count)
        .enumerate()
        .map(|(index, line)| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            row["timestamp"] = json!(index as u64 * spacing_ms);
            row
        })
        .collect()
}

/// 300 requests, one every 20 ms: four in five open with the same 20-block
/// document and add 4 blocks of their own, the rest share nothing.
fn hot_document_rows() -> Vec<Value> {
    let mut random = crate::common::Random::new(5);
    let mut next_block = 1_000u64;
    (0..300u64)
        .map(|index| {
            let hot = random.unit() < 0.8;
            let own = if hot { 4 } else { 24 };
            let mut blocks: Vec<u64> = if hot { (0..20).collect() } else { vec![] };
            blocks.extend(next_block..next_block + own);
            next_block += own;
            json!({
                "timestamp": index * 20,
                "input_length": blocks.len() as u64 * u64::from(BLOCK_TOKENS),
                "output_length": 300,
                "hash_ids": blocks,
            })
        })
        .collect()
}

/// One comparison: its rows, how they are sent (`load` or
/// `one-at-a-time`), the router's flags, the release's policy, and
/// routeval's own cache-aware variant at the same settings, to show where
/// the two differ.
struct Case {
    name: &'static str,
    /// Runs of the real router, averaged: under load its own timing moves
    /// its busiest share from run to run (0.308 to 0.347 in eight single
    /// runs of the first case, mean 0.339, where the replay gives 0.330),
    /// and the replay answers for its mean.
    runs: usize,
    rows: Vec<Value>,
    mode: &'static str,
    flags: &'static [&'static str],
    policy: &'static str,
    own: &'static str,
}

#[test]
fn the_replay_reproduces_the_real_sglang_router() {
    let Some(data) = data_dir("the real SGLang router's replay") else {
        return;
    };
    let Some(python) = python_named_by(
        "ROUTEVAL_TEST_SGLANG_PYTHON",
        "the real SGLang router's replay",
    ) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    let directory = tempfile::tempdir().unwrap();
    let cases = [
        Case {
            name: "under load, 0.3.2's defaults",
            runs: 4,
            rows: conversation_rows(&data, 600, 22),
            mode: "load",
            flags: &[],
            policy: "sglang@0.3",
            own: "cache-aware:threshold=0.3,abs-gap=64",
        },
        Case {
            name: "one request at a time",
            runs: 1,
            // One output token each, so the case takes seconds, not minutes.
            rows: conversation_rows(&data, 80, 10_000)
                .into_iter()
                .map(|mut row| {
                    row["output_length"] = json!(1);
                    row
                })
                .collect(),
            mode: "one-at-a-time",
            flags: &[],
            policy: "sglang@0.3",
            own: "cache-aware:threshold=0.3,abs-gap=64",
        },
        Case {
            name: "a hot document, the load guard at 16",
            runs: 1,
            rows: hot_document_rows(),
            mode: "load",
            flags: &["--balance-abs-threshold", "16"],
            policy: "sglang@0.3:abs-gap=16",
            own: "cache-aware:threshold=0.3,abs-gap=16",
        },
    ];
    let mut failures = Vec::new();
    for Case {
        name: case,
        runs,
        rows,
        mode,
        flags,
        policy,
        own,
    } in cases
    {
        let trace = directory
            .path()
            .join(format!("{}.jsonl", case.replace(' ', "-")));
        write_trace(&trace, &rows);
        let each: Vec<Outcome> = (0..runs)
            .map(|_| real_router(&python, &trace, mode, flags, deadline))
            .collect();
        let real = Outcome {
            hit_rate: each.iter().map(|run| run.hit_rate).sum::<f64>() / runs as f64,
            busiest_share: each.iter().map(|run| run.busiest_share).sum::<f64>() / runs as f64,
            replica_requests: each.into_iter().last().expect("a run").replica_requests,
        };
        let replayed = replay(&trace, policy);
        let own = replay(&trace, own);
        eprintln!(
            "{case}: router hit rate {:.4}, busiest {:.3} (last run {:?}); replay {:.4}, {:.3} {:?}; cache-aware {:.4}, {:.3}",
            real.hit_rate,
            real.busiest_share,
            real.replica_requests,
            replayed.hit_rate,
            replayed.busiest_share,
            replayed.replica_requests,
            own.hit_rate,
            own.busiest_share,
        );
        if (real.hit_rate - replayed.hit_rate).abs() > 0.005
            || (real.busiest_share - replayed.busiest_share).abs() > 0.03
        {
            failures.push((case, real, replayed));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // What `--calibrate --for sglang@0.3` hands the router starts it: the
    // driver fails when the router exits on a flag it does not take.
    let trace = directory.path().join("calibrate.jsonl");
    write_trace(&trace, &conversation_rows(&data, 200, 70));
    let document = replay_document(&trace, &["--calibrate", "--for", "sglang@0.3"]);
    let flags = document["calibration"]["sglang_flags"].as_str().unwrap();
    for flag in [
        "--policy cache_aware",
        "--cache-threshold",
        "--balance-abs-threshold",
        "--balance-rel-threshold",
        "--eviction-interval-secs 60",
        "--max-tree-size 67108864",
    ] {
        assert!(flags.contains(flag), "{flags}");
    }
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let short = directory.path().join("short.jsonl");
    write_trace(&short, &conversation_rows(&data, 5, 10_000));
    let started = real_router(&python, &short, "one-at-a-time", &flags, deadline);
    assert_eq!(started.replica_requests.iter().sum::<u64>(), 5);
}
