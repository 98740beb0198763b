//! Request traces to replay: Mooncake's JSON lines (`timestamp` in ms,
//! `input_length`, `output_length`, `hash_ids`: one id per 512-token prompt
//! block, shared leading ids meaning a shared prefix), the same columns in
//! CSV or Parquet, and a routeval run converted so a team can replay its own
//! prompts. Requests stream one at a time: a trace of any length is read in
//! memory bounded by one request.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, UInt64Type};
use serde::Deserialize;

use crate::schema::{Format, RowLocation};
use crate::schema::{InputError, ReadError};

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Milliseconds from the start of the trace.
    pub arrival_ms: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// One id per prompt block; equal leading ids mean an equal prefix.
    pub blocks: Arc<[u64]>,
}

/// A request's fields as a file gives them, before checking.
#[derive(Debug, Default, Deserialize)]
struct RawRequest {
    timestamp: Option<f64>,
    input_length: Option<f64>,
    output_length: Option<f64>,
    hash_ids: Option<Vec<i128>>,
}

/// Checks requests in file order: present, whole, non-negative, and sorted
/// by time.
struct Checker<'a> {
    path: &'a Path,
    previous_ms: f64,
    count: u64,
}

impl Checker<'_> {
    fn check(&mut self, location: RowLocation, raw: RawRequest) -> Result<Request, InputError> {
        let invalid = |field: &'static str, problem: String| InputError::Invalid {
            path: self.path.to_owned(),
            location,
            field: field.to_owned(),
            problem,
        };
        let whole = |field: &'static str, value: Option<f64>| -> Result<f64, InputError> {
            let value = value.ok_or_else(|| invalid(field, "missing".to_owned()))?;
            if !value.is_finite() || value < 0.0 {
                return Err(invalid(
                    field,
                    format!("{value} is negative or not a number"),
                ));
            }
            if value.fract() != 0.0 {
                return Err(invalid(field, format!("{value} is not a whole number")));
            }
            Ok(value)
        };
        let arrival_ms = raw
            .timestamp
            .ok_or_else(|| invalid("timestamp", "missing".to_owned()))?;
        if !arrival_ms.is_finite() || arrival_ms < 0.0 {
            return Err(invalid(
                "timestamp",
                format!("{arrival_ms} is negative or not a number"),
            ));
        }
        if arrival_ms < self.previous_ms {
            return Err(invalid(
                "timestamp",
                format!(
                    "{arrival_ms} comes before the previous request's {}: the trace must be sorted by time",
                    self.previous_ms
                ),
            ));
        }
        let tokens = |field: &'static str, value: Option<f64>| -> Result<u32, InputError> {
            let value = whole(field, value)?;
            if value > f64::from(u32::MAX) {
                return Err(invalid(field, format!("{value} tokens is too many")));
            }
            Ok(value as u32)
        };
        let input_tokens = tokens("input_length", raw.input_length)?;
        let output_tokens = tokens("output_length", raw.output_length)?;
        let ids = raw
            .hash_ids
            .ok_or_else(|| invalid("hash_ids", "missing".to_owned()))?;
        let mut blocks = Vec::with_capacity(ids.len());
        for id in ids {
            let id = u64::try_from(id).map_err(|_| {
                invalid(
                    "hash_ids",
                    format!("{id} is not a block id (0 to 2^64 - 1)"),
                )
            })?;
            blocks.push(id);
        }
        self.previous_ms = arrival_ms;
        self.count += 1;
        Ok(Request {
            arrival_ms,
            input_tokens,
            output_tokens,
            blocks: blocks.into(),
        })
    }
}

/// Streams the checked requests of the trace at `path` to `visit`, in file
/// order; returns how many there were.
pub fn for_each_request(path: &Path, mut visit: impl FnMut(Request)) -> Result<u64, InputError> {
    let unreadable = |message: String| InputError::Unreadable {
        path: path.to_owned(),
        message,
    };
    if path.is_dir() {
        return Err(unreadable("is a directory, not a trace".to_owned()));
    }
    let format = Format::detect(path)?;
    let mut checker = Checker {
        path,
        previous_ms: 0.0,
        count: 0,
    };
    let mut accept = |location: RowLocation, raw: RawRequest| -> Result<(), InputError> {
        visit(checker.check(location, raw)?);
        Ok(())
    };
    match format {
        Format::JsonLines => json_lines(path, &mut accept)?,
        Format::Csv => csv_rows(path, &mut accept)?,
        Format::Parquet => parquet_rows(path, &mut accept)?,
    }
    if checker.count == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the trace has no requests",
        });
    }
    Ok(checker.count)
}

