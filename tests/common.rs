//! Helpers shared by the integration tests: a graded-results table built in
//! code and written in each supported format, and the CLI under test.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use assert_cmd::Command;
use parquet::arrow::ArrowWriter;

/// One graded row, with every cost column.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: String,
    pub slice: String,
    pub score: f64,
    pub small_ok: bool,
    pub large_ok: bool,
    pub cost_small: f64,
    pub cost_large: f64,
    pub cost_verifier: f64,
    pub cost_router: f64,
}

/// A deterministic table: `per_slice` rows in each of `slices`, with a
/// router score that rises with each prompt's difficulty, a small tier that
/// fails hard prompts and a large tier that rarely fails.
pub fn synthetic_rows(slices: &[&str], per_slice: usize, seed: u64) -> Vec<Row> {
    let mut random = Random::new(seed);
    let mut rows = Vec::new();
    for slice in slices {
        for index in 0..per_slice {
            let difficulty = random.unit();
            let score = ((difficulty + 0.15 * random.normal()) * 1000.0).round() / 1000.0;
            rows.push(Row {
                id: format!("{slice}-{index}"),
                slice: (*slice).to_owned(),
                score,
                small_ok: random.unit() > difficulty * 0.9,
                large_ok: random.unit() > 0.04,
                cost_small: 0.0002 + 0.0001 * random.unit(),
                cost_large: 0.004 + 0.002 * random.unit(),
                cost_verifier: 0.0002,
                cost_router: 0.00002,
            });
        }
    }
    rows
}

/// A small, seeded generator, so tests need no randomness crate.
#[derive(Debug)]
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

pub const HEADER: &str =
    "id,slice,score,small_ok,large_ok,cost_small,cost_large,cost_verifier,cost_router";

pub fn csv_line(row: &Row) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{}",
        row.id,
        row.slice,
        row.score,
        row.small_ok,
        row.large_ok,
        row.cost_small,
        row.cost_large,
        row.cost_verifier,
        row.cost_router
    )
}

pub fn write_csv(path: &Path, rows: &[Row]) {
    let mut text = String::from(HEADER);
    text.push('\n');
    for row in rows {
        text.push_str(&csv_line(row));
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

pub fn write_json_lines(path: &Path, rows: &[Row]) {
    let mut text = String::new();
    for row in rows {
        let object = serde_json::json!({
            "id": row.id,
            "slice": row.slice,
            "score": row.score,
            "small_ok": row.small_ok,
            "large_ok": row.large_ok,
            "cost_small": row.cost_small,
            "cost_large": row.cost_large,
            "cost_verifier": row.cost_verifier,
            "cost_router": row.cost_router,
        });
        text.push_str(&object.to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

pub fn record_batch(rows: &[Row]) -> RecordBatch {
    let strings = |get: fn(&Row) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(get)))
    };
    let floats = |get: fn(&Row) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(rows.iter().map(get)))
    };
    let flags = |get: fn(&Row) -> bool| -> ArrayRef {
        Arc::new(BooleanArray::from(rows.iter().map(get).collect::<Vec<_>>()))
    };
    let schema = Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("slice", DataType::Utf8, false),
        Field::new("score", DataType::Float64, false),
        Field::new("small_ok", DataType::Boolean, false),
        Field::new("large_ok", DataType::Boolean, false),
        Field::new("cost_small", DataType::Float64, false),
        Field::new("cost_large", DataType::Float64, false),
        Field::new("cost_verifier", DataType::Float64, false),
        Field::new("cost_router", DataType::Float64, false),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            strings(|row| &row.id),
            strings(|row| &row.slice),
            floats(|row| row.score),
            flags(|row| row.small_ok),
            flags(|row| row.large_ok),
            floats(|row| row.cost_small),
            floats(|row| row.cost_large),
            floats(|row| row.cost_verifier),
            floats(|row| row.cost_router),
        ],
    )
    .unwrap()
}

pub fn write_parquet_batch(path: &Path, batch: &RecordBatch) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

pub fn write_parquet(path: &Path, rows: &[Row]) {
    write_parquet_batch(path, &record_batch(rows));
}

pub fn routeval() -> Command {
    Command::cargo_bin("routeval").unwrap()
}

/// The example table shipped in `datasets/`.
pub fn example_results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/example/graded.csv")
}

