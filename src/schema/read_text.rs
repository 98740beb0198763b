//! The CSV and JSON-lines readers. Both parse cells straight into builders of
//! each known column's canonical type, so a bad cell is reported with its line
//! as soon as it is seen; columns routeval does not know are carried as text.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanBuilder, Float64Builder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use serde_json::Value;

use super::assemble::{BATCH_ROWS, ColumnMap, ReadOptions, assemble, column_position};
use super::error::ReadError;
use super::graded::{Column, ColumnKind, GradedBatch, Present, RowLocation};
use super::table_files::{CsvFile, for_each_json_object};

pub(super) fn read_csv(
    path: &Path,
    options: &ReadOptions,
    emit: &mut dyn FnMut(GradedBatch) -> Result<(), ReadError>,
) -> Result<Present, ReadError> {
    let mut file = CsvFile::open(path)?;
    let headers = file.headers().clone();
    if headers.iter().all(str::is_empty) {
        return Err(ReadError::Empty {
            path: path.to_owned(),
        });
    }
    let names: Vec<&str> = headers.iter().collect();
    let map = ColumnMap::resolve(path, &names, options)?;
    let mut builder = TextBatch::new(path, options, &map, &names);
    let mut record = csv::StringRecord::new();
    while let Some(line) = file.read(&mut record)? {
        builder.push_row(line, |index| Cell::Text(record.get(index).unwrap_or("")))?;
        if builder.rows == BATCH_ROWS {
            emit(builder.finish())?;
        }
    }
    if builder.rows > 0 {
        emit(builder.finish())?;
    }
    Ok(map.present(options))
}

pub(super) fn read_json_lines(
    path: &Path,
    options: &ReadOptions,
    emit: &mut dyn FnMut(GradedBatch) -> Result<(), ReadError>,
) -> Result<Present, ReadError> {
    // A first pass collects every key, so that a column that is missing from
    // some lines is still one column, and a missing required column is named
    // before any row is read.
    let mut names: Vec<String> = Vec::new();
    for_each_json_object(path, |_, object| {
        for key in object.keys() {
            if !names.contains(key) {
                names.push(key.clone());
            }
        }
        Ok(())
    })?;
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let map = ColumnMap::resolve(path, &name_refs, options)?;
    let mut builder = TextBatch::new(path, options, &map, &name_refs);
    for_each_json_object(path, |location, object| {
        builder.push_row(location.number(), |index| {
            object.get(&names[index]).map_or(Cell::Absent, Cell::Json)
        })?;
        if builder.rows == BATCH_ROWS {
            emit(builder.finish())?;
        }
        Ok(())
    })?;
    if builder.rows > 0 {
        emit(builder.finish())?;
    }
    Ok(map.present(options))
}

/// One cell of a text file, before conversion.
#[derive(Debug, Clone, Copy)]
enum Cell<'a> {
    Text(&'a str),
    Json(&'a Value),
    Absent,
}

enum Builder {
    Utf8(StringBuilder),
    /// A column routeval does not know: text as it is, other JSON values as
    /// their JSON text.
    Carried(StringBuilder),
    Float64(Float64Builder),
    Boolean(BooleanBuilder),
}

impl Builder {
    fn new(kind: ColumnKind) -> Builder {
        match kind {
            ColumnKind::Utf8 => Builder::Utf8(StringBuilder::new()),
            ColumnKind::Float64 => Builder::Float64(Float64Builder::with_capacity(BATCH_ROWS)),
            ColumnKind::Boolean => Builder::Boolean(BooleanBuilder::with_capacity(BATCH_ROWS)),
        }
    }

    /// Appends `cell`, or says what is wrong with it.
    fn push(&mut self, cell: Cell<'_>) -> Result<(), String> {
        match self {
            Builder::Utf8(builder) => builder.append_option(text_of(cell)?),
            Builder::Carried(builder) => builder.append_option(carried_text_of(cell)),
            Builder::Float64(builder) => builder.append_option(number_of(cell)?),
            Builder::Boolean(builder) => builder.append_option(flag_of(cell)?),
        }
        Ok(())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Utf8(builder) | Builder::Carried(builder) => Arc::new(builder.finish()),
            Builder::Float64(builder) => Arc::new(builder.finish()),
            Builder::Boolean(builder) => Arc::new(builder.finish()),
        }
    }
}