type Accept<'a> = dyn FnMut(RowLocation, RawRequest) -> Result<(), InputError> + 'a;

fn json_lines(path: &Path, accept: &mut Accept<'_>) -> Result<(), InputError> {
    // serde names the field whose value has the wrong type.
    crate::schema::for_each_json_row(path, "a trace request", |number, raw| {
        accept(RowLocation::Line(number), raw)
    })
}

fn csv_rows(path: &Path, accept: &mut Accept<'_>) -> Result<(), InputError> {
    let mut file = crate::schema::CsvFile::open(path)?;
    let column = |name: &str| file.headers().iter().position(|header| header == name);
    let columns = [
        column("timestamp"),
        column("input_length"),
        column("output_length"),
        column("hash_ids"),
    ];
    let mut record = csv::StringRecord::new();
    while let Some(line) = file.read(&mut record)? {
        let location = RowLocation::Line(line);
        let field = |index: Option<usize>| {
            index
                .and_then(|index| record.get(index))
                .filter(|text| !text.is_empty())
        };
        let number = |index: usize, name: &'static str| -> Result<Option<f64>, InputError> {
            field(columns[index])
                .map(|text| {
                    text.trim().parse::<f64>().map_err(|_| InputError::Invalid {
                        path: path.to_owned(),
                        location,
                        field: name.to_owned(),
                        problem: format!("{text:?} is not a number"),
                    })
                })
                .transpose()
        };
        let hash_ids = field(columns[3])
            .map(|text| {
                parse_ids(text).map_err(|problem| InputError::Invalid {
                    path: path.to_owned(),
                    location,
                    field: "hash_ids".to_owned(),
                    problem,
                })
            })
            .transpose()?;
        let raw = RawRequest {
            timestamp: number(0, "timestamp")?,
            input_length: number(1, "input_length")?,
            output_length: number(2, "output_length")?,
            hash_ids,
        };
        accept(location, raw)?;
    }
    Ok(())
}

/// Block ids written as text: space-separated, optionally in `[...]` with
/// commas, as CSV and string columns carry them.
fn parse_ids(text: &str) -> Result<Vec<i128>, String> {
    text.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.parse::<i128>()
                .map_err(|_| format!("{part:?} is not a block id"))
        })
        .collect()
}

fn parquet_rows(path: &Path, accept: &mut Accept<'_>) -> Result<(), InputError> {
    let reader = crate::schema::open_parquet(path)?
        .with_batch_size(8192)
        .build()
        .map_err(|source| crate::schema::parquet_error(path, source))?;
    let mut row = 0u64;
    for batch in reader {
        let batch = batch.map_err(|error| crate::schema::arrow_error(path, error))?;
        let numbers = |name: &'static str| -> Result<Option<Vec<Option<f64>>>, InputError> {
            let Some(column) = batch.column_by_name(name) else {
                return Ok(None);
            };
            let wrong_type = || ReadError::WrongType {
                path: path.to_owned(),
                column: name.to_owned(),
                found: column.data_type().to_string(),
                expected: "a number",
            };
            // Text cast to a number would make every word a silent null.
            if !column.data_type().is_numeric() {
                return Err(wrong_type().into());
            }
            let cast =
                arrow::compute::cast(column, &DataType::Float64).map_err(|_| wrong_type())?;
            Ok(Some(cast.as_primitive::<Float64Type>().iter().collect()))
        };
        let timestamps = numbers("timestamp")?;
        let inputs = numbers("input_length")?;
        let outputs = numbers("output_length")?;
        let ids = batch.column_by_name("hash_ids");
        for index in 0..batch.num_rows() {
            row += 1;
            let location = RowLocation::Row(row);
            let pick = |values: &Option<Vec<Option<f64>>>| {
                values.as_ref().and_then(|values| values[index])
            };
            let hash_ids = match ids {
                None => None,
                Some(column) if column.is_null(index) => None,
                Some(column) => Some(parquet_ids(column.as_ref(), index).map_err(|problem| {
                    InputError::Invalid {
                        path: path.to_owned(),
                        location,
                        field: "hash_ids".to_owned(),
                        problem,
                    }
                })?),
            };
            let raw = RawRequest {
                timestamp: pick(&timestamps),
                input_length: pick(&inputs),
                output_length: pick(&outputs),
                hash_ids,
            };
            accept(location, raw)?;
        }
    }
    Ok(())
}

