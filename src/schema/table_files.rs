//! The one reader per file format, each with one error path
//! ([`ReadError`], which names the file and the line or row): JSON lines
//! (64 KiB reads, 1-based physical line numbers, lines of only whitespace,
//! Unicode's included, skipped), CSV ([`CsvFile`]), Parquet
//! ([`open_parquet`]), and any of the three as one JSON object a row
//! ([`for_each_object`]). Also the one way rows become JSON lines.

use std::fs::File;
use std::io::BufRead;
use std::path::Path;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

use super::error::ReadError;
use super::format::Format;
use super::graded::RowLocation;

/// `rows` as JSON lines: one compact object a line, each ending in `\n`.
pub fn json_lines<T: serde::Serialize>(rows: &[T]) -> Vec<u8> {
    let mut text = Vec::new();
    for row in rows {
        serde_json::to_writer(&mut text, row).expect("a row serialises to JSON");
        text.push(b'\n');
    }
    text
}

/// Streams each non-blank line of `path` (without its newline) to `visit`
/// with its 1-based line number; `io_error` turns a failure to open or read
/// the file into the caller's error.
pub fn for_each_line<E>(
    path: &Path,
    io_error: impl Fn(std::io::Error) -> E,
    mut visit: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let file = File::open(path).map_err(&io_error)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(&io_error)? == 0 {
            return Ok(());
        }
        number += 1;
        let blank = line.iter().all(u8::is_ascii_whitespace)
            || std::str::from_utf8(&line).is_ok_and(|text| text.trim().is_empty());
        if blank {
            continue;
        }
        visit(number, &line)?;
    }
}

/// Streams each line of a JSON-lines file as a `T` to `visit`, with its
/// line; a line that is not one is refused as "not a {what}", serde's
/// message naming the field.
pub fn for_each_json_row<T: serde::de::DeserializeOwned, E: From<ReadError>>(
    path: &Path,
    what: &str,
    mut visit: impl FnMut(u64, T) -> Result<(), E>,
) -> Result<(), E> {
    for_each_line(
        path,
        |source| io_error(path, source).into(),
        |number, line| {
            let row = serde_json::from_slice(line).map_err(|error| ReadError::Malformed {
                path: path.to_owned(),
                location: RowLocation::Line(number),
                problem: format!("not {what}: {error}"),
            })?;
            visit(number, row)
        },
    )
}

/// Streams each line of a JSON-lines file as an object to `visit`, with its
/// line; a line that is not UTF-8, not an object, or gives a key twice is
/// refused with its line.
pub fn for_each_json_object<E: From<ReadError>>(
    path: &Path,
    mut visit: impl FnMut(RowLocation, Map<String, Value>) -> Result<(), E>,
) -> Result<(), E> {
    for_each_line(
        path,
        |source| io_error(path, source).into(),
        |number, bytes| {
            let location = RowLocation::Line(number);
            let malformed = |problem: String| ReadError::Malformed {
                path: path.to_owned(),
                location,
                problem,
            };
            // One pass over the text; it is checked for UTF-8 again only to
            // say why a line was refused.
            let UniqueKeys(object) = serde_json::from_slice(bytes).map_err(|error| {
                malformed(match std::str::from_utf8(bytes) {
                    Err(not_text) => format!("not UTF-8 text: {not_text}"),
                    Ok(_) => format!("not a JSON object: {error}"),
                })
            })?;
            visit(location, object)
        },
    )
}

/// Streams each row of a CSV, JSON-lines or Parquet file (by its extension)
/// as a JSON object of its values to `visit`: CSV cells and Parquet values
/// as text (every column cast once a batch), empty cells and nulls left out.
pub fn for_each_object<E: From<ReadError>>(
    path: &Path,
    mut visit: impl FnMut(RowLocation, Map<String, Value>) -> Result<(), E>,
) -> Result<(), E> {
    match Format::detect(path)? {
        Format::JsonLines => for_each_json_object(path, visit),
        Format::Csv => for_each_csv_record(path, |headers, location, record| {
            let object = headers
                .iter()
                .zip(record.iter())
                .filter(|(_, cell)| !cell.is_empty())
                .map(|(header, cell)| (header.to_owned(), Value::String(cell.to_owned())))
                .collect();
            visit(location, object)
        }),
        Format::Parquet => for_each_parquet_object(path, visit),
    }
}