/// The keys of a JSON object, for tests that pin a document's format.
pub fn keys(value: &serde_json::Value) -> std::collections::BTreeSet<&str> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The Python with `litellm`, `pyyaml` and `scipy` that checks routeval
/// against other implementations (`ROUTEVAL_TEST_PYTHON`, which `.ci/run`
/// sets); `None` after saying `what` was skipped, and a failure under CI.
pub fn test_python(what: &str) -> Option<std::ffi::OsString> {
    let python = std::env::var_os("ROUTEVAL_TEST_PYTHON");
    if python.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what}: ROUTEVAL_TEST_PYTHON is not set; .ci/run sets it"
        );
        eprintln!("skipped {what}: ROUTEVAL_TEST_PYTHON is not set");
    }
    python
}

/// Runs `script` with `python -c`, failing the test with Python's stderr
/// when it fails; its stdout.
pub fn run_python(python: &std::ffi::OsStr, script: &str) -> String {
    let output = std::process::Command::new(python)
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One request of a population where a target of 0.85 sits at the edge of
/// what a router can reach: difficulty uniform, each tier solving it with a
/// probability that falls with difficulty, and the router seeing difficulty
/// through noise. Returns (score, small_ok, large_ok).
pub fn edge_request(random: &mut Random) -> (f64, bool, bool) {
    let difficulty = random.unit();
    (
        ((difficulty + 0.1 * random.normal()) * 1000.0).round() / 1000.0,
        random.unit() < logistic((0.55 - difficulty) / 0.05),
        random.unit() < logistic((0.97 - difficulty) / 0.05),
    )
}

/// `rows` fresh requests of [`edge_request`]'s population as predictive
/// observations: the truth a threshold is judged against.
pub fn edge_truth(random: &mut Random, rows: usize) -> routeval::policy::SliceObservations {
    let mut truth = routeval::policy::SliceObservations::default();
    for _ in 0..rows {
        let (score, small_ok, large_ok) = edge_request(random);
        let row = routeval::policy::GradedRow {
            score,
            small_ok,
            large_ok,
            cost_small: 0.0004,
            cost_large: 0.008,
            cost_verifier: 0.0,
            cost_router: 0.00002,
        };
        truth.push(routeval::schema::Policy::Predictive, &row);
    }
    truth
}

/// `routeval gate` of `candidate` on `results` into `directory/out`, with a
/// key made once in `directory` and `flags`; the check may pass or fail, but
/// the command must run. Returns the gate report.
pub fn gate_report(
    directory: &Path,
    results: &Path,
    candidate: &Path,
    out: &str,
    flags: &[&str],
) -> routeval::schema::GateReport {
    let key = directory.join("k.key");
    if !key.exists() {
        routeval()
            .arg("keygen")
            .arg("--out")
            .arg(&key)
            .assert()
            .code(0);
    }
    routeval()
        .args(["gate", "--candidates"])
        .arg(candidate)
        .arg("--results")
        .arg(results)
        .arg("--key")
        .arg(&key)
        .arg("--out")
        .arg(directory.join(out))
        .args(flags)
        .assert()
        .code(predicates::ord::lt(2));
    let text = std::fs::read_to_string(directory.join(out).join("gate-report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `routeval calibrate --json` of `results` with `flags`, feasible or not.
pub fn calibration_of(results: &Path, flags: &[&str]) -> routeval::schema::CalibrationDocument {
    calibration_and_text(results, flags).0
}

/// [`calibration_of`], and the document's text as printed.
pub fn calibration_and_text(
    results: &Path,
    flags: &[&str],
) -> (routeval::schema::CalibrationDocument, String) {
    let output = routeval()
        .args(["calibrate", "--json", "--results"])
        .arg(results)
        .args(flags)
        .output()
        .unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    (
        serde_json::from_str(&text).expect("a calibration document"),
        text,
    )
}

/// The keys of `objects` that docs/schema.md's section `heading` does not
/// name (as `` `key` ``, or inside a `{a, b}` list).
pub fn undocumented_keys(heading: &str, objects: &[&serde_json::Value]) -> Vec<String> {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = docs
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("docs/schema.md has no {heading:?}"));
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut missing = Vec::new();
    for object in objects {
        for key in keys(object) {
            let named = [
                format!("`{key}`"),
                format!("{key},"),
                format!("{{{key}"),
                format!("{key}}}"),
                format!(" {key}\n"),
            ];
            if !named.iter().any(|form| section.contains(form.as_str())) {
                missing.push(key.to_owned());
            }
        }
    }
    missing
}
