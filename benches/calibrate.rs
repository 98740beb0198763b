//! `routeval calibrate` on 10 million graded rows in 100 slices, read from
//! Parquet, against a vectorised numpy peer (`benches/calibrate_numpy.py`,
//! pyarrow for the read) on the same file in the same run.
//!
//! Reports each tool's wall time, rows per second and peak resident memory
//! (from `wait4`), the Arrow size of the decoded columns, and checks that both
//! chose the same threshold for every slice.
//!
//! `cargo bench --bench calibrate`; `ROUTEVAL_BENCH_ROWS` and
//! `ROUTEVAL_BENCH_RUNS` change the size and the number of runs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::Array;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

// The integration tests' table builder and random stream; the bench uses
// only some of the helpers.
#[allow(dead_code)]
#[path = "../tests/common/graded.rs"]
mod common;

use common::{Random, Row, record_batch};

#[allow(dead_code)]
#[path = "measure.rs"]
mod measure;

use measure::{MIB, Measurement, measure, median_seconds, peak_mib};

const SLICES: usize = 100;
const TARGET: &str = "0.9";

fn main() {
    let rows: usize = env_or("ROUTEVAL_BENCH_ROWS", 10_000_000);
    let runs: usize = env_or("ROUTEVAL_BENCH_RUNS", 3);
    let path =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-graded-{rows}.parquet"));
    if !path.exists() {
        eprintln!("writing {rows} rows to {}", path.display());
        write_table(&path, rows);
    }
    let file_mib = std::fs::metadata(&path).unwrap().len() as f64 / MIB;
    let decoded = decoded_bytes(&path);
    println!(
        "{rows} rows, {SLICES} slices, {file_mib:.0} MiB of Parquet; decoded columns {:.0} MiB",
        mib(decoded)
    );

    let routeval = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_routeval"));
        command
            .args(["calibrate", "--target", TARGET, "--json", "--results"])
            .arg(&path);
        command
    };
    let numpy = || {
        let mut command = Command::new("python3");
        command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/calibrate_numpy.py"))
            .arg(&path)
            .arg(TARGET);
        command
    };
    let peer_available = Command::new("python3")
        .args(["-c", "import numpy, pyarrow"])
        .status()
        .is_ok_and(|status| status.success());
    if !peer_available {
        println!("numpy peer skipped: `pip install numpy pyarrow` to compare");
    }

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let (mut our_output, mut their_output) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (measurement, output) = measure(routeval());
        ours.push(measurement);
        our_output = output;
        if peer_available {
            let (measurement, output) = measure(numpy());
            theirs.push(measurement);
            their_output = output;
        }
    }

    report("routeval", &ours, rows, decoded);
    if peer_available {
        report("numpy+pyarrow", &theirs, rows, decoded);
        let speedup = median_seconds(&theirs) / median_seconds(&ours);
        let memory = peak_mib(&theirs) / peak_mib(&ours);
        println!(
            "routeval is {speedup:.2}x as fast as the numpy peer and uses {memory:.2}x less peak memory"
        );
        assert_same_thresholds(&our_output, &their_output);
        println!("both chose the same threshold in all {SLICES} slices");
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Rows in random slice order, with a continuous router score (so nearly
/// every row is its own candidate threshold) that predicts the small tier's
/// failures, and per-row costs.
fn write_table(path: &Path, rows: usize) {
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let temporary = path.with_extension("partial");
    let mut writer = None;
    let mut random = Random::new(42);
    let chunk = 1 << 20;
    for start in (0..rows).step_by(chunk) {
        let rows: Vec<Row> = (start..rows.min(start + chunk))
            .map(|row| {
                let slice = (random.next_u64() % SLICES as u64) as usize;
                let difficulty = random.unit() * (0.6 + 0.4 * slice as f64 / SLICES as f64);
                Row {
                    id: format!("req-{row:09}"),
                    slice: format!("tenant-{slice:03}/task"),
                    score: (difficulty + 0.2 * (random.unit() - 0.5)).clamp(0.0, 1.0),
                    small_ok: random.unit() > difficulty * 1.1,
                    large_ok: random.unit() > 0.03 + difficulty * 0.05,
                    cost_small: 0.0002 + 0.0004 * random.unit(),
                    cost_large: 0.004 + 0.008 * random.unit(),
                    cost_verifier: 0.0002,
                    cost_router: 0.00002,
                }
            })
            .collect();
        let batch = record_batch(&rows);
        writer
            .get_or_insert_with(|| {
                let file = File::create(&temporary).unwrap();
                ArrowWriter::try_new(file, batch.schema(), Some(properties.clone())).unwrap()
            })
            .write(&batch)
            .unwrap();
    }
    writer.expect("at least one row").close().unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// Bytes the file's columns occupy once decoded into Arrow arrays.
fn decoded_bytes(path: &Path) -> usize {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    reader
        .map(|batch| {
            batch
                .unwrap()
                .columns()
                .iter()
                .map(|column| column.to_data().get_slice_memory_size().unwrap())
                .sum::<usize>()
        })
        .sum()
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / MIB
}

fn report(tool: &str, measurements: &[Measurement], rows: usize, decoded: usize) {
    let seconds = median_seconds(measurements);
    let all: Vec<String> = measurements
        .iter()
        .map(|m| format!("{:.2}", m.wall.as_secs_f64()))
        .collect();
    println!(
        "{tool:>14}: median {seconds:.2} s ({}), {:.1} M rows/s, peak RSS {:.0} MiB = {:.2}x the decoded columns",
        all.join(", "),
        rows as f64 / seconds / 1e6,
        peak_mib(measurements),
        peak_mib(measurements) / mib(decoded)
    );
}

fn assert_same_thresholds(ours: &[u8], theirs: &[u8]) {
    let ours: serde_json::Value = serde_json::from_slice(ours).unwrap();
    let theirs: serde_json::Value = serde_json::from_slice(theirs).unwrap();
    assert_eq!(ours["results"]["sha256"], theirs["sha256"]);
    let slices = ours["slices"].as_array().unwrap();
    assert_eq!(slices.len(), SLICES);
    for slice in slices {
        let name = slice["slice"].as_str().unwrap();
        let peer = &theirs["slices"][name];
        let threshold = |value: &serde_json::Value| match value {
            serde_json::Value::String(text) if text == "inf" => f64::INFINITY,
            other => other.as_f64().unwrap_or(f64::NAN),
        };
        let peer_threshold = match &peer["threshold"] {
            serde_json::Value::Null => f64::NAN,
            other => other.as_f64().unwrap(),
        };
        let our_threshold = threshold(&slice["threshold"]);
        assert!(
            our_threshold == peer_threshold || (our_threshold.is_nan() && peer_threshold.is_nan()),
            "slice {name}: routeval chose {our_threshold}, numpy {peer_threshold}"
        );
        assert_eq!(
            slice["frontier_points"].as_u64().unwrap(),
            peer["frontier_points"].as_u64().unwrap(),
            "slice {name}: frontier sizes differ"
        );
    }
}
