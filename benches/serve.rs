//! The latency `routeval serve` adds to a request, with the built-in router
//! scoring every one, against calling serve-sim directly; the same for the
//! LiteLLM proxy in front of the same serve-sim, in the same run; and the
//! decision API's throughput on one core; and serve under twice the load
//! its admission bound lets in.
//!
//! Open loop: requests leave on a fixed schedule at each offered load
//! (`ROUTEVAL_BENCH_LOADS`, default 500,2000,5000 requests per second) for
//! `ROUTEVAL_BENCH_SECONDS` (default 3), and each latency runs from the
//! moment the request was due, so a server that falls behind is charged for
//! the queue it builds. serve-sim answers at once (no simulated latency),
//! so what is left is each hop's own cost. Direct calls and calls through
//! serve take turns, `ROUTEVAL_BENCH_ROUNDS` (default 3) rounds per load,
//! and the added latency is the median of the rounds' differences, so both
//! sides see the same machine. The resident memory of each server is read
//! after each load.
//!
//! The LiteLLM peer climbs `ROUTEVAL_BENCH_PEER_LOADS` (default
//! 10,25,50,...,2000) until it no longer keeps up. It runs when
//! `ROUTEVAL_BENCH_LITELLM` names its `litellm`
//! command (default `~/.cache/routeval/litellm-proxy-venv/bin/litellm`, from
//! `pip install 'litellm[proxy]'`); without it the peer is skipped, and said.
//!
//! One client at a time: `ROUTEVAL_BENCH_SEQUENTIAL` (default 2,000)
//! requests, each sent when the last was answered, direct and through
//! serve in turn for each round; the added latency at concurrency 1 is the
//! median of the rounds' p50 differences. CPU per proxied request: serve's
//! own CPU time (user and system, from `/proc/PID/stat`) over a load of
//! `ROUTEVAL_BENCH_CPU_LOAD` (default 1,000) requests per second, divided
//! by the requests it answered, beside serve-sim's for the same requests.
//!
//! Overload: serve in front of a serve-sim that holds every request 100 ms,
//! with `--max-in-flight 50`, admits about 500 requests per second. It is
//! offered half of that, then twice that (`ROUTEVAL_BENCH_OVERLOAD`,
//! default 250,1000), each for `ROUTEVAL_BENCH_SECONDS`: the admitted
//! requests' latency at both loads, how fast a refused one gets its 429,
//! and serve's memory after each.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The proxy's master key, which its clients send.
const LITELLM_KEY: &str = "sk-litellm-bench-0123456789abcdef";

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_routeval")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// A child server and the address its first stdout line names.
struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn start(command: &mut Command) -> Server {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches("/v1")
        .to_owned();
    Server { child, address }
}

/// Resident memory of `pid` and its children, MiB.
fn rss_mib(pid: u32) -> f64 {
    let mut pids = vec![pid];
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|pid| pid.parse::<u32>().ok()),
        );
    }
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .sum::<f64>()
        / 1024.0
}