fn for_each_parquet_object<E: From<ReadError>>(
    path: &Path,
    mut visit: impl FnMut(RowLocation, Map<String, Value>) -> Result<(), E>,
) -> Result<(), E> {
    let reader = open_parquet(path)?
        .with_batch_size(8192)
        .build()
        .map_err(|source| parquet_error(path, source))?;
    let mut row = 0u64;
    for batch in reader {
        let batch = batch.map_err(|error| arrow_error(path, error))?;
        let schema = batch.schema();
        let mut columns = Vec::with_capacity(batch.num_columns());
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            let text = arrow::compute::cast(column, &DataType::Utf8).map_err(|error| {
                ReadError::WrongType {
                    path: path.to_owned(),
                    column: field.name().clone(),
                    found: format!("{} ({error})", column.data_type()),
                    expected: "a type that reads as text",
                }
            })?;
            columns.push((field.name(), text));
        }
        for index in 0..batch.num_rows() {
            row += 1;
            let object = columns
                .iter()
                .filter(|(_, text)| text.is_valid(index))
                .map(|(name, text)| {
                    let value = text.as_string::<i32>().value(index);
                    ((*name).clone(), Value::String(value.to_owned()))
                })
                .collect();
            visit(RowLocation::Row(row), object)?;
        }
    }
    Ok(())
}

/// A JSON object that refuses a key given twice, as the CSV and Parquet
/// readers refuse a repeated column: "last one wins" would hide a mistake.
#[derive(Debug)]
pub struct UniqueKeys(pub Map<String, Value>);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = UniqueKeys;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<UniqueKeys, A::Error> {
                let mut object = Map::new();
                while let Some((key, value)) = access.next_entry::<String, Value>()? {
                    match object.entry(key) {
                        serde_json::map::Entry::Vacant(entry) => {
                            entry.insert(value);
                        }
                        serde_json::map::Entry::Occupied(entry) => {
                            return Err(serde::de::Error::custom(format!(
                                "key \"{}\" appears more than once",
                                entry.key()
                            )));
                        }
                    }
                }
                Ok(UniqueKeys(object))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// A CSV file opened with its header row read: its columns found by name,
/// its records read one at a time into a caller's buffer with their line.
#[derive(Debug)]
pub struct CsvFile<'p> {
    path: &'p Path,
    reader: csv::Reader<File>,
    headers: csv::StringRecord,
}

impl<'p> CsvFile<'p> {
    pub fn open(path: &'p Path) -> Result<Self, ReadError> {
        let file = File::open(path).map_err(|source| io_error(path, source))?;
        let mut reader = csv::Reader::from_reader(file);
        let headers = reader
            .headers()
            .map_err(|error| csv_error(path, error))?
            .clone();
        Ok(Self {
            path,
            reader,
            headers,
        })
    }

    pub fn headers(&self) -> &csv::StringRecord {
        &self.headers
    }

    /// Where the column `name` is; a missing one is named, with `hint`
    /// (" (--scores)") after it.
    pub fn column(&self, name: &str, hint: &str) -> Result<usize, ReadError> {
        self.headers
            .iter()
            .position(|header| header.trim() == name)
            .ok_or_else(|| ReadError::MissingColumn {
                path: self.path.to_owned(),
                column: name.to_owned(),
                hint: hint.to_owned(),
            })
    }

    /// Reads the next record into `record`; its 1-based physical line, or
    /// `None` at the end.
    pub fn read(&mut self, record: &mut csv::StringRecord) -> Result<Option<u64>, ReadError> {
        let more = self
            .reader
            .read_record(record)
            .map_err(|error| csv_error(self.path, error))?;
        Ok(more.then(|| record.position().map_or(0, csv::Position::line)))
    }
}

/// Streams the records of the CSV file at `path` to `visit` with the
/// header row and each record's 1-based physical line.
pub fn for_each_csv_record<E: From<ReadError>>(
    path: &Path,
    mut visit: impl FnMut(&csv::StringRecord, RowLocation, &csv::StringRecord) -> Result<(), E>,
) -> Result<(), E> {
    let mut file = CsvFile::open(path)?;
    let mut record = csv::StringRecord::new();
    while let Some(line) = file.read(&mut record)? {
        visit(&file.headers, RowLocation::Line(line), &record)?;
    }
    Ok(())
}

