//! `routeval drift --records` on 1 and 10 million request records (a day
//! in hourly windows, 4 slices, 2 routes), streamed from Parquet: wall time
//! and peak memory of each, so the ratio shows memory bounded by slices and
//! windows rather than rows; and, in the same run, alternating with it, the
//! same fold as DuckDB SQL (`benches/drift_records_duckdb.py`, the query
//! docs/records-sql.md offers instead) and as pyarrow group-bys
//! (`benches/drift_records_pyarrow.py`). The ten-million file is read twice:
//! as routeval's importer writes it (row groups of 65,536) and as DuckDB
//! rewrites it (zstd, row groups of a million), the warehouse's own shape.
//!
//! `cargo bench --bench drift_records`; `ROUTEVAL_BENCH_ROWS` sets the larger
//! size (the smaller is a tenth of it), `ROUTEVAL_BENCH_PYTHON` the Python
//! with `duckdb` and `pyarrow` (default `python3`).

use std::path::{Path, PathBuf};
use std::process::Command;

use routeval::records::{Record, RecordsWriter, Status};

#[allow(dead_code)]
#[path = "../tests/common/graded.rs"]
mod common;
mod measure;

use common::Random;
use measure::{Measurement, measure, median_seconds, peak_mib};

const SLICES: [&str; 4] = ["billing", "legal", "sales", "technical"];
const ROUTES: [(&str, &str); 2] = [
    ("mini", "gpt-4o-mini-2024-07-18"),
    ("large", "gpt-4o-2024-08-06"),
];
const RUNS: usize = 3;

fn main() {
    let rows: usize = std::env::var("ROUTEVAL_BENCH_ROWS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(10_000_000);
    let python = std::env::var("ROUTEVAL_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-drift-records");
    std::fs::create_dir_all(&directory).unwrap();
    let config = signed_config(&directory);
    let has = |module: &str| {
        Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .status()
            .is_ok_and(|status| status.success())
    };
    let (duckdb, pyarrow) = (has("duckdb"), has("pyarrow"));
    let benches = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    let mut files = Vec::new();
    for size in [rows / 10, rows] {
        let path = directory.join(format!("records-{size}.parquet"));
        if !path.exists() {
            write_records(&path, size);
        }
        files.push((size, "routeval's row groups", path));
    }
    if duckdb {
        let source = files[1].2.clone();
        let path = directory.join(format!("records-{rows}-duckdb.parquet"));
        if !path.exists() {
            rewrite_with_duckdb(&python, &source, &path);
        }
        files.push((rows, "DuckDB's row groups", path));
    }
    let mut peaks = Vec::new();
    for (size, shape, path) in &files {
        let routeval = || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_routeval"));
            command
                .args(["drift", "--json", "--window", "1h", "--config"])
                .arg(&config)
                .arg("--records")
                .arg(path);
            wrap_exit_zero(command)
        };
        let peer = |script: &str| {
            let mut command = Command::new(&python);
            command.arg(benches.join(script)).arg(path);
            command
        };
        let (mut ours, mut duck, mut duck_query, mut arrow) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Alternating, so a slow moment of the shared machine falls on both.
        for _ in 0..RUNS {
            ours.push(measure(routeval()).0);
            if duckdb {
                let (measurement, output) = measure(peer("drift_records_duckdb.py"));
                duck.push(measurement);
                duck_query.push(query_seconds(&output));
            }
            if pyarrow {
                arrow.push(measure(peer("drift_records_pyarrow.py")).0);
            }
        }
        let seconds = median_seconds(&ours);
        println!(
            "{size} records ({shape}): routeval drift --records median {seconds:.2} s {} ({:.1} M records/s), peak {:.0} MiB",
            range(&ours),
            *size as f64 / seconds / 1e6,
            peak_mib(&ours)
        );
        if duckdb {
            duck_query.sort_by(f64::total_cmp);
            let query = duck_query[RUNS / 2];
            println!(
                "{size} records ({shape}): DuckDB query median {query:.2} s [{:.2}-{:.2}], whole process {:.2} s {}, peak {:.0} MiB: routeval {:.2}x as fast as the query, {:.2}x the memory",
                duck_query[0],
                duck_query[RUNS - 1],
                median_seconds(&duck),
                range(&duck),
                peak_mib(&duck),
                query / seconds,
                peak_mib(&ours) / peak_mib(&duck)
            );
        }
        if pyarrow {
            println!(
                "{size} records ({shape}): pyarrow group-by median {:.2} s {}, peak {:.0} MiB: routeval {:.2}x as fast, {:.2}x the memory",
                median_seconds(&arrow),
                range(&arrow),
                peak_mib(&arrow),
                median_seconds(&arrow) / seconds,
                peak_mib(&ours) / peak_mib(&arrow)
            );
        }
        peaks.push((*size, seconds, peak_mib(&ours)));
    }
    let (small, large) = (peaks[0], peaks[1]);
    println!(
        "{}x the records: {:.2}x the time, {:.2}x the peak memory",
        large.0 / small.0,
        large.1 / small.1,
        large.2 / small.2
    );
}

