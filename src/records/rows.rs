//! The rows request records are read from: a JSON-lines object, a CSV
//! record, a row of Parquet columns, each giving a field's text, number or
//! timestamp to the one record builder (`read::build`).

use std::borrow::Cow;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit};

use super::fields::{FieldNames, parse_timestamp, whole_milliseconds, whole_milliseconds_of};
use super::schema::field::*;
use super::schema::{RECORD_COLUMNS, RecordKind};

/// One row of a file, as its format gives its fields.
pub(super) trait Row {
    fn text(&self, field: usize) -> Result<Option<Cow<'_, str>>, String>;
    fn number(&self, field: usize) -> Result<Option<f64>, String>;
    /// Milliseconds since 1970.
    fn timestamp(&self, field: usize) -> Result<Option<i64>, String>;
}

pub(super) struct JsonRow<'a> {
    pub(super) object: &'a serde_json::Map<String, serde_json::Value>,
    pub(super) names: &'a FieldNames,
}

impl Row for JsonRow<'_> {
    fn text(&self, field: usize) -> Result<Option<Cow<'_, str>>, String> {
        match self.object.get(self.names.source(field)) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(text)) => Ok(Some(Cow::Borrowed(text))),
            Some(serde_json::Value::Number(number)) => Ok(Some(Cow::Owned(number.to_string()))),
            // The conversation may be written as JSON itself.
            Some(value @ (serde_json::Value::Array(_) | serde_json::Value::Object(_)))
                if field == MESSAGES =>
            {
                Ok(Some(Cow::Owned(value.to_string())))
            }
            Some(other) => Err(format!("{other} is not text")),
        }
    }

    fn number(&self, field: usize) -> Result<Option<f64>, String> {
        match self.object.get(self.names.source(field)) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::Number(number)) => Ok(number.as_f64()),
            Some(other) => Err(format!("{other} is not a number")),
        }
    }

    fn timestamp(&self, field: usize) -> Result<Option<i64>, String> {
        match self.object.get(self.names.source(field)) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::Number(number)) => match number.as_i64() {
                Some(millis) => Ok(Some(millis)),
                // 1764504000000.0 is whole; 1764504000000.5 and 1e30 are not.
                None => {
                    whole_milliseconds_of(number.as_f64().unwrap_or(f64::NAN), &number.to_string())
                        .map(Some)
                }
            },
            Some(serde_json::Value::String(text)) => parse_timestamp(text).map(Some),
            Some(other) => Err(format!("{other} is not a timestamp")),
        }
    }
}

pub(super) struct CsvRow<'a> {
    /// Each field's column, in [`RECORD_COLUMNS`] order.
    pub(super) positions: &'a [Option<usize>],
    pub(super) record: &'a csv::StringRecord,
}

impl CsvRow<'_> {
    fn cell(&self, field: usize) -> Option<&str> {
        let position = self.positions[field]?;
        self.record.get(position).filter(|cell| !cell.is_empty())
    }
}

impl Row for CsvRow<'_> {
    fn text(&self, field: usize) -> Result<Option<Cow<'_, str>>, String> {
        Ok(self.cell(field).map(Cow::Borrowed))
    }

    fn number(&self, field: usize) -> Result<Option<f64>, String> {
        self.cell(field)
            .map(|cell| {
                cell.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("{cell:?} is not a number"))
            })
            .transpose()
    }

    fn timestamp(&self, field: usize) -> Result<Option<i64>, String> {
        self.cell(field).map(parse_timestamp).transpose()
    }
}

/// A Parquet batch's columns, cast once per batch.
pub(super) struct ParquetColumns {
    texts: Vec<Option<ArrayRef>>,
    numbers: Vec<Option<ArrayRef>>,
    /// A number column's values as text, where the cast to a number can
    /// fail (a text column): a value the cast made null is named by it.
    number_texts: Vec<Option<ArrayRef>>,
    timestamps: Option<ArrayRef>,
    /// The timestamps' values as text where they were not integers.
    timestamp_texts: Option<ArrayRef>,
}

