//! The Parquet reader: projects the columns a stage needs, checks their types
//! once against the file's schema, and casts compatible types (integers,
//! 32-bit floats, dictionary or view strings) to the canonical ones.

use std::path::Path;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field};
use parquet::arrow::ProjectionMask;

use super::GradedBatch;
use super::assemble::{BATCH_ROWS, ColumnMap, ReadOptions, assemble, column_position};
use super::error::ReadError;
use super::graded::{Column, ColumnKind, Present, SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use super::table_files::{arrow_error, open_parquet, parquet_error};

/// Row counts of the file's row groups.
pub(super) fn row_groups(path: &Path) -> Result<Vec<u64>, ReadError> {
    Ok(open_parquet(path)?
        .metadata()
        .row_groups()
        .iter()
        .map(|group| group.num_rows() as u64)
        .collect())
}

/// A contiguous run of row groups and the file row its first row is.
#[derive(Debug, Clone)]
pub(super) struct RowGroups {
    pub groups: Vec<usize>,
    pub first_row: u64,
}

pub(super) fn read(
    path: &Path,
    options: &ReadOptions,
    part: Option<&RowGroups>,
    emit: &mut dyn FnMut(GradedBatch) -> Result<(), ReadError>,
) -> Result<Present, ReadError> {
    let builder = open_parquet(path)?;
    check_schema_version(
        path,
        builder.metadata().file_metadata().key_value_metadata(),
    )?;

    let arrow_schema = builder.schema().clone();
    let names: Vec<&str> = arrow_schema
        .fields()
        .iter()
        .map(|field| field.name().as_str())
        .collect();
    let map = ColumnMap::resolve(path, &names, options)?;

    let mut selected: Vec<(Target, usize)> = map
        .wanted(options)
        .map(|(column, index)| (Target::Known(column), index))
        .chain(map.extra.iter().map(|&index| (Target::Extra, index)))
        .collect();
    for (target, index) in &selected {
        if let Target::Known(column) = target {
            check_type(path, options, *column, arrow_schema.field(*index))?;
        }
    }
    // The reader returns projected columns in file order.
    selected.sort_by_key(|&(_, index)| index);
    let mask = ProjectionMask::roots(
        builder.parquet_schema(),
        selected.iter().map(|&(_, index)| index),
    );
    let mut builder = builder.with_projection(mask).with_batch_size(BATCH_ROWS);
    if let Some(part) = part {
        builder = builder.with_row_groups(part.groups.clone());
    }
    let reader = builder
        .build()
        .map_err(|source| parquet_error(path, source))?;

    let mut first_row = part.map_or(0, |part| part.first_row);
    for batch in reader {
        let batch = batch.map_err(|error| arrow_error(path, error))?;
        let mut known: [Option<ArrayRef>; Column::ALL.len()] = Default::default();
        let mut extra = Vec::new();
        for (position, (target, index)) in selected.iter().enumerate() {
            let array = batch.column(position);
            match target {
                Target::Known(column) => {
                    known[column_position(*column)] = Some(to_canonical(array, *column));
                }
                Target::Extra => {
                    let field = arrow_schema.field(*index);
                    extra.push((Arc::new(field.clone()), array.clone()));
                }
            }
        }
        let rows = batch.num_rows();
        emit(assemble(first_row, None, known, extra, rows))?;
        first_row += rows as u64;
    }
    Ok(map.present(options))
}

#[derive(Debug, Clone, Copy)]
enum Target {
    Known(Column),
    Extra,
}

fn check_schema_version(
    path: &Path,
    metadata: Option<&Vec<parquet::file::metadata::KeyValue>>,
) -> Result<(), ReadError> {
    let version = metadata
        .into_iter()
        .flatten()
        .find(|entry| entry.key == SCHEMA_VERSION_KEY)
        .and_then(|entry| entry.value.clone());
    match version {
        Some(found)
            if found
                .parse::<u32>()
                .is_ok_and(|found| found <= SCHEMA_VERSION) =>
        {
            Ok(())
        }
        Some(found) => Err(ReadError::NewerSchema {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        }),
        None => Ok(()),
    }
}

fn check_type(
    path: &Path,
    options: &ReadOptions,
    column: Column,
    field: &Field,
) -> Result<(), ReadError> {
    if accepts(column.kind(), field.data_type()) {
        return Ok(());
    }
    Err(ReadError::WrongType {
        path: path.to_owned(),
        column: options.names.source(column).to_owned(),
        found: field.data_type().to_string(),
        expected: column.kind().describe(),
    })
}

/// Types that convert to a column's canonical type without losing meaning.
fn accepts(kind: ColumnKind, data_type: &DataType) -> bool {
    match kind {
        ColumnKind::Boolean => *data_type == DataType::Boolean,
        ColumnKind::Float64 => data_type.is_floating() || data_type.is_integer(),
        ColumnKind::Utf8 => match data_type {
            DataType::Dictionary(_, values) => accepts(kind, values),
            other => {
                other.is_integer()
                    || matches!(
                        other,
                        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                    )
            }
        },
    }
}

fn to_canonical(array: &ArrayRef, column: Column) -> ArrayRef {
    let canonical = column.kind().data_type();
    if *array.data_type() == canonical {
        return array.clone();
    }
    cast(array, &canonical).expect("check_type admits only types that cast to the canonical one")
}