/// The fastest and slowest of the runs.
fn range(measurements: &[Measurement]) -> String {
    let seconds = measurements.iter().map(|m| m.wall.as_secs_f64());
    let low = seconds.clone().fold(f64::INFINITY, f64::min);
    let high = seconds.fold(0.0, f64::max);
    format!("[{low:.2}-{high:.2}]")
}

/// The query time the DuckDB peer prints after its group count.
fn query_seconds(output: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(output);
    text.split_whitespace()
        .nth(1)
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or_else(|| panic!("the DuckDB peer printed {text:?}"))
}

/// `source` as DuckDB writes Parquet: zstd, row groups of a million.
fn rewrite_with_duckdb(python: &str, source: &Path, target: &Path) {
    let partial = target.with_extension("partial");
    let quote = |path: &Path| path.display().to_string().replace('\'', "''");
    let sql = format!(
        "COPY (SELECT * FROM read_parquet('{}')) TO '{}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000000)",
        quote(source),
        quote(&partial)
    );
    let status = Command::new(python)
        .args([
            "-c",
            "import duckdb, sys; duckdb.connect().execute(sys.argv[1])",
            &sql,
        ])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "DuckDB could not rewrite {}",
        source.display()
    );
    std::fs::rename(&partial, target).unwrap();
}

/// `command` run through `sh` so a drift verdict (exit 1) reads as success.
fn wrap_exit_zero(command: Command) -> Command {
    let mut line = String::new();
    for part in std::iter::once(command.get_program()).chain(command.get_args()) {
        line.push_str(&shell_quote(&part.to_string_lossy()));
        line.push(' ');
    }
    line.push_str(">/dev/null; test $? -le 1");
    let mut wrapped = Command::new("sh");
    wrapped.args(["-c", &line]);
    wrapped
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The example results' predictive table, signed by the gate.
fn signed_config(directory: &Path) -> PathBuf {
    let config = directory.join("dist/route-config.v1.json");
    if config.exists() {
        return config;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let routeval = || Command::new(env!("CARGO_BIN_EXE_routeval"));
    let run = |command: &mut Command| assert!(command.status().unwrap().success(), "{command:?}");
    run(routeval()
        .args(["keygen", "--out"])
        .arg(directory.join("bench.key")));
    run(routeval()
        .args(["calibrate", "--target", "0.9", "--results"])
        .arg(root.join("datasets/example/graded.csv"))
        .arg("--out")
        .arg(directory.join("calibration.json")));
    run(routeval()
        .args(["gate", "--target", "0.9", "--candidates"])
        .arg(root.join("datasets/example/routes/predictive.toml"))
        .arg("--results")
        .arg(root.join("datasets/example/graded.csv"))
        .arg("--calibration")
        .arg(directory.join("calibration.json"))
        .arg("--key")
        .arg(directory.join("bench.key"))
        .arg("--out")
        .arg(directory.join("dist")));
    config
}

/// A day of traffic: scores, routing decisions at 0.55, first tokens,
/// costs, and now and then a fallback.
fn write_records(path: &Path, rows: usize) {
    let mut random = Random::new(11);
    let temporary = path.with_extension("partial");
    let file = std::fs::File::create(&temporary).unwrap();
    let mut writer = RecordsWriter::new(file).unwrap();
    let day_ms = 86_400_000.0;
    for row in 0..rows {
        let slice = SLICES[row % SLICES.len()];
        let score = random.unit();
        let large = score >= 0.55;
        let (route, model) = ROUTES[usize::from(large)];
        let fallback = random.unit() < 0.01;
        let ttft = 200.0 + random.unit() * if large { 900.0 } else { 300.0 };
        writer
            .push(Record {
                logical_model: Some("support-fast".into()),
                model: Some(model.into()),
                reason: Some(
                    if fallback {
                        "fallback:deadline"
                    } else if large {
                        "routed-large"
                    } else {
                        "routed-small"
                    }
                    .into(),
                ),
                score: Some(score),
                input_tokens: Some(1500),
                cached_input_tokens: Some(0),
                output_tokens: Some(300),
                ttft_ms: Some(ttft),
                total_ms: Some(ttft + 2000.0),
                finish_reason: Some("stop".into()),
                cost_usd: Some(if large { 0.009 } else { 0.0004 }),
                ..Record::new(
                    format!("req-{row:010}"),
                    1_764_460_800_000 + (row as f64 / rows as f64 * day_ms) as i64,
                    slice.to_owned(),
                    route.to_owned(),
                    Status::Ok,
                )
            })
            .unwrap();
    }
    writer.close().unwrap();
    std::fs::rename(&temporary, path).unwrap();
}
