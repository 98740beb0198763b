//! A file of scores by id: any CSV, JSON-lines or Parquet table with an
//! `id` column and a score column, as `router join` and `import --scores`
//! read it.

use std::collections::HashMap;
use std::path::Path;

use std::collections::hash_map::Entry;

use anyhow::{Context, bail};
use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type};
use parquet::arrow::ProjectionMask;

use super::table_files::{CsvFile, arrow_error, for_each_json_object, open_parquet, parquet_error};
use super::{Format, ReadError, RowLocation};

/// The scores in `column` of the table at `path` (any CSV, JSON-lines or
/// Parquet file with an `id` column and the score column), by `id`. An id
/// given twice is refused: the join would depend on the file's order.
pub fn read_scores(path: &Path, column: &str) -> Result<HashMap<String, f64>, ReadError> {
    let mut scores: HashMap<String, (f64, RowLocation)> = HashMap::new();
    let mut insert = |id: String, score: f64, location: RowLocation| match scores.entry(id) {
        Entry::Occupied(entry) => Err(ReadError::DuplicateId {
            path: path.to_owned(),
            location,
            first: entry.get().1,
            column: "id".to_owned(),
            id: entry.key().clone(),
        }),
        Entry::Vacant(entry) => {
            entry.insert((score, location));
            Ok(())
        }
    };
    let not_a_number = |location, column: &str| ReadError::InvalidValue {
        path: path.to_owned(),
        location,
        column: column.to_owned(),
        problem: "not a number".to_owned(),
    };
    match Format::detect(path)? {
        Format::Csv => {
            let mut file = CsvFile::open(path)?;
            let (id, score) = (file.column("id", HINT)?, file.column(column, HINT)?);
            let mut record = csv::StringRecord::new();
            while let Some(line) = file.read(&mut record)? {
                let location = RowLocation::Line(line);
                let value: f64 = record[score]
                    .trim()
                    .parse()
                    .map_err(|_| not_a_number(location, column))?;
                insert(record[id].to_owned(), value, location)?;
            }
        }
        Format::JsonLines => for_each_json_object(path, |location, object| {
            let id = match object.get("id") {
                Some(serde_json::Value::String(id)) => id.clone(),
                Some(serde_json::Value::Number(id)) => id.to_string(),
                _ => {
                    return Err(ReadError::InvalidValue {
                        path: path.to_owned(),
                        location,
                        column: "id".to_owned(),
                        problem: "missing, or neither text nor a number".to_owned(),
                    });
                }
            };
            let score = object
                .get(column)
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| not_a_number(location, column))?;
            insert(id, score, location)
        })?,
        Format::Parquet => parquet_scores(path, column, &mut insert)?,
    }
    Ok(scores
        .into_iter()
        .map(|(id, (score, _))| (id, score))
        .collect())
}

/// Shown after a missing column: the flag that named the file.
const HINT: &str = " (--scores)";

/// Feeds `insert` each Parquet row's id and score, with its row.
fn parquet_scores(
    path: &Path,
    column: &str,
    insert: &mut dyn FnMut(String, f64, RowLocation) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    let builder = open_parquet(path)?;
    let fields = builder.schema().fields().clone();
    let position = |name: &str| {
        fields
            .iter()
            .position(|field| field.name() == name)
            .ok_or_else(|| ReadError::MissingColumn {
                path: path.to_owned(),
                column: name.to_owned(),
                hint: HINT.to_owned(),
            })
    };
    let (id, score) = (position("id")?, position(column)?);
    let wrong_type = |name: &str, expected| ReadError::WrongType {
        path: path.to_owned(),
        column: name.to_owned(),
        found: fields[if name == column { score } else { id }]
            .data_type()
            .to_string(),
        expected,
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), [id, score]);
    let (id_position, score_position) = if id < score { (0, 1) } else { (1, 0) };
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|source| parquet_error(path, source))?;
    let mut row = 0u64;
    for batch in reader {
        let batch = batch.map_err(|error| arrow_error(path, error))?;
        let ids = cast(batch.column(id_position), &DataType::Utf8)
            .map_err(|_| wrong_type("id", "text"))?;
        let values = cast(batch.column(score_position), &DataType::Float64)
            .map_err(|_| wrong_type(column, "a number"))?;
        let (ids, values) = (ids.as_string::<i32>(), values.as_primitive::<Float64Type>());
        for index in 0..batch.num_rows() {
            row += 1;
            if ids.is_valid(index) && values.is_valid(index) {
                let id = ids.value(index).to_owned();
                insert(id, values.value(index), RowLocation::Row(row))?;
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
