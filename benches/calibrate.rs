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
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

const SLICES: usize = 100;
const TARGET: &str = "0.9";
const MIB: f64 = 1024.0 * 1024.0;

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

/// A seeded SplitMix64 stream.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Rows in random slice order, with a continuous router score (so nearly
/// every row is its own candidate threshold) that predicts the small tier's
/// failures, and per-row costs.
fn write_table(path: &Path, rows: usize) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("slice", DataType::Utf8, false),
        Field::new("score", DataType::Float64, false),
        Field::new("small_ok", DataType::Boolean, false),
        Field::new("large_ok", DataType::Boolean, false),
        Field::new("cost_small", DataType::Float64, false),
        Field::new("cost_large", DataType::Float64, false),
        Field::new("cost_verifier", DataType::Float64, false),
        Field::new("cost_router", DataType::Float64, false),
    ]));
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let temporary = path.with_extension("partial");
    let mut writer = ArrowWriter::try_new(
        File::create(&temporary).unwrap(),
        schema.clone(),
        Some(properties),
    )
    .unwrap();
    let mut random = Random(42);
    let slice_names: Vec<String> = (0..SLICES)
        .map(|slice| format!("tenant-{slice:03}/task"))
        .collect();
    let chunk = 1 << 20;
    for start in (0..rows).step_by(chunk) {
        let count = chunk.min(rows - start);
        let mut ids = Vec::with_capacity(count);
        let mut slices = Vec::with_capacity(count);
        let mut scores = Vec::with_capacity(count);
        let (mut small, mut large) = (Vec::with_capacity(count), Vec::with_capacity(count));
        let (mut cost_small, mut cost_large) =
            (Vec::with_capacity(count), Vec::with_capacity(count));
        for row in start..start + count {
            let slice = (random.next() % SLICES as u64) as usize;
            let difficulty = random.unit() * (0.6 + 0.4 * slice as f64 / SLICES as f64);
            ids.push(format!("req-{row:09}"));
            slices.push(slice_names[slice].as_str());
            scores.push((difficulty + 0.2 * (random.unit() - 0.5)).clamp(0.0, 1.0));
            small.push(random.unit() > difficulty * 1.1);
            large.push(random.unit() > 0.03 + difficulty * 0.05);
            cost_small.push(0.0002 + 0.0004 * random.unit());
            cost_large.push(0.004 + 0.008 * random.unit());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(ids)),
            Arc::new(StringArray::from(slices)),
            Arc::new(Float64Array::from(scores)),
            Arc::new(BooleanArray::from(small)),
            Arc::new(BooleanArray::from(large)),
            Arc::new(Float64Array::from(cost_small)),
            Arc::new(Float64Array::from(cost_large)),
            Arc::new(Float64Array::from(vec![0.0002; count])),
            Arc::new(Float64Array::from(vec![0.00002; count])),
        ];
        writer
            .write(&RecordBatch::try_new(schema.clone(), columns).unwrap())
            .unwrap();
    }
    writer.close().unwrap();
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

struct Measurement {
    wall: Duration,
    peak_rss_bytes: u64,
}

/// Runs `command` to completion, capturing stdout, and reads its peak RSS.
#[expect(clippy::zombie_processes, reason = "the child is reaped by wait4")]
fn measure(mut command: Command) -> (Measurement, Vec<u8>) {
    let start = Instant::now();
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut output = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut output)
        .unwrap();
    let (status, peak_rss_bytes) = wait_with_peak_rss(child.id());
    let wall = start.elapsed();
    assert!(status == 0, "{command:?} exited with status {status}");
    (
        Measurement {
            wall,
            peak_rss_bytes,
        },
        output,
    )
}

#[expect(unsafe_code, reason = "wait4 is how a parent reads a child's peak RSS")]
fn wait_with_peak_rss(pid: u32) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: rusage is plain old data, and wait4 writes only through the two
    // valid pointers it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid as i32, "wait4 failed");
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64 * 1024)
}

fn median_seconds(measurements: &[Measurement]) -> f64 {
    let mut seconds: Vec<f64> = measurements.iter().map(|m| m.wall.as_secs_f64()).collect();
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

fn peak_mib(measurements: &[Measurement]) -> f64 {
    mib(measurements.iter().map(|m| m.peak_rss_bytes).max().unwrap() as usize)
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
