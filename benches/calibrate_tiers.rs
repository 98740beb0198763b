//! `routeval calibrate --tiers small,mid,large` on 1 million graded rows in
//! 10 slices, read from Parquet, against a vectorised numpy twin of the same
//! semantics (`benches/calibrate_tiers_numpy.py`) on the same file in the
//! same run; checks that both chose the same thresholds in every slice.
//!
//! `cargo bench --bench calibrate_tiers`; `ROUTEVAL_BENCH_ROWS` and
//! `ROUTEVAL_BENCH_RUNS` change the size and the number of runs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;

#[allow(dead_code)]
#[path = "../tests/common/graded.rs"]
mod common;

use common::Random;

const SLICES: usize = 10;
const TARGET: &str = "0.9";

fn main() {
    let rows: usize = env_or("ROUTEVAL_BENCH_ROWS", 1_000_000);
    let runs: usize = env_or("ROUTEVAL_BENCH_RUNS", 3);
    let path =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-tiers-{rows}.parquet"));
    if !path.exists() {
        write_table(&path, rows);
    }
    let routeval = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_routeval"));
        command
            .args([
                "calibrate",
                "--target",
                TARGET,
                "--tiers",
                "small,mid,large",
                "--json",
                "--results",
            ])
            .arg(&path);
        command
    };
    let numpy = || {
        let mut command = Command::new("python3");
        command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/calibrate_tiers_numpy.py"))
            .arg(&path)
            .arg(TARGET);
        command
    };
    let peer = Command::new("python3")
        .args(["-c", "import numpy, pyarrow"])
        .status()
        .is_ok_and(|status| status.success());
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut our_output, mut their_output) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (seconds, output) = time(routeval());
        ours.push(seconds);
        our_output = output;
        if peer {
            let (seconds, output) = time(numpy());
            theirs.push(seconds);
            their_output = output;
        }
    }
    let median = |times: &mut Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    let our_median = median(&mut ours);
    println!(
        "{rows} rows, {SLICES} slices, 3 tiers: routeval median {our_median:.2} s ({ours:.2?})"
    );
    if !peer {
        println!("numpy peer skipped: `pip install numpy pyarrow` to compare");
        return;
    }
    let their_median = median(&mut theirs);
    println!(
        "numpy+pyarrow median {their_median:.2} s ({theirs:.2?}): routeval is {:.2}x as fast",
        their_median / our_median
    );
    let ours: serde_json::Value = serde_json::from_slice(&our_output).unwrap();
    let theirs: serde_json::Value = serde_json::from_slice(&their_output).unwrap();
    assert_eq!(ours["results"]["sha256"], theirs["sha256"]);
    for slice in ours["slices"].as_array().unwrap() {
        let name = slice["slice"].as_str().unwrap();
        let chosen = &slice["tiered"]["thresholds"];
        let peer = &theirs["slices"][name];
        let expected = if peer.is_null() {
            serde_json::json!([])
        } else {
            peer.clone()
        };
        assert_eq!(chosen, &expected, "slice {name}");
    }
    println!("both chose the same thresholds in all {SLICES} slices");
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn time(mut command: Command) -> (f64, Vec<u8>) {
    let start = Instant::now();
    let output = command.stderr(Stdio::inherit()).output().unwrap();
    assert!(
        output.status.success() || output.status.code() == Some(1),
        "{command:?}"
    );
    (start.elapsed().as_secs_f64(), output.stdout)
}

/// Slices of increasing difficulty; a continuous router score; three tiers
/// whose chance of an acceptable answer falls with difficulty at different
/// rates; per-row costs.
fn write_table(path: &Path, rows: usize) {
    let mut random = Random::new(7);
    let temporary = path.with_extension("partial");
    let mut writer: Option<ArrowWriter<File>> = None;
    for start in (0..rows).step_by(1 << 18) {
        let end = rows.min(start + (1 << 18));
        let (mut id, mut slice, mut score) = (Vec::new(), Vec::new(), Vec::new());
        let (mut ok, mut cost) = (
            [Vec::new(), Vec::new(), Vec::new()],
            [Vec::new(), Vec::new(), Vec::new()],
        );
        for row in start..end {
            let tenant = (random.next_u64() % SLICES as u64) as usize;
            let difficulty = random.unit() * (0.6 + 0.4 * tenant as f64 / SLICES as f64);
            id.push(format!("req-{row:09}"));
            slice.push(format!("tenant-{tenant:02}"));
            score.push((difficulty + 0.15 * (random.unit() - 0.5)).clamp(0.0, 1.0));
            for (tier, (reach, base)) in [(1.2, 0.0002), (0.6, 0.001), (0.08, 0.006)]
                .into_iter()
                .enumerate()
            {
                ok[tier].push(random.unit() > difficulty * reach);
                cost[tier].push(base * (1.0 + random.unit()));
            }
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("id", Arc::new(StringArray::from(id))),
            ("slice", Arc::new(StringArray::from(slice))),
            ("score", Arc::new(Float64Array::from(score))),
            ("small_ok", Arc::new(BooleanArray::from(ok[0].clone()))),
            ("mid_ok", Arc::new(BooleanArray::from(ok[1].clone()))),
            ("large_ok", Arc::new(BooleanArray::from(ok[2].clone()))),
            ("cost_small", Arc::new(Float64Array::from(cost[0].clone()))),
            ("cost_mid", Arc::new(Float64Array::from(cost[1].clone()))),
            ("cost_large", Arc::new(Float64Array::from(cost[2].clone()))),
            (
                "cost_router",
                Arc::new(Float64Array::from(vec![0.00002; end - start])),
            ),
        ];
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        writer
            .get_or_insert_with(|| {
                ArrowWriter::try_new(File::create(&temporary).unwrap(), batch.schema(), None)
                    .unwrap()
            })
            .write(&batch)
            .unwrap();
    }
    writer.expect("rows").close().unwrap();
    std::fs::rename(&temporary, path).unwrap();
}
