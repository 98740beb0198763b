//! A graded-results table built in code and written in each supported
//! format, and the seeded generator tests and benchmarks draw rows from.
//! Benchmarks include this file alone.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
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