/// The demo's pipeline, its predictive config gated with routes on `sim`.
fn signed_config(directory: &Path, sim: &str) -> (PathBuf, PathBuf, PathBuf) {
    let out = directory.join("demo");
    let status = Command::new(binary())
        .arg("demo")
        .arg("--data")
        .arg(repo().join("datasets/demo"))
        .arg("--rubrics")
        .arg(repo().join("rubrics"))
        .arg("--out")
        .arg(&out)
        .arg("--report")
        .arg(directory.join("report"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let table = directory.join("predictive.toml");
    std::fs::write(
        &table,
        std::fs::read_to_string(repo().join("datasets/demo/routes/predictive.toml"))
            .unwrap()
            .replace("http://127.0.0.1:8089/v1", &format!("http://{sim}/v1")),
    )
    .unwrap();
    let status = Command::new(binary())
        .args(["gate", "--target", "0.8", "--candidates"])
        .arg(&table)
        .arg("--results")
        .arg(out.join("graded-scored.parquet"))
        .arg("--calibration")
        .arg(out.join("calibration-predictive.json"))
        .arg("--router")
        .arg(out.join("router.bin"))
        .arg("--key")
        .arg(out.join("keys/demo.key"))
        .arg("--out")
        .arg(directory.join("gate"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    (
        directory.join("gate/route-config.v1.json"),
        out.join("keys/demo.key.pub"),
        out.join("router.bin"),
    )
}

fn prompts() -> Vec<(String, String)> {
    std::fs::read_to_string(repo().join("datasets/demo/prompts.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                row["slice"].as_str().unwrap().to_owned(),
                row["prompt"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A request unanswered this long counts as an error, so a server that
/// falls far behind does not carry its backlog into the next load.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The first failure a load met, printed once so a broken setup says why.
static FIRST_ERROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// What one load gave: latencies (ms, sorted), errors, achieved rate.
struct Load {
    latencies: Vec<f64>,
    errors: usize,
    achieved: f64,
}

impl Load {
    fn percentile(&self, p: f64) -> f64 {
        rank(&self.latencies, p)
    }
}

/// One target: where requests go, the model they name, and the key.
#[derive(Clone)]
struct Target {
    url: String,
    model: String,
    key: String,
}

/// How one request of an open loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Answered,
    /// A 429 with `Retry-After`.
    Refused,
    Failed,
}

/// A chat request for `target` of one prompt, in its slice.
fn chat_request(
    client: &reqwest::Client,
    target: &Target,
    (slice, prompt): &(String, String),
) -> reqwest::RequestBuilder {
    let body = serde_json::json!({
        "model": target.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 64,
        "seed": 7,
    });
    client
        .post(&target.url)
        .bearer_auth(&target.key)
        .header("x-routeval-slice", slice.as_str())
        .json(&body)
}

/// Open loop at `rate` for `seconds`: each request's outcome and its
/// latency from the moment it was due, ms.
fn open_loop(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    target: &Target,
    rate: f64,
    seconds: f64,
    prompts: &[(String, String)],
) -> Vec<(Outcome, f64)> {
    let total = (rate * seconds) as usize;
    let outcomes = Arc::new(Mutex::new(Vec::with_capacity(total)));
    runtime.block_on(async {
        let begin = tokio::time::Instant::now();
        let mut tasks = Vec::with_capacity(total);
        for index in 0..total {
            let due = begin + Duration::from_secs_f64(index as f64 / rate);
            tokio::time::sleep_until(due).await;
            let request = chat_request(client, target, &prompts[index % prompts.len()]);
            let outcomes = outcomes.clone();
            tasks.push(tokio::spawn(async move {
                let exchange = async {
                    match request.send().await {
                        Ok(response) if response.status().is_success() => {
                            if response.bytes().await.is_ok() {
                                Outcome::Answered
                            } else {
                                Outcome::Failed
                            }
                        }
                        Ok(response)
                            if response.status() == 429
                                && response.headers().contains_key("retry-after") =>
                        {
                            FIRST_ERROR.get_or_init(|| format!("status {}", response.status()));
                            Outcome::Refused
                        }
                        Ok(response) => {
                            FIRST_ERROR.get_or_init(|| format!("status {}", response.status()));
                            Outcome::Failed
                        }
                        Err(error) => {
                            FIRST_ERROR.get_or_init(|| format!("{error:?}"));
                            Outcome::Failed
                        }
                    }
                };
                let outcome = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
                    .await
                    .unwrap_or_else(|_| {
                        FIRST_ERROR.get_or_init(|| "a request timed out".to_owned());
                        Outcome::Failed
                    });
                outcomes
                    .lock()
                    .unwrap()
                    .push((outcome, due.elapsed().as_secs_f64() * 1e3));
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
    });
    std::mem::take(&mut *outcomes.lock().unwrap())
}

/// The latencies of `outcomes` that were `kind`, sorted.
fn sorted_latencies(outcomes: &[(Outcome, f64)], kind: Outcome) -> Vec<f64> {
    let mut latencies: Vec<f64> = outcomes
        .iter()
        .filter(|(outcome, _)| *outcome == kind)
        .map(|(_, ms)| *ms)
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

fn offered(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    target: &Target,
    rate: f64,
    seconds: f64,
    prompts: &[(String, String)],
) -> Load {
    let started = Instant::now();
    let outcomes = open_loop(runtime, client, target, rate, seconds, prompts);
    let elapsed = started.elapsed().as_secs_f64();
    let latencies = sorted_latencies(&outcomes, Outcome::Answered);
    Load {
        achieved: latencies.len() as f64 / elapsed,
        errors: outcomes.len() - latencies.len(),
        latencies,
    }
}

/// `count` requests, each sent when the last was answered: their
/// latencies, ms, sorted.
fn one_at_a_time(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    target: &Target,
    count: usize,
    prompts: &[(String, String)],
) -> Load {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(count);
    let mut errors = 0;
    runtime.block_on(async {
        for index in 0..count {
            let request = chat_request(client, target, &prompts[index % prompts.len()]);
            let sent = Instant::now();
            let answered = match request.send().await {
                Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
                _ => false,
            };
            if answered {
                latencies.push(sent.elapsed().as_secs_f64() * 1e3);
            } else {
                errors += 1;
            }
        }
    });
    latencies.sort_by(f64::total_cmp);
    Load {
        achieved: latencies.len() as f64 / started.elapsed().as_secs_f64(),
        errors,
        latencies,
    }
}

/// The CPU time `pid` has used, user and system, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces; the fields count from after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&field| fields.get(field)?.parse::<f64>().ok())
        .sum();
    ticks / clock_ticks_per_second()
}

/// The kernel's clock ticks a second, in which `/proc` counts CPU time.
fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok()?.trim().parse().ok())
            .expect("getconf CLK_TCK names the clock's ticks a second")
    })
}

/// Closed-loop `POST /v1/route` from `clients` at once for `seconds`.
fn decisions_per_second(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    key: &str,
    seconds: f64,
    prompts: &[(String, String)],
) -> f64 {
    let clients = 64;
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for worker in 0..clients {
            let (client, url, key, done) =
                (client.clone(), url.to_owned(), key.to_owned(), done.clone());
            let prompts = prompts.to_vec();
            tasks.push(tokio::spawn(async move {
                let mut index = worker;
                while Instant::now() < deadline {
                    let (slice, prompt) = &prompts[index % prompts.len()];
                    index += clients;
                    let body = serde_json::json!({
                        "model": "support-assistant",
                        "messages": [{"role": "user", "content": prompt}],
                    });
                    let ok = client
                        .post(&url)
                        .bearer_auth(&key)
                        .header("x-routeval-slice", slice.as_str())
                        .json(&body)
                        .send()
                        .await
                        .is_ok_and(|response| response.status().is_success());
                    if ok {
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
    });
    done.load(std::sync::atomic::Ordering::Relaxed) as f64 / seconds
}

/// What a load past the admission bound gave: the admitted requests'
/// latencies and the refused ones', each sorted, ms.
struct Overloaded {
    admitted: Vec<f64>,
    refused: Vec<f64>,
    /// Refusals without `Retry-After`, and failures other than a 429.
    other: usize,
}

/// The nearest-rank percentile `p` of `sorted`; NaN when it is empty.
fn rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn offered_past_admission(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    target: &Target,
    rate: f64,
    seconds: f64,
    prompts: &[(String, String)],
) -> Overloaded {
    let outcomes = open_loop(runtime, client, target, rate, seconds, prompts);
    Overloaded {
        admitted: sorted_latencies(&outcomes, Outcome::Answered),
        refused: sorted_latencies(&outcomes, Outcome::Refused),
        other: outcomes
            .iter()
            .filter(|(outcome, _)| *outcome == Outcome::Failed)
            .count(),
    }
}

/// Serve at half and at twice what `--max-in-flight` admits.
fn overload(
    directory: &Path,
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    key: &str,
    keys: &Path,
    seconds: f64,
    prompts: &[(String, String)],
) {
    let (held_ms, bound) = (100, 50);
    let slow = start(
        Command::new(binary())
            .args(["serve-sim", "--listen", "127.0.0.1:0", "--ttft-ms"])
            .arg(held_ms.to_string())
            .arg("--dataset")
            .arg(repo().join("datasets/demo/prompts.jsonl"))
            .arg("--rubrics")
            .arg(repo().join("rubrics")),
    );
    let (config, pubkey, router) = signed_config(&directory.join("overload"), &slow.address);
    let serve = start(
        Command::new(binary())
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--pubkey")
            .arg(&pubkey)
            .arg("--router")
            .arg(&router)
            .arg("--keys")
            .arg(keys)
            .arg("--records")
            .arg(directory.join("records-overload"))
            .args(["--listen", "127.0.0.1:0", "--trust-slice-header"])
            .args(["--max-in-flight", &bound.to_string()])
            .env("ROUTEVAL_SIM_KEY", "sk-sim"),
    );
    let target = Target {
        url: format!("http://{}/v1/chat/completions", serve.address),
        model: "support-assistant".to_owned(),
        key: key.to_owned(),
    };
    let admits = f64::from(bound) * 1000.0 / f64::from(held_ms);
    println!(
        "overload: serve --max-in-flight {bound} before a serve-sim holding each request {held_ms} ms (admits about {admits:.0} requests/s)"
    );
    println!(
        "{:>8} {:>9} {:>9} {:>11} {:>11} {:>9} {:>12} {:>9}",
        "offered",
        "admitted",
        "refused",
        "admit p50",
        "admit p99",
        "429 p99",
        "other errors",
        "RSS MiB"
    );
    offered_past_admission(runtime, client, &target, 50.0, 1.0, prompts);
    let loads: Vec<f64> = env_or("ROUTEVAL_BENCH_OVERLOAD", "250,1000")
        .split(',')
        .map(|load| load.trim().parse().unwrap())
        .collect();
    let mut admitted_p99 = Vec::new();
    for &rate in &loads {
        let load = offered_past_admission(runtime, client, &target, rate, seconds, prompts);
        let rss = rss_mib(serve.child.id());
        println!(
            "{rate:>8.0} {:>9} {:>9} {:>11.1} {:>11.1} {:>9.2} {:>12} {rss:>9.1}",
            load.admitted.len(),
            load.refused.len(),
            rank(&load.admitted, 0.5),
            rank(&load.admitted, 0.99),
            rank(&load.refused, 0.99),
            load.other,
        );
        admitted_p99.push((rate, rank(&load.admitted, 0.99)));
    }
    if let [(low, calm), .., (high, loaded)] = admitted_p99.as_slice() {
        println!(
            "overload: admitted p99 at {high:.0} requests/s is {:.2}x its p99 at {low:.0} requests/s",
            loaded / calm
        );
    }
}

fn litellm_command() -> Option<PathBuf> {
    let path = std::env::var_os("ROUTEVAL_BENCH_LITELLM")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| {
                PathBuf::from(home).join(".cache/routeval/litellm-proxy-venv/bin/litellm")
            })
        })?;
    path.exists().then_some(path)
}

fn start_litellm(litellm: &Path, directory: &Path, sim: &str) -> Option<(Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = directory.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: support-assistant\n    litellm_params:\n      model: openai/sim-small-2026-11-01\n      api_base: http://{sim}/v1\n      api_key: sk-sim\n"
        ),
    )
    .unwrap();
    let child = Command::new(litellm)
        .arg("--config")
        .arg(&config)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--num_workers",
            "1",
        ])
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_MASTER_KEY", LITELLM_KEY)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let address = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(&address).is_ok() {
            // Listening; give the app a moment to load its routes.
            std::thread::sleep(Duration::from_secs(2));
            return Some((child, address));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// What `--records-durability acknowledged` costs: a serve in that mode
/// beside one in the default bounded mode, in turns, one client at a time
/// and then at each of `rates`; the difference in each round, and its
/// median over the rounds.
#[allow(clippy::too_many_arguments)]
fn acknowledged_cost(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    bounded: &Target,
    acknowledged: &Target,
    rates: &[f64],
    seconds: f64,
    rounds: usize,
    sequential: usize,
    prompts: &[(String, String)],
) {
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let base = one_at_a_time(runtime, client, bounded, sequential, prompts);
        let acked = one_at_a_time(runtime, client, acknowledged, sequential, prompts);
        println!(
            "acknowledged records, concurrency 1, {sequential} requests: bounded p50 {:.3} / p99 {:.3} ms, acknowledged p50 {:.3} / p99 {:.3} ms ({} and {} errors)",
            base.percentile(0.5),
            base.percentile(0.99),
            acked.percentile(0.5),
            acked.percentile(0.99),
            base.errors,
            acked.errors
        );
        p50.push(acked.percentile(0.5) - base.percentile(0.5));
        p99.push(acked.percentile(0.99) - base.percentile(0.99));
    }
    println!(
        "acknowledged records at concurrency 1: added p50 {:+.3} ms, p99 {:+.3} ms (median of {rounds} rounds)",
        median(p50),
        median(p99)
    );
    for &rate in rates {
        let (mut p50, mut p99) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let base = offered(runtime, client, bounded, rate, seconds, prompts);
            let acked = offered(runtime, client, acknowledged, rate, seconds, prompts);
            println!(
                "acknowledged records at {rate:.0} requests/s: bounded p50 {:.3} / p99 {:.3} ms ({:.0}/s, {} errors), acknowledged p50 {:.3} / p99 {:.3} ms ({:.0}/s, {} errors)",
                base.percentile(0.5),
                base.percentile(0.99),
                base.achieved,
                base.errors,
                acked.percentile(0.5),
                acked.percentile(0.99),
                acked.achieved,
                acked.errors
            );
            p50.push(acked.percentile(0.5) - base.percentile(0.5));
            p99.push(acked.percentile(0.99) - base.percentile(0.99));
        }
        println!(
            "acknowledged records at {rate:.0} requests/s: added p50 {:+.3} ms, p99 {:+.3} ms (median of {rounds} rounds)",
            median(p50),
            median(p99)
        );
    }
}

fn main() {
    let directory = tempfile::tempdir().unwrap();
    let seconds: f64 = env_or("ROUTEVAL_BENCH_SECONDS", "3").parse().unwrap();
    let rates = |name: &str, default: &str| -> Vec<f64> {
        env_or(name, default)
            .split(',')
            .map(|load| load.trim().parse().unwrap())
            .collect()
    };
    let loads = rates("ROUTEVAL_BENCH_LOADS", "500,2000,5000");
    // The peer climbs until it no longer keeps up.
    let peer_loads = rates(
        "ROUTEVAL_BENCH_PEER_LOADS",
        "10,25,50,100,200,500,1000,2000",
    );
    let sim = start(
        Command::new(binary())
            .args([
                "serve-sim",
                "--listen",
                "127.0.0.1:0",
                "--seed",
                "7",
                "--dataset",
            ])
            .arg(repo().join("datasets/demo/prompts.jsonl"))
            .arg("--rubrics")
            .arg(repo().join("rubrics")),
    );
    let (config, pubkey, router) = signed_config(directory.path(), &sim.address);
    let key = "sk-bench-client";
    let keys = directory.path().join("keys.toml");
    std::fs::write(
        &keys,
        format!(
            "[[keys]]\nsha256 = \"{}\"\ntenant = \"bench\"\n",
            routeval::digest::sha256_hex(key.as_bytes())
        ),
    )
    .unwrap();
    let serve_command = |records: &str| {
        let mut command = Command::new(binary());
        command
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--pubkey")
            .arg(&pubkey)
            .arg("--router")
            .arg(&router)
            .arg("--keys")
            .arg(&keys)
            .arg("--records")
            .arg(directory.path().join(records))
            .args(["--listen", "127.0.0.1:0", "--trust-slice-header"])
            .env("ROUTEVAL_SIM_KEY", "sk-sim");
        command
    };
    let serve = start(&mut serve_command("records"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = routeval::client::http_client(4096).unwrap();
    let prompts = prompts();
    let mut targets = vec![
        (
            "serve-sim directly",
            Target {
                url: format!("http://{}/v1/chat/completions", sim.address),
                model: "sim-small-2026-11-01".to_owned(),
                key: "sk-sim".to_owned(),
            },
            sim.child.id(),
        ),
        (
            "routeval serve",
            Target {
                url: format!("http://{}/v1/chat/completions", serve.address),
                model: "support-assistant".to_owned(),
                key: key.to_owned(),
            },
            serve.child.id(),
        ),
    ];
    let litellm = litellm_command()
        .and_then(|command| start_litellm(&command, directory.path(), &sim.address));
    match &litellm {
        Some((child, address)) => targets.push((
            "LiteLLM proxy",
            Target {
                url: format!("http://{address}/v1/chat/completions"),
                model: "support-assistant".to_owned(),
                key: LITELLM_KEY.to_owned(),
            },
            child.id(),
        )),
        None => println!("LiteLLM proxy: skipped (no litellm[proxy]; set ROUTEVAL_BENCH_LITELLM)"),
    }
    println!(
        "open loop, {seconds} s per load, latency from each request's due time, ms; memory: resident MiB after the load"
    );
    println!(
        "{:<20} {:>8} {:>10} {:>8} {:>9} {:>9} {:>9}",
        "target", "offered", "achieved", "errors", "p50 ms", "p99 ms", "RSS MiB"
    );
    let rounds: usize = env_or("ROUTEVAL_BENCH_ROUNDS", "3").parse().unwrap();
    let row = |name: &str, rate: f64, load: &Load, pid: u32| {
        let sustained = load.errors == 0 && load.achieved >= 0.95 * rate;
        println!(
            "{name:<20} {rate:>8.0} {:>10.0} {:>8} {:>9.3} {:>9.3} {:>9.1}{}",
            load.achieved,
            load.errors,
            load.percentile(0.5),
            load.percentile(0.99),
            rss_mib(pid),
            if sustained { "" } else { "  (not sustained)" }
        );
        sustained
    };
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let (direct, routed) = (&targets[0], &targets[1]);
    for (_, target, _) in &targets {
        // Warm the connections and the server, below the first load.
        offered(&runtime, &client, target, 10.0, 2.0, &prompts);
    }
    // The same serve with acknowledged records, beside the default one.
    let acknowledged =
        start(serve_command("records-acknowledged").args(["--records-durability", "acknowledged"]));
    let acknowledged_target = Target {
        url: format!("http://{}/v1/chat/completions", acknowledged.address),
        ..routed.1.clone()
    };
    offered(&runtime, &client, &acknowledged_target, 10.0, 2.0, &prompts);
    let rounds_of_acknowledged = || {
        acknowledged_cost(
            &runtime,
            &client,
            &routed.1,
            &acknowledged_target,
            &rates("ROUTEVAL_BENCH_ACKNOWLEDGED_LOADS", "500,2000"),
            seconds,
            rounds,
            env_or("ROUTEVAL_BENCH_SEQUENTIAL", "2000").parse().unwrap(),
            &prompts,
        );
    };
    if env_or("ROUTEVAL_BENCH_ONLY", "") == "acknowledged" {
        rounds_of_acknowledged();
        return;
    }
    // Direct and through serve in turn at each load, so both see the same
    // machine; the added latency is the median over the rounds of each
    // round's difference.
    let mut summary = Vec::new();
    for &rate in &loads {
        let (mut added_p50, mut added_p99) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let alone = offered(&runtime, &client, &direct.1, rate, seconds, &prompts);
            row(direct.0, rate, &alone, direct.2);
            let through = offered(&runtime, &client, &routed.1, rate, seconds, &prompts);
            row(routed.0, rate, &through, routed.2);
            added_p50.push(through.percentile(0.5) - alone.percentile(0.5));
            added_p99.push(through.percentile(0.99) - alone.percentile(0.99));
        }
        summary.push((
            rate,
            median(added_p50),
            median(added_p99),
            rss_mib(routed.2),
        ));
    }
    for (rate, p50, p99, rss) in summary {
        println!(
            "routeval serve at {rate:.0} requests/s: added p50 {p50:+.3} ms, p99 {p99:+.3} ms (median of {rounds} rounds); serve RSS {rss:.1} MiB"
        );
    }
    // One client, each request sent when the last was answered.
    let sequential: usize = env_or("ROUTEVAL_BENCH_SEQUENTIAL", "2000").parse().unwrap();
    let mut added_alone = Vec::new();
    for _ in 0..rounds {
        let alone = one_at_a_time(&runtime, &client, &direct.1, sequential, &prompts);
        let through = one_at_a_time(&runtime, &client, &routed.1, sequential, &prompts);
        println!(
            "concurrency 1, {sequential} requests: {} p50 {:.3} ms, {} p50 {:.3} ms ({} and {} errors)",
            direct.0,
            alone.percentile(0.5),
            routed.0,
            through.percentile(0.5),
            alone.errors,
            through.errors
        );
        added_alone.push(through.percentile(0.5) - alone.percentile(0.5));
    }
    println!(
        "routeval serve at concurrency 1: added p50 {:+.3} ms (median of {rounds} rounds)",
        median(added_alone)
    );
    // CPU per proxied request, serve's own and the upstream's.
    let cpu_load: f64 = env_or("ROUTEVAL_BENCH_CPU_LOAD", "1000").parse().unwrap();
    let (mut serve_cpu, mut sim_cpu) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (serve_before, sim_before) = (cpu_seconds(routed.2), cpu_seconds(direct.2));
        let through = offered(&runtime, &client, &routed.1, cpu_load, seconds, &prompts);
        let answered = through.latencies.len().max(1) as f64;
        serve_cpu.push((cpu_seconds(routed.2) - serve_before) / answered * 1e6);
        sim_cpu.push((cpu_seconds(direct.2) - sim_before) / answered * 1e6);
    }
    println!(
        "CPU per proxied request at {cpu_load:.0} requests/s: routeval serve {:.0} µs, serve-sim behind it {:.0} µs (median of {rounds} rounds)",
        median(serve_cpu),
        median(sim_cpu)
    );
    rounds_of_acknowledged();
    drop(acknowledged);
    // The peer climbs until it no longer keeps up, each load beside a
    // direct one.
    if let Some(peer) = targets.get(2) {
        let mut highest_sustained = None;
        for &rate in &peer_loads {
            let alone = offered(&runtime, &client, &direct.1, rate, seconds, &prompts);
            row(direct.0, rate, &alone, direct.2);
            let through = offered(&runtime, &client, &peer.1, rate, seconds, &prompts);
            let sustained = row(peer.0, rate, &through, peer.2);
            println!(
                "{} at {rate:.0} requests/s: added p50 {:+.3} ms, p99 {:+.3} ms",
                peer.0,
                through.percentile(0.5) - alone.percentile(0.5),
                through.percentile(0.99) - alone.percentile(0.99)
            );
            if !sustained {
                break;
            }
            highest_sustained = Some(rate);
        }
        println!(
            "{}: highest load sustained (no errors, at least 95% of the offered rate answered): {}",
            peer.0,
            highest_sustained.map_or("none".to_owned(), |rate| format!("{rate:.0} requests/s"))
        );
    }
    if let Some(error) = FIRST_ERROR.get() {
        println!("first failed request: {error}");
    }
    drop(serve);
    overload(
        directory.path(),
        &runtime,
        &client,
        key,
        &keys,
        seconds,
        &prompts,
    );
    // The decision API alone, its server on one core (the load on the other).
    let pinned = Command::new("taskset").arg("--version").output().is_ok();
    let mut one_core = serve_command("records-decisions");
    let mut one_core = if pinned {
        let mut taskset = Command::new("taskset");
        taskset
            .args(["-c", "0"])
            .arg(one_core.get_program())
            .args(one_core.get_args());
        for (name, value) in one_core.get_envs() {
            if let Some(value) = value {
                taskset.env(name, value);
            }
        }
        taskset
    } else {
        std::mem::replace(&mut one_core, Command::new("true"))
    };
    let decisions = start(&mut one_core);
    let _ = Command::new("taskset")
        .args(["-p", "-c", "1", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status();
    let url = format!("http://{}/v1/route", decisions.address);
    decisions_per_second(&runtime, &client, &url, key, 1.0, &prompts);
    let rate = decisions_per_second(&runtime, &client, &url, key, seconds, &prompts);
    println!(
        "decision API (POST /v1/route, built-in router, 64 clients, closed loop): {rate:.0} decisions/s on {}; RSS {:.1} MiB",
        if pinned {
            "one core (taskset -c 0)"
        } else {
            "the machine (no taskset)"
        },
        rss_mib(decisions.child.id())
    );
    if let Some((mut child, _)) = litellm {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
}
