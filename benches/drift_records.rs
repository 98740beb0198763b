//! `routeval drift --records` on 1 and 10 million request records (a day
//! in hourly windows, 10 slices, 4 routes), streamed from Parquet: wall
//! time and peak memory of each, so the ratio shows memory bounded by
//! slices and windows rather than rows; and, in the same run, a pyarrow
//! group-by of the same fold (`benches/drift_records_pyarrow.py`) as the
//! peer.
//!
//! `cargo bench --bench drift_records`; `ROUTEVAL_BENCH_ROWS` sets the larger
//! size (the smaller is a tenth of it).

use std::path::{Path, PathBuf};
use std::process::Command;

use routeval::records::{Record, RecordsWriter, Status};

#[allow(dead_code)]
#[path = "../tests/common.rs"]
mod common;
mod measure;

use common::Random;
use measure::{measure, median_seconds, peak_mib};

const SLICES: [&str; 4] = ["billing", "legal", "sales", "technical"];
const ROUTES: [(&str, &str); 2] = [
    ("mini", "gpt-4o-mini-2024-07-18"),
    ("large", "gpt-4o-2024-08-06"),
];

fn main() {
    let rows: usize = std::env::var("ROUTEVAL_BENCH_ROWS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(10_000_000);
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-drift-records");
    std::fs::create_dir_all(&directory).unwrap();
    let config = signed_config(&directory);
    let peer = Command::new("python3")
        .args(["-c", "import pyarrow"])
        .status()
        .is_ok_and(|status| status.success());
    let mut figures = Vec::new();
    for size in [rows / 10, rows] {
        let path = directory.join(format!("records-{size}.parquet"));
        if !path.exists() {
            write_records(&path, size);
        }
        let routeval = || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_routeval"));
            command
                .args(["drift", "--json", "--window", "1h", "--config"])
                .arg(&config)
                .arg("--records")
                .arg(&path);
            command
        };
        let runs: Vec<_> = (0..3).map(|_| measure_allowing_drift(routeval())).collect();
        let (seconds, peak) = (median_seconds(&runs), peak_mib(&runs));
        println!(
            "{size} records: routeval drift --records median {seconds:.2} s ({:.1} M records/s), peak {peak:.0} MiB",
            size as f64 / seconds / 1e6
        );
        if peer {
            let mut command = Command::new("python3");
            command
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/drift_records_pyarrow.py"))
                .arg(&path);
            let theirs: Vec<_> = (0..3).map(|_| measure(command_clone(&command)).0).collect();
            let (their_seconds, their_peak) = (median_seconds(&theirs), peak_mib(&theirs));
            println!(
                "{size} records: pyarrow group-by median {their_seconds:.2} s, peak {their_peak:.0} MiB: routeval {:.2}x as fast, {:.2}x the memory",
                their_seconds / seconds,
                peak / their_peak
            );
        }
        figures.push((size, seconds, peak));
    }
    let (small, large) = (figures[0], figures[1]);
    println!(
        "{}x the records: {:.2}x the time, {:.2}x the peak memory",
        large.0 / small.0,
        large.1 / small.1,
        large.2 / small.2
    );
}

fn command_clone(command: &Command) -> Command {
    let mut clone = Command::new(command.get_program());
    clone.args(command.get_args());
    clone
}

/// drift exits 1 when it finds drift; the bench measures either way.
fn measure_allowing_drift(command: Command) -> measure::Measurement {
    measure(wrap_exit_zero(command)).0
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
                id: format!("req-{row:010}").into(),
                timestamp_ms: 1_764_460_800_000 + (row as f64 / rows as f64 * day_ms) as i64,
                slice: slice.into(),
                logical_model: Some("support-fast".into()),
                route: route.into(),
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
                status: Status::Ok,
                input_tokens: Some(1500),
                cached_input_tokens: Some(0),
                output_tokens: Some(300),
                ttft_ms: Some(ttft),
                total_ms: Some(ttft + 2000.0),
                finish_reason: Some("stop".into()),
                cost_usd: Some(if large { 0.009 } else { 0.0004 }),
                prompt: None,
                messages: None,
            })
            .unwrap();
    }
    writer.close().unwrap();
    std::fs::rename(&temporary, path).unwrap();
}
