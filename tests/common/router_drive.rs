//! A real router (the SGLang router or the Shepherd Model Gateway, from
//! PyPI) driven by `tests/fixtures/router_drive.py` in front of fake workers
//! that serve each request as the replay's pool model does, and the replay
//! of the same trace on the same pool, so a test can set their hit rates
//! and busiest replicas' shares side by side.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{repo, routeval};

/// The pool both sides run: 4 replicas, Mooncake's 512-token blocks, and
/// the replay's default engine ten times faster, so a case takes seconds.
pub const REPLICAS: usize = 4;
pub const BLOCK_TOKENS: u32 = 512;
pub const DECODE_MS_PER_TOKEN: f64 = 2.0;

/// The engine's prefill rate: ten times the replay's default, or, where a
/// case sends one request at a time and timing cannot change a decision, a
/// hundred times, so many requests fit in seconds.
pub const PREFILL_TOKENS_PER_S: f64 = 100_000.0;
pub const FAST_PREFILL_TOKENS_PER_S: f64 = 1_000_000.0;

/// What one side did with a trace.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub hit_rate: f64,
    pub busiest_share: f64,
    pub replica_requests: Vec<u64>,
}

impl Outcome {
    /// The mean hit rate and busiest share of several outcomes, and the
    /// last one's requests per replica.
    pub fn mean(outcomes: &[Outcome]) -> Outcome {
        let count = outcomes.len() as f64;
        Outcome {
            hit_rate: outcomes.iter().map(|run| run.hit_rate).sum::<f64>() / count,
            busiest_share: outcomes.iter().map(|run| run.busiest_share).sum::<f64>() / count,
            replica_requests: outcomes
                .last()
                .expect("an outcome")
                .replica_requests
                .clone(),
        }
    }
}

/// One drive of a real router: `router` is `sglang-router` or `smg`.
pub struct Drive<'a> {
    pub python: &'a std::ffi::OsStr,
    pub router: &'a str,
    pub mode: &'a str,
    pub prefill_tokens_per_s: f64,
    pub flags: &'a [&'a str],
}

impl Drive<'_> {
    /// The real router's outcome on `trace`; the driver is killed, and the
    /// router with it, if it runs past `deadline`.
    pub fn run(&self, trace: &Path, deadline: Instant) -> Outcome {
        let mut child = Command::new(self.python)
            .arg(repo().join("tests/fixtures/router_drive.py"))
            .arg(self.router)
            .arg(trace)
            .arg(REPLICAS.to_string())
            .arg(self.mode)
            .arg(BLOCK_TOKENS.to_string())
            .arg(self.prefill_tokens_per_s.to_string())
            .arg(DECODE_MS_PER_TOKEN.to_string())
            .args(self.flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The driver stops the router it started however it ends, and the
        // kernel kills the router when the driver dies (PR_SET_PDEATHSIG),
        // so a driver that hangs is killed here with its router.
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("the {} drives ran past their deadline", self.router);
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
        let replica_requests = counts(&seen["replica_requests"]);
        let total: u64 = replica_requests.iter().sum();
        Outcome {
            hit_rate: seen["cached_tokens"].as_f64().unwrap()
                / seen["prompt_tokens"].as_f64().unwrap(),
            busiest_share: *replica_requests.iter().max().unwrap() as f64 / total as f64,
            replica_requests,
        }
    }
}

fn counts(array: &Value) -> Vec<u64> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .collect()
}

/// `routeval replay replicas --json` of `trace` on the pool, with `extra`.
pub fn replay_document(trace: &Path, prefill_tokens_per_s: f64, extra: &[&str]) -> Value {
    let output = routeval()
        .args(["replay", "replicas", "--json", "--trace"])
        .arg(trace)
        .args(["--replicas", &REPLICAS.to_string()])
        .args(["--block-tokens", &BLOCK_TOKENS.to_string()])
        .args(["--prefill-tokens-per-s", &prefill_tokens_per_s.to_string()])
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

/// The replay of `trace` under `policy`, on the same pool, with `--seed`.
pub fn replay(trace: &Path, prefill_tokens_per_s: f64, policy: &str, seed: u64) -> Outcome {
    let document = replay_document(
        trace,
        prefill_tokens_per_s,
        &["--policy", policy, "--seed", &seed.to_string()],
    );
    let result = &document["policies"][0];
    Outcome {
        hit_rate: result["hit_rate"].as_f64().unwrap(),
        busiest_share: result["busiest_share"].as_f64().unwrap(),
        replica_requests: counts(&result["replica_requests"]),
    }
}

pub fn write_trace(path: &Path, rows: &[Value]) {
    let mut file = std::fs::File::create(path).unwrap();
    for row in rows {
        writeln!(file, "{row}").unwrap();
    }
}

/// The first `count` rows of Mooncake's conversation trace, one every
/// `spacing_ms`: distinct arrival times, so the order in which requests
/// reach the router is the trace's.
pub fn conversation_rows(data: &Path, count: usize, spacing_ms: u64) -> Vec<Value> {
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

/// Rows answered with one output token each, so a case sent one request at
/// a time takes seconds, not minutes.
pub fn one_token_each(rows: Vec<Value>) -> Vec<Value> {
    rows.into_iter()
        .map(|mut row| {
            row["output_length"] = json!(1);
            row
        })
        .collect()
}

/// 300 requests, one every 20 ms: four in five open with the same 20-block
/// document and add 4 blocks of their own, the rest share nothing.
pub fn hot_document_rows() -> Vec<Value> {
    let mut random = super::Random::new(5);
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

/// Whether two outcomes agree as the releases' table in docs/replay.md
/// promises: hit rates within 0.005, busiest shares within 0.03.
pub fn agree(real: &Outcome, replayed: &Outcome) -> bool {
    (real.hit_rate - replayed.hit_rate).abs() <= 0.005
        && (real.busiest_share - replayed.busiest_share).abs() <= 0.03
}

/// What `replay replicas --calibrate --for RELEASE` hands `router`
/// contains `expected` and starts it: the driver fails when the launcher
/// exits on a flag it does not take.
pub fn calibrated_flags_start(
    python: &std::ffi::OsStr,
    router: &str,
    (release, expected): (&str, &[&str]),
    data: &Path,
    directory: &Path,
    deadline: Instant,
) {
    let trace = directory.join("calibrate.jsonl");
    write_trace(&trace, &conversation_rows(data, 200, 70));
    let document = replay_document(
        &trace,
        PREFILL_TOKENS_PER_S,
        &["--calibrate", "--for", release],
    );
    assert_eq!(document["calibration"]["router"], release);
    let flags = document["calibration"]["router_flags"].as_str().unwrap();
    for flag in expected {
        assert!(flags.contains(flag), "{flags}");
    }
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let short = directory.join("short.jsonl");
    write_trace(&short, &conversation_rows(data, 5, 10_000));
    let started = Drive {
        python,
        router,
        mode: "one-at-a-time",
        prefill_tokens_per_s: PREFILL_TOKENS_PER_S,
        flags: &flags,
    }
    .run(&short, deadline);
    assert_eq!(started.replica_requests.iter().sum::<u64>(), 5);
}