fn text_of(cell: Cell<'_>) -> Result<Option<String>, String> {
    Ok(match cell {
        Cell::Absent | Cell::Json(Value::Null) => None,
        Cell::Text("") => None,
        Cell::Text(text) => Some(text.to_owned()),
        Cell::Json(Value::String(text)) => Some(text.clone()),
        Cell::Json(Value::Number(number)) => Some(number.to_string()),
        Cell::Json(other) => return Err(format!("expected a string, found {other}")),
    })
}

fn carried_text_of(cell: Cell<'_>) -> Option<String> {
    match cell {
        Cell::Json(Value::String(text)) => Some(text.clone()),
        Cell::Json(Value::Null) | Cell::Absent => None,
        Cell::Json(other) => Some(other.to_string()),
        Cell::Text(text) => (!text.is_empty()).then(|| text.to_owned()),
    }
}

fn number_of(cell: Cell<'_>) -> Result<Option<f64>, String> {
    match cell {
        Cell::Absent | Cell::Json(Value::Null) => Ok(None),
        Cell::Text(text) if text.trim().is_empty() => Ok(None),
        Cell::Text(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("expected a number, found {text:?}")),
        Cell::Json(Value::Number(number)) => Ok(number.as_f64()),
        Cell::Json(other) => Err(format!("expected a number, found {other}")),
    }
}

fn flag_of(cell: Cell<'_>) -> Result<Option<bool>, String> {
    match cell {
        Cell::Absent | Cell::Json(Value::Null) => Ok(None),
        Cell::Text(text) => match text.trim().to_ascii_lowercase().as_str() {
            "" => Ok(None),
            "true" | "1" => Ok(Some(true)),
            "false" | "0" => Ok(Some(false)),
            _ => Err(format!("expected true or false, found {text:?}")),
        },
        Cell::Json(Value::Bool(flag)) => Ok(Some(*flag)),
        Cell::Json(Value::Number(number)) if number.as_u64() == Some(1) => Ok(Some(true)),
        Cell::Json(Value::Number(number)) if number.as_u64() == Some(0) => Ok(Some(false)),
        Cell::Json(other) => Err(format!("expected true or false, found {other}")),
    }
}

/// Builders for one batch of a text file's rows.
struct TextBatch<'a> {
    path: &'a Path,
    options: &'a ReadOptions,
    /// (column index in the file, known column or `None` for carried, builder)
    columns: Vec<(usize, Option<Column>, Builder)>,
    extra_fields: Vec<Field>,
    lines: Vec<u64>,
    first_row: u64,
    rows: usize,
}

impl<'a> TextBatch<'a> {
    fn new(path: &'a Path, options: &'a ReadOptions, map: &ColumnMap, names: &[&str]) -> Self {
        let mut columns: Vec<(usize, Option<Column>, Builder)> = map
            .wanted(options)
            .map(|(column, index)| (index, Some(column), Builder::new(column.kind())))
            .collect();
        let mut extra_fields = Vec::new();
        for &index in &map.extra {
            columns.push((index, None, Builder::Carried(StringBuilder::new())));
            extra_fields.push(Field::new(names[index], DataType::Utf8, true));
        }
        TextBatch {
            path,
            options,
            columns,
            extra_fields,
            lines: Vec::with_capacity(BATCH_ROWS),
            first_row: 0,
            rows: 0,
        }
    }

    fn push_row<'c>(
        &mut self,
        line: u64,
        cell_at: impl Fn(usize) -> Cell<'c>,
    ) -> Result<(), ReadError> {
        for (index, column, builder) in &mut self.columns {
            let cell = cell_at(*index);
            builder
                .push(cell)
                .map_err(|problem| ReadError::InvalidValue {
                    path: self.path.to_owned(),
                    location: RowLocation::Line(line),
                    column: column
                        .map_or("", |column| self.options.names.source(column))
                        .to_owned(),
                    problem,
                })?;
        }
        self.lines.push(line);
        self.rows += 1;
        Ok(())
    }

    fn finish(&mut self) -> GradedBatch {
        let mut known: [Option<ArrayRef>; Column::ALL.len()] = Default::default();
        let mut extra = Vec::new();
        let mut extra_fields = self.extra_fields.iter();
        for (_, column, builder) in &mut self.columns {
            let array = builder.finish();
            match column {
                Some(column) => known[column_position(*column)] = Some(array),
                None => {
                    let field = extra_fields.next().expect("one field per carried column");
                    extra.push((Arc::new(field.clone()), array));
                }
            }
        }
        let lines: Arc<[u64]> = std::mem::take(&mut self.lines).into();
        let batch = assemble(self.first_row, Some(lines), known, extra, self.rows);
        self.first_row += self.rows as u64;
        self.rows = 0;
        batch
    }
}