/// Row `index` of a `hash_ids` column: a list of integers, or text.
fn parquet_ids(column: &dyn Array, index: usize) -> Result<Vec<i128>, String> {
    match column.data_type() {
        DataType::Utf8 => parse_ids(column.as_string::<i32>().value(index)),
        DataType::LargeUtf8 => parse_ids(column.as_string::<i64>().value(index)),
        DataType::List(_) | DataType::LargeList(_) => {
            let values = match column.data_type() {
                DataType::List(_) => column.as_list::<i32>().value(index),
                _ => column.as_list::<i64>().value(index),
            };
            let null = || "a null block id".to_owned();
            let ints = |values: &dyn Array| -> Result<Vec<i128>, String> {
                match values.data_type() {
                    DataType::UInt64 => values
                        .as_primitive::<UInt64Type>()
                        .iter()
                        .map(|id| id.map(i128::from).ok_or_else(null))
                        .collect(),
                    // A float id cast to an integer would be cut, 1.7 to 1.
                    other if !other.is_integer() => {
                        Err(format!("a list of {other}, expected integers"))
                    }
                    other => {
                        let cast = arrow::compute::cast(values, &DataType::Int64)
                            .map_err(|_| format!("a list of {other}, expected integers"))?;
                        cast.as_primitive::<Int64Type>()
                            .iter()
                            .map(|id| id.map(i128::from).ok_or_else(null))
                            .collect()
                    }
                }
            };
            ints(values.as_ref())
        }
        other => Err(format!("type {other}, expected a list of integers or text")),
    }
}

/// Characters per block when a prompt's text is cut into blocks: 512 tokens
/// at the 4 characters per token routeval estimates usage with elsewhere.
pub const CHARACTERS_PER_BLOCK: usize = 2048;

/// A prompt's text as block ids: each id hashes the previous id and the
/// block's characters, so equal ids mean an equal prefix, as in Mooncake's
/// traces. The last block may be short.
pub fn text_blocks(text: &str) -> Vec<u64> {
    let hasher = foldhash::fast::FixedState::with_seed(0x626c_6f63_6b73);
    let mut ids = Vec::with_capacity(text.len() / CHARACTERS_PER_BLOCK + 1);
    let mut previous = 0u64;
    let mut block = String::with_capacity(CHARACTERS_PER_BLOCK * 4);
    let mut characters = 0;
    let mut flush = |block: &mut String, previous: &mut u64| {
        let mut state = hasher.build_hasher();
        state.write_u64(*previous);
        state.write(block.as_bytes());
        *previous = state.finish();
        ids.push(*previous);
        block.clear();
    };
    for character in text.chars() {
        block.push(character);
        characters += 1;
        if characters == CHARACTERS_PER_BLOCK {
            flush(&mut block, &mut previous);
            characters = 0;
        }
    }
    if !block.is_empty() {
        flush(&mut block, &mut previous);
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_text_prefixes_share_leading_block_ids() {
        let system = "s".repeat(CHARACTERS_PER_BLOCK * 2);
        let first = text_blocks(&format!("{system}{}", "a".repeat(100)));
        let second = text_blocks(&format!("{system}{}", "b".repeat(3000)));
        assert_eq!(first.len(), 3);
        assert_eq!(second.len(), 4);
        assert_eq!(first[..2], second[..2]);
        assert_ne!(first[2], second[2]);
        assert!(text_blocks("").is_empty());
    }

    #[test]
    fn ids_in_text_take_spaces_or_brackets() {
        assert_eq!(parse_ids("1 2  3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_ids("[4, 5]").unwrap(), vec![4, 5]);
        assert!(parse_ids("1 x").unwrap_err().contains("\"x\""));
    }
}
