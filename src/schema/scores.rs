//! A file of scores by id: any CSV, JSON-lines or Parquet table with an
//! `id` column and a score column, as `router join` and `import --scores`
//! read it.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, bail};
use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::Format;

/// `id` → score from any CSV, JSON-lines or Parquet file with an `id`
/// column and the score column.
/// The scores in `column` of the table at `path`, by `id`.
pub fn read_scores(path: &Path, column: &str) -> anyhow::Result<HashMap<String, f64>> {
    // Every error names the file, whichever reader it came from.
    read_scores_of(path, column).map_err(|error| {
        let shown = path.display().to_string();
        if format!("{error:#}").contains(&shown) {
            error
        } else {
            error.context(format!("{shown}: cannot read the scores (--scores)"))
        }
    })
}

fn read_scores_of(path: &Path, column: &str) -> anyhow::Result<HashMap<String, f64>> {
    let missing =
        |name: &str| anyhow::anyhow!("{}: missing column \"{name}\" (--scores)", path.display());
    let mut scores = HashMap::new();
    // A second score for one id would make the join depend on file order.
    let mut insert = |id: String, score: f64, location: String| -> anyhow::Result<()> {
        if scores.contains_key(&id) {
            bail!(
                "{}: {location}: id \"{id}\" has a score already (--scores)",
                path.display()
            );
        }
        scores.insert(id, score);
        Ok(())
    };
    match Format::detect(path)? {
        Format::Csv => {
            let mut reader = csv::Reader::from_path(path)
                .with_context(|| format!("{}: cannot read (--scores)", path.display()))?;
            let headers = reader.headers()?.clone();
            let position = |name: &str| {
                headers
                    .iter()
                    .position(|header| header == name)
                    .ok_or_else(|| missing(name))
            };
            let (id, score) = (position("id")?, position(column)?);
            for record in reader.records() {
                let record = record
                    .with_context(|| format!("{}: malformed CSV (--scores)", path.display()))?;
                let line = record.position().map_or(0, csv::Position::line);
                let value: f64 = record[score].trim().parse().map_err(|_| {
                    anyhow::anyhow!(
                        "{}: line {line}, column \"{column}\": not a number",
                        path.display()
                    )
                })?;
                insert(record[id].to_owned(), value, format!("line {line}"))?;
            }
        }
        Format::JsonLines => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read (--scores)", path.display()))?;
            for (index, line) in text
                .lines()
                .enumerate()
                .filter(|(_, line)| !line.trim().is_empty())
            {
                let value: serde_json::Value = serde_json::from_str(line)
                    .with_context(|| format!("{}: line {}: not JSON", path.display(), index + 1))?;
                let id = match &value["id"] {
                    serde_json::Value::String(id) => id.clone(),
                    serde_json::Value::Number(id) => id.to_string(),
                    _ => return Err(missing("id")).with_context(|| format!("line {}", index + 1)),
                };
                let score = value[column].as_f64().ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: line {}, column \"{column}\": not a number",
                        path.display(),
                        index + 1
                    )
                })?;
                insert(id, score, format!("line {}", index + 1))?;
            }
        }
        Format::Parquet => parquet_scores(path, column, &mut insert)?,
    }
    Ok(scores)
}

/// Feeds `insert` each Parquet row's id and score, with its row number.
fn parquet_scores(
    path: &Path,
    column: &str,
    insert: &mut dyn FnMut(String, f64, String) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let missing =
        |name: &str| anyhow::anyhow!("{}: missing column \"{name}\" (--scores)", path.display());
    let file = std::fs::File::open(path)
        .with_context(|| format!("{}: cannot read (--scores)", path.display()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{}: not a readable Parquet file", path.display()))?;
    let fields = builder.schema().fields().clone();
    let position = |name: &str| {
        fields
            .iter()
            .position(|field| field.name() == name)
            .ok_or_else(|| missing(name))
    };
    let (id, score) = (position("id")?, position(column)?);
    let mask = ProjectionMask::roots(builder.parquet_schema(), [id, score]);
    let (id_position, score_position) = if id < score { (0, 1) } else { (1, 0) };
    let mut row = 0u64;
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        let ids = cast(batch.column(id_position), &DataType::Utf8)?;
        let values = cast(batch.column(score_position), &DataType::Float64)
            .with_context(|| format!("{}: column \"{column}\" is not numeric", path.display()))?;
        let (ids, values) = (ids.as_string::<i32>(), values.as_primitive::<Float64Type>());
        for index in 0..batch.num_rows() {
            row += 1;
            if ids.is_valid(index) && values.is_valid(index) {
                let id = ids.value(index).to_owned();
                insert(id, values.value(index), format!("row {row}"))?;
            }
        }
    }
    Ok(())
}

/// The finite score `scores` (read from `path`) has for `id`.
pub fn score_of(scores: &HashMap<String, f64>, path: &Path, id: &str) -> anyhow::Result<f64> {
    let score = scores
        .get(id)
        .copied()
        .with_context(|| format!("{}: no score for id \"{id}\" (--scores)", path.display()))?;
    if !score.is_finite() {
        bail!(
            "{}: the score of id \"{id}\" is {score} (--scores)",
            path.display()
        );
    }
    Ok(score)
}
