//! A table pre-aggregated in the warehouse by the fold's own keys
//! (docs/records-sql.md): each row a group's count, read as the records
//! would have been, so billions of rows never leave the warehouse.

use std::path::Path;

use super::MAX_TTFT_BIN;
use crate::schema::RowLocation;

/// One row of a pre-aggregated table.
#[derive(Debug, Clone, Default)]
pub(super) struct AggregateRow {
    pub(super) window_start_ms: i64,
    pub(super) slice: String,
    pub(super) logical_model: Option<String>,
    pub(super) route: String,
    pub(super) reason: Option<String>,
    pub(super) model: Option<String>,
    pub(super) score_bin: Option<i64>,
    pub(super) ttft_bin: Option<i64>,
    pub(super) requests: u64,
    pub(super) cost_usd: Option<f64>,
}

/// Streams a pre-aggregated table (CSV, JSON lines or Parquet) whose
/// columns docs/records-sql.md defines.
pub(super) fn read_aggregates(
    path: &Path,
    mut visit: impl FnMut(&AggregateRow),
) -> anyhow::Result<u64> {
    use crate::schema::InputError;
    let invalid = |location: RowLocation, field: &str, problem: String| InputError::Invalid {
        path: path.to_owned(),
        location,
        field: field.to_owned(),
        problem,
    };
    let mut rows = 0u64;
    // Every count the fold keeps is at most the requests of all rows: if
    // their sum fits, no count wraps.
    let mut all_requests = 0u64;
    let mut take = |location: RowLocation, object: &serde_json::Map<String, serde_json::Value>| {
        let text = |field: &str| -> Option<String> {
            match object.get(field)? {
                serde_json::Value::String(text) if !text.is_empty() => Some(text.clone()),
                serde_json::Value::Number(number) => Some(number.to_string()),
                _ => None,
            }
        };
        let integer = |field: &str| -> Result<Option<i64>, InputError> {
            match object.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Number(number)) => number
                    .as_i64()
                    .or_else(|| {
                        number
                            .as_f64()
                            .filter(|v| v.fract() == 0.0)
                            .map(|v| v as i64)
                    })
                    .map(Some)
                    .ok_or_else(|| {
                        invalid(location, field, format!("{number} is not a whole number"))
                    }),
                Some(serde_json::Value::String(text)) if text.is_empty() => Ok(None),
                Some(serde_json::Value::String(text)) => {
                    text.trim().parse::<i64>().map(Some).map_err(|_| {
                        invalid(location, field, format!("{text:?} is not a whole number"))
                    })
                }
                Some(other) => Err(invalid(
                    location,
                    field,
                    format!("{other} is not a whole number"),
                )),
            }
        };
        let required =
            |field: &str| text(field).ok_or_else(|| invalid(location, field, "missing".to_owned()));
        let window_text = required("window_start")?;
        let window_start_ms = crate::records::parse_timestamp(&window_text)
            .map_err(|problem| invalid(location, "window_start", problem))?;
        let requests = integer("requests")?
            .ok_or_else(|| invalid(location, "requests", "missing".to_owned()))?;
        if requests < 0 {
            return Err(invalid(
                location,
                "requests",
                format!("{requests} is negative"),
            ));
        }
        all_requests = all_requests.checked_add(requests as u64).ok_or_else(|| {
            invalid(
                location,
                "requests",
                "the rows' requests add up past 2^64: they are not counts".to_owned(),
            )
        })?;
        let ttft_bin = integer("ttft_bin")?;
        if let Some(bin) = ttft_bin
            && !(0..=MAX_TTFT_BIN).contains(&bin)
        {
            return Err(invalid(
                location,
                "ttft_bin",
                format!(
                    "{bin} is no first-token bin: floor(ln(max(ttft_ms, 1)) / ln(1.01)) is 0 to {MAX_TTFT_BIN}"
                ),
            ));
        }
        let cost_usd = match text("cost_usd") {
            None => None,
            Some(text) => Some(
                text.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        invalid(
                            location,
                            "cost_usd",
                            format!("{text:?} is not a non-negative number"),
                        )
                    })?,
            ),
        };
        let row = AggregateRow {
            window_start_ms,
            slice: required("slice")?,
            logical_model: text("logical_model"),
            route: required("route")?,
            reason: text("reason"),
            model: text("model"),
            score_bin: integer("score_bin")?,
            ttft_bin,
            requests: requests as u64,
            cost_usd,
        };
        rows += 1;
        visit(&row);
        Ok(())
    };
    let unreadable = |message: String| InputError::Unreadable {
        path: path.to_owned(),
        message,
    };
    match crate::schema::Format::detect(path).map_err(|error| unreadable(error.to_string()))? {
        crate::schema::Format::Parquet => {
            let file = std::fs::File::open(path).map_err(|error| unreadable(error.to_string()))?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .and_then(|builder| builder.with_batch_size(8192).build())
                    .map_err(|error| unreadable(error.to_string()))?;
            let mut row = 0u64;
            for batch in reader {
                let batch = batch.map_err(|error| unreadable(error.to_string()))?;
                // Every column as text, as CSV gives it: one cast per batch.
                let schema = batch.schema();
                let mut columns = Vec::with_capacity(batch.num_columns());
                for (field, column) in schema.fields().iter().zip(batch.columns()) {
                    let text = arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8)
                        .map_err(|error| {
                            unreadable(format!("column {:?}: {error}", field.name()))
                        })?;
                    columns.push((field.name().clone(), text));
                }
                for index in 0..batch.num_rows() {
                    row += 1;
                    let object = columns
                        .iter()
                        .filter(|(_, text)| arrow::array::Array::is_valid(text.as_ref(), index))
                        .map(|(name, text)| {
                            let text = arrow::array::AsArray::as_string::<i32>(text.as_ref());
                            (
                                name.clone(),
                                serde_json::Value::String(text.value(index).to_owned()),
                            )
                        })
                        .collect();
                    take(RowLocation::Row(row), &object)?;
                }
            }
        }
        crate::schema::Format::JsonLines | crate::schema::Format::Csv => {
            crate::records::for_each_object(path, |location, object| take(location, object))?;
        }
    }
    if rows == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the file has no records",
        }
        .into());
    }
    Ok(rows)
}
