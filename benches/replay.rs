//! `routeval replay replicas`: the Mooncake conversation trace (12,031
//! requests, `$ROUTEVAL_DATA/mooncake`) through all eight default policies,
//! against one policy alone in the same run; the calibration grid; and
//! synthetic traces of 100 thousand and 1 million requests with bounded
//! caches, whose peak memory should not grow with the trace.
//!
//! `cargo bench --bench replay`; `ROUTEVAL_BENCH_RUNS` sets the runs.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)]
#[path = "../tests/common/graded.rs"]
mod common;

use common::Random;

#[path = "measure.rs"]
mod measure;

use measure::{Measurement, median_seconds, peak_mib};

fn measure(command: Command) -> Measurement {
    measure::measure(command).0
}

fn main() {
    let runs: usize = std::env::var("ROUTEVAL_BENCH_RUNS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(3);
    match std::env::var_os("ROUTEVAL_DATA") {
        Some(data) => {
            let trace = PathBuf::from(data).join("mooncake/conversation_trace.jsonl");
            mooncake(&trace, runs);
        }
        None => {
            println!("skipped the Mooncake trace: set ROUTEVAL_DATA to the shared data directory");
        }
    }
    streaming(runs);
}

fn replay(trace: &Path, flags: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_routeval"));
    command
        .args(["replay", "replicas", "--json", "--trace"])
        .arg(trace)
        .args(flags);
    command
}

fn mooncake(trace: &Path, runs: usize) {
    let all: Vec<Measurement> = (0..runs)
        .map(|_| measure(replay(trace, &["--replicas", "8"])))
        .collect();
    let one: Vec<Measurement> = (0..runs)
        .map(|_| {
            measure(replay(
                trace,
                &["--replicas", "8", "--policy", "round-robin"],
            ))
        })
        .collect();
    let (all_s, one_s) = (median_seconds(&all), median_seconds(&one));
    println!(
        "mooncake conversation trace, 8 replicas: all 8 policies {all_s:.3} s (runs {}), round robin alone {one_s:.3} s: {:.2}x for 8x the policies; peak RSS {:.0} MiB",
        seconds_list(&all),
        all_s / one_s,
        peak_mib(&all)
    );
    let grid: Vec<Measurement> = (0..runs)
        .map(|_| measure(replay(trace, &["--replicas", "8", "--calibrate"])))
        .collect();
    let grid_s = median_seconds(&grid);
    // The calibration replays 125 cache-aware and 124 scorer points, each on
    // both halves, plus the 8 policies on the whole trace and both halves.
    println!(
        "calibration: 498 grid replays of half the trace in {grid_s:.2} s (runs {}), {:.2} s per 125-point grid; peak RSS {:.0} MiB",
        seconds_list(&grid),
        grid_s * 125.0 / 498.0,
        peak_mib(&grid)
    );
}

/// Conversations that each last a few turns, about 20 live at a time, so
/// the working set is bounded and the trace length is not.
fn write_synthetic(path: &Path, requests: usize) {
    let mut random = Random::new(11);
    let mut writer = BufWriter::new(std::fs::File::create(path).unwrap());
    let mut live: Vec<(Vec<u64>, u32)> = Vec::new();
    let mut next_id = 1u64;
    let mut clock = 0u64;
    let mut line = String::new();
    for _ in 0..requests {
        if live.len() < 20 {
            live.push((vec![0], 2 + (random.next_u64() % 8) as u32));
        }
        let index = (random.next_u64() % live.len() as u64) as usize;
        let (blocks, turns) = &mut live[index];
        let new = 1 + random.next_u64() % 3;
        blocks.extend(next_id..next_id + new);
        next_id += new;
        clock += random.next_u64() % 500;
        line.clear();
        writeln!(
            line,
            "{{\"timestamp\": {clock}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": {blocks:?}}}",
            blocks.len() * 512 - 100,
            20 + random.next_u64() % 200
        )
        .unwrap();
        writer.write_all(line.as_bytes()).unwrap();
        *turns -= 1;
        if *turns == 0 {
            live.swap_remove(index);
        }
    }
    writer.flush().unwrap();
}

fn streaming(runs: usize) {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut peaks = Vec::new();
    for requests in [100_000, 1_000_000] {
        let path = directory.join(format!("bench-trace-{requests}.jsonl"));
        if !path.exists() {
            write_synthetic(&path, requests);
        }
        let flags = [
            "--replicas",
            "8",
            "--cache-blocks",
            "4096",
            "--policy",
            "round-robin",
            "--policy",
            "sglang",
        ];
        let measured: Vec<Measurement> =
            (0..runs).map(|_| measure(replay(&path, &flags))).collect();
        let seconds = median_seconds(&measured);
        println!(
            "synthetic {requests} requests, 2 policies, 4,096-block caches: {seconds:.2} s ({:.0} k requests/s), peak RSS {:.1} MiB",
            requests as f64 / seconds / 1000.0,
            peak_mib(&measured)
        );
        peaks.push(peak_mib(&measured));
    }
    println!(
        "10x the requests, {:.2}x the peak memory",
        peaks[1] / peaks[0]
    );
}

fn seconds_list(measurements: &[Measurement]) -> String {
    measurements
        .iter()
        .map(|m| format!("{:.3}", m.wall.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}