/// A Parquet file opened for reading: its metadata read and checked.
pub fn open_parquet(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, ReadError> {
    let file = File::open(path).map_err(|source| io_error(path, source))?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| parquet_error(path, source))
}

pub fn parquet_error(path: &Path, source: parquet::errors::ParquetError) -> ReadError {
    ReadError::Parquet {
        path: path.to_owned(),
        source,
    }
}

/// A batch that could not be decoded.
pub fn arrow_error(path: &Path, error: arrow::error::ArrowError) -> ReadError {
    parquet_error(
        path,
        parquet::errors::ParquetError::ArrowError(error.to_string()),
    )
}

fn io_error(path: &Path, source: std::io::Error) -> ReadError {
    ReadError::Io {
        path: path.to_owned(),
        source,
    }
}

fn csv_error(path: &Path, error: csv::Error) -> ReadError {
    let location = RowLocation::Line(error.position().map_or(1, csv::Position::line));
    let malformed = |problem: String| ReadError::Malformed {
        path: path.to_owned(),
        location,
        problem,
    };
    match error.into_kind() {
        csv::ErrorKind::Io(source) => io_error(path, source),
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => malformed(format!("{len} fields where the header has {expected_len}")),
        csv::ErrorKind::Utf8 { err, .. } => malformed(format!("invalid UTF-8: {err}")),
        other => malformed(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_are_skipped_and_numbers_are_physical() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("x.jsonl");
        std::fs::write(&path, "a\n\n  \nb\n\u{a0}\nc").unwrap();
        let mut seen = Vec::new();
        for_each_line(
            &path,
            |error| error.to_string(),
            |number, line| {
                seen.push((number, String::from_utf8(line.to_vec()).unwrap()));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(
            seen,
            [
                (1, "a\n".to_owned()),
                (4, "b\n".to_owned()),
                (6, "c".to_owned())
            ]
        );
    }

    fn objects(name: &str, text: &[u8]) -> Result<Vec<(String, String)>, ReadError> {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut seen = Vec::new();
        for_each_object(&path, |location, object| {
            seen.push((location.to_string(), Value::Object(object).to_string()));
            Ok::<(), ReadError>(())
        })?;
        Ok(seen)
    }

    #[test]
    fn csv_and_json_lines_rows_are_the_same_objects() {
        let from_csv = objects("a.csv", b"id,slice\n1,\n\"2\",b\n").unwrap();
        let from_lines = objects(
            "a.jsonl",
            b"{\"id\":\"1\"}\n\n{\"id\":\"2\",\"slice\":\"b\"}\n",
        )
        .unwrap();
        assert_eq!(
            from_csv,
            [
                ("line 2".to_owned(), r#"{"id":"1"}"#.to_owned()),
                ("line 3".to_owned(), r#"{"id":"2","slice":"b"}"#.to_owned())
            ]
        );
        assert_eq!(
            from_lines,
            [
                ("line 1".to_owned(), r#"{"id":"1"}"#.to_owned()),
                ("line 3".to_owned(), r#"{"id":"2","slice":"b"}"#.to_owned())
            ]
        );
    }

    #[test]
    fn each_format_names_the_line_it_cannot_read() {
        let short = objects("a.csv", b"id,slice\n1,a\n2\n")
            .unwrap_err()
            .to_string();
        assert!(
            short.ends_with("a.csv: line 3: 1 fields where the header has 2"),
            "{short}"
        );
        let twice = objects("a.jsonl", b"{\"id\":1}\n{\"id\":1,\"id\":2}\n")
            .unwrap_err()
            .to_string();
        assert!(
            twice.contains("a.jsonl: line 2: not a JSON object: key \"id\" appears more than once"),
            "{twice}"
        );
        let not_parquet = objects("a.parquet", b"id\n1\n").unwrap_err().to_string();
        assert!(
            not_parquet.contains("a.parquet: not a readable Parquet file"),
            "{not_parquet}"
        );
    }
}
