//! `routeval run` throughput and memory against `serve-sim` on loopback with
//! zero latency, and the same work by a Python asyncio runner using the
//! official `openai` AsyncOpenAI client (`benches/run_openai.py`), with the
//! same concurrency against the same server, in the same run.
//!
//! The comparison is equal work: both runners send the same
//! `ROUTEVAL_BENCH_PEER_PROMPTS` (default 20,000) prompts × 2 tiers,
//! alternating, `ROUTEVAL_BENCH_RUNS` (default 3) times each; the medians
//! and the spread (min–max) are printed, and the ratio of the medians.
//! Scale and memory are routeval's alone: `ROUTEVAL_BENCH_PROMPTS` (default
//! 100,000) prompts, and a run of a tenth of them shows whether memory grows
//! with the dataset. `ROUTEVAL_BENCH_PYTHON` names the Python with `openai`
//! (default `python3`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const CONCURRENCY: usize = 64;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn write_dataset(path: &Path, prompts: usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for index in 0..prompts {
        writeln!(
            file,
            r#"{{"id": "p{index}", "slice": "s{}", "prompt": "Question {index}: what is {index} plus one? Answer with the number.", "reference": "{}", "rubric": "exact", "difficulty": {}}}"#,
            index % 10,
            index + 1,
            (index % 100) as f64 / 100.0
        )
        .unwrap();
    }
}

struct Usage {
    seconds: f64,
    cpu_seconds: f64,
    peak_rss_mib: f64,
    stdout: String,
}

#[expect(
    unsafe_code,
    reason = "wait4 is how a parent reads a child's CPU time and peak RSS"
)]
#[expect(clippy::zombie_processes, reason = "the child is reaped by wait4")]
fn measure(command: &mut Command) -> Usage {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 writes only through the two valid pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as i32;
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 failed");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "{command:?} failed:\n{stdout}"
    );
    let time = |value: libc::timeval| value.tv_sec as f64 + value.tv_usec as f64 / 1e6;
    Usage {
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: time(usage.ru_utime) + time(usage.ru_stime),
        peak_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        stdout,
    }
}

fn main() {
    let prompts = env_or("ROUTEVAL_BENCH_PROMPTS", 100_000);
    let peer_prompts = env_or("ROUTEVAL_BENCH_PEER_PROMPTS", 20_000);
    let directory = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rubrics = root.join("rubrics");
    let dataset = directory.path().join("prompts.jsonl");
    write_dataset(&dataset, prompts);
    // The endpoint runs in its own process, as a real one would, so that the
    // memory of its answers is nobody's peak but its own.
    let mut sim = Command::new(env!("CARGO_BIN_EXE_routeval"))
        .args(["serve-sim", "--listen", "127.0.0.1:0", "--dataset"])
        .arg(&dataset)
        .arg("--rubrics")
        .arg(&rubrics)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(sim.stdout.take().unwrap()),
        &mut banner,
    )
    .unwrap();
    let base_url = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    let config = directory.path().join("routeval.toml");
    let endpoint = |model: &str| {
        format!(
            "base_url = \"{base_url}\"\nmodel = \"{model}\"\nprice_input_per_mtok = 0.15\nprice_output_per_mtok = 0.6\nmax_concurrency = {CONCURRENCY}\n"
        )
    };
    std::fs::write(
        &config,
        format!(
            "[tiers.small]\n{}\n[tiers.large]\n{}\n[run]\nseed = 7\nmax_tokens = 256\n",
            endpoint("sim-small-2026-11-01"),
            endpoint("sim-large-2026-11-01")
        ),
    )
    .unwrap();

    let routeval_run = |dataset: &Path, name: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_routeval"));
        command
            .args(["run", "--quiet", "--no-cache", "--config"])
            .arg(&config)
            .arg("--dataset")
            .arg(dataset)
            .arg("--rubrics")
            .arg(&rubrics)
            .arg("--out")
            .arg(directory.path().join(name));
        measure(&mut command)
    };
    let small = directory.path().join("small.jsonl");
    write_dataset(&small, prompts / 10);
    let tenth = routeval_run(&small, "tenth");
    let ours = routeval_run(&dataset, "whole");
    let requests = 2.0 * prompts as f64;
    println!(
        "routeval at scale: {prompts} prompts x 2 tiers in {:.2} s = {:.0} requests/s, {:.1} µs CPU per request, peak RSS {:.1} MiB ({:.1} MiB at a tenth of the prompts)",
        ours.seconds,
        requests / ours.seconds,
        ours.cpu_seconds / requests * 1e6,
        ours.peak_rss_mib,
        tenth.peak_rss_mib
    );

    // Equal work: the same prompts through both runners, alternating.
    let runs = env_or("ROUTEVAL_BENCH_RUNS", 3).max(1);
    let peer_dataset = directory.path().join("peer.jsonl");
    write_dataset(&peer_dataset, peer_prompts);
    let python = std::env::var("ROUTEVAL_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let equal_requests = 2.0 * peer_prompts as f64;
    let (mut our_rps, mut our_cpu, mut peer_rps, mut peer_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let ours = routeval_run(&peer_dataset, &format!("equal-{run}"));
        our_rps.push(equal_requests / ours.seconds);
        our_cpu.push(ours.cpu_seconds / equal_requests * 1e6);
        let theirs = measure(
            Command::new(&python)
                .arg(root.join("benches/run_openai.py"))
                .arg(&base_url)
                .arg(&peer_dataset)
                .arg(CONCURRENCY.to_string()),
        );
        let peer: serde_json::Value = serde_json::from_str(theirs.stdout.trim()).unwrap();
        assert_eq!(
            peer["requests"].as_f64().unwrap(),
            equal_requests,
            "the peer lost requests"
        );
        peer_rps.push(equal_requests / theirs.seconds);
        peer_cpu.push(theirs.cpu_seconds / equal_requests * 1e6);
    }
    sim.kill().unwrap();
    sim.wait().unwrap();
    for (name, rps, cpu) in [
        ("routeval", &mut our_rps, &mut our_cpu),
        ("python AsyncOpenAI", &mut peer_rps, &mut peer_cpu),
    ] {
        println!(
            "{name}: {peer_prompts} prompts x 2 tiers, {runs} runs: median {:.0} requests/s [{:.0}–{:.0}], median {:.1} µs CPU per request [{:.1}–{:.1}]",
            median(rps),
            rps[0],
            rps[rps.len() - 1],
            median(cpu),
            cpu[0],
            cpu[cpu.len() - 1]
        );
    }
    println!(
        "equal work: routeval does {:.1}x the peer's requests per second (ratio of medians), at {:.1}x less CPU per request",
        median(&mut our_rps) / median(&mut peer_rps),
        median(&mut peer_cpu) / median(&mut our_cpu)
    );
}

/// Sorts `values` and returns their median.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}