impl ParquetColumns {
    pub(super) fn new(
        batch: &arrow::record_batch::RecordBatch,
        names: &FieldNames,
    ) -> Result<ParquetColumns, (String, String)> {
        let mut texts = vec![None; RECORD_COLUMNS.len()];
        let mut numbers = vec![None; RECORD_COLUMNS.len()];
        let mut number_texts = vec![None; RECORD_COLUMNS.len()];
        let mut timestamps = None;
        let mut timestamp_texts = None;
        for (field, column) in RECORD_COLUMNS.iter().enumerate() {
            let name = names.source(field);
            let Some(array) = batch.column_by_name(name) else {
                continue;
            };
            let cast = |to: &DataType| {
                arrow::compute::cast(array, to).map_err(|_| {
                    (
                        name.to_owned(),
                        format!(
                            "has type {}, expected {}",
                            array.data_type(),
                            column_kind(field)
                        ),
                    )
                })
            };
            if field == TIMESTAMP {
                timestamps = Some(match array.data_type() {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        cast(&DataType::Utf8)?
                    }
                    DataType::Timestamp(_, _) => {
                        let millis = cast(&DataType::Timestamp(TimeUnit::Millisecond, None))?;
                        arrow::compute::cast(&millis, &DataType::Int64)
                            .map_err(|error| (name.to_owned(), error.to_string()))?
                    }
                    data_type if data_type.is_integer() => cast(&DataType::Int64)?,
                    // Floats and anything else: as text, each value read as
                    // whole epoch milliseconds or refused with its row.
                    _ => {
                        let text = cast(&DataType::Utf8)?;
                        timestamp_texts = Some(text.clone());
                        text
                    }
                });
            } else if column.kind == RecordKind::Text {
                texts[field] = Some(cast(&DataType::Utf8)?);
            } else {
                if !array.data_type().is_numeric() {
                    number_texts[field] = Some(cast(&DataType::Utf8)?);
                }
                numbers[field] = Some(cast(&DataType::Float64)?);
            }
        }
        Ok(ParquetColumns {
            texts,
            numbers,
            number_texts,
            timestamps,
            timestamp_texts,
        })
    }
}

pub(super) fn column_kind(field: usize) -> &'static str {
    match RECORD_COLUMNS[field].kind {
        RecordKind::Text => "text",
        RecordKind::Millis => "epoch milliseconds, a timestamp or RFC 3339 text",
        RecordKind::Count | RecordKind::Real => "a number",
    }
}

pub(super) struct ParquetRow<'a> {
    pub(super) columns: &'a ParquetColumns,
    pub(super) index: usize,
}

impl Row for ParquetRow<'_> {
    fn text(&self, field: usize) -> Result<Option<Cow<'_, str>>, String> {
        Ok(self.columns.texts[field].as_ref().and_then(|array| {
            let array = array.as_string::<i32>();
            array
                .is_valid(self.index)
                .then(|| Cow::Borrowed(array.value(self.index)))
                .filter(|text| !text.is_empty())
        }))
    }

    fn number(&self, field: usize) -> Result<Option<f64>, String> {
        let Some(array) = &self.columns.numbers[field] else {
            return Ok(None);
        };
        let array = array.as_primitive::<Float64Type>();
        if array.is_valid(self.index) {
            return Ok(Some(array.value(self.index)));
        }
        match &self.columns.number_texts[field] {
            Some(texts) if texts.is_valid(self.index) => {
                let text = texts.as_string::<i32>().value(self.index);
                Err(format!("{text:?} is not a number"))
            }
            _ => Ok(None),
        }
    }

    fn timestamp(&self, _field: usize) -> Result<Option<i64>, String> {
        let Some(array) = &self.columns.timestamps else {
            return Ok(None);
        };
        if !array.is_valid(self.index) {
            return Ok(None);
        }
        match array.data_type() {
            DataType::Utf8 if self.columns.timestamp_texts.is_some() => {
                let text = array.as_string::<i32>().value(self.index);
                whole_milliseconds(text).map(Some)
            }
            DataType::Utf8 => parse_timestamp(array.as_string::<i32>().value(self.index)).map(Some),
            _ => Ok(Some(array.as_primitive::<Int64Type>().value(self.index))),
        }
    }
}
