//! Reading graded-results files: format dispatch, column resolution, and the
//! row validation every format shares.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, RecordBatch, StringArray,
};
use arrow::datatypes::{FieldRef, Float64Type};

use super::error::ReadError;
use super::format::Format;
use super::graded::{Column, GradedBatch, Present};
use super::ids::DuplicateIds;
use super::{read_parquet, read_text};

/// The largest cost, in USD, one prompt may record on one call. Costs are
/// summed exactly in integer picodollars, and this bound keeps those sums far
/// from overflow even over billions of rows.
pub const MAX_COST_USD: f64 = 1.0e6;

/// Rows per batch handed to stages.
pub(super) const BATCH_ROWS: usize = 64 * 1024;

/// The file's names for known columns it calls differently: the score and
/// the slice (`--score-col`, `--slice-col`), and any other (`--map`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnNames {
    pub score: String,
    pub slice: String,
    pub mapped: Vec<(Column, String)>,
    /// The names came from `--map`, so every rename is blamed on it.
    pub from_map: bool,
    /// The flag that put the entries of `mapped` there.
    pub mapped_by: &'static str,
}

impl Default for ColumnNames {
    fn default() -> Self {
        ColumnNames::new(Column::Score.name(), Column::Slice.name())
    }
}

impl ColumnNames {
    pub fn new(score: impl Into<String>, slice: impl Into<String>) -> ColumnNames {
        ColumnNames {
            score: score.into(),
            slice: slice.into(),
            mapped: Vec::new(),
            from_map: false,
            mapped_by: "--map",
        }
    }

    /// The name `column` has in the file.
    pub fn source(&self, column: Column) -> &str {
        match column {
            Column::Score => &self.score,
            Column::Slice => &self.slice,
            other => self
                .mapped
                .iter()
                .find(|(mapped, _)| *mapped == other)
                .map_or(other.name(), |(_, name)| name.as_str()),
        }
    }

    fn flag(&self, column: Column) -> Option<&'static str> {
        if self.from_map {
            return (self.source(column) != column.name()).then_some("--map");
        }
        match column {
            Column::Score if self.score != Column::Score.name() => Some("--score-col"),
            Column::Slice if self.slice != Column::Slice.name() => Some("--slice-col"),
            other if self.mapped.iter().any(|(mapped, _)| *mapped == other) => Some(self.mapped_by),
            _ => None,
        }
    }
}

/// What to read besides the columns every stage needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub names: ColumnNames,
    /// Keep columns routeval does not know, so they can be written back out.
    pub carry_extra: bool,
    /// Read the optional detail columns: latencies and model versions.
    pub details: bool,
    /// Accept rows without a score: for stages that fill the score column
    /// (the router) or only carry it (import).
    pub score_optional: bool,
    /// The carried columns are read, never written back: a column a rename
    /// shadows (the file's `score` beside `--score-col router_score`) is
    /// left out rather than refused.
    pub carry_read_only: bool,
}

/// A whole graded-results file, validated.
#[derive(Debug)]
pub struct GradedTable {
    pub path: PathBuf,
    pub batches: Vec<GradedBatch>,
    /// Which optional detail columns the file has.
    pub present: Present,
    /// A table of more than two tiers: written with each tier's columns
    /// under its name and the tiers in the file's metadata.
    pub tiers: Option<super::Tiers>,
}

impl GradedTable {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(GradedBatch::num_rows).sum()
    }

    /// The table with only the rows `keep` marks (one flag a row, in row
    /// order), every column kept.
    pub fn with_rows(&self, keep: &[bool]) -> GradedTable {
        assert_eq!(keep.len(), self.num_rows(), "one flag per row");
        let mut offset = 0;
        let mut first_row = 0;
        let mut batches = Vec::with_capacity(self.batches.len());
        for batch in &self.batches {
            let rows = batch.num_rows();
            let mask = arrow::array::BooleanArray::from(keep[offset..offset + rows].to_vec());
            offset += rows;
            let kept = batch.filter(&mask, first_row);
            first_row += kept.num_rows() as u64;
            batches.push(kept);
        }
        GradedTable {
            path: self.path.clone(),
            batches,
            present: self.present,
            tiers: self.tiers.clone(),
        }
    }

    /// The table as Arrow record batches in the canonical column order.
    pub fn record_batches(&self) -> Vec<RecordBatch> {
        self.batches
            .iter()
            .map(|batch| batch.to_record_batch(&self.present))
            .collect()
    }
}

/// What a pass over a file saw.
#[derive(Debug, Clone, Copy)]
pub struct FileSummary {
    pub rows: u64,
    pub present: Present,
}

/// Reads and validates a whole file into memory.
pub fn read_graded(path: &Path, options: &ReadOptions) -> Result<GradedTable, ReadError> {
    let mut batches = Vec::new();
    let summary = for_each_graded_batch(path, options, |batch| batches.push(batch.clone()))?;
    Ok(GradedTable {
        path: path.to_owned(),
        batches,
        present: summary.present,
        tiers: None,
    })
}

/// Streams a file's validated batches to `consume`, in file order. Ids are
/// checked for uniqueness over the whole file before this returns `Ok`, so a
/// caller must not act on what it consumed until then.
pub fn for_each_graded_batch(
    path: &Path,
    options: &ReadOptions,
    mut consume: impl FnMut(&GradedBatch),
) -> Result<FileSummary, ReadError> {
    let mut duplicate_ids = DuplicateIds::default();
    let mut rows = 0u64;
    let mut on_batch = |batch: GradedBatch| -> Result<(), ReadError> {
        validate(&batch, path, options)?;
        duplicate_ids.add(&batch);
        rows += batch.num_rows() as u64;
        consume(&batch);
        Ok(())
    };
    let present = match Format::detect(path)? {
        Format::Parquet => read_parquet::read(path, options, None, &mut on_batch)?,
        Format::Csv => read_text::read_csv(path, options, &mut on_batch)?,
        Format::JsonLines => read_text::read_json_lines(path, options, &mut on_batch)?,
    };
    if rows == 0 {
        return Err(ReadError::Empty {
            path: path.to_owned(),
        });
    }
    duplicate_ids.finish(path, Column::Id.name())?;
    Ok(FileSummary { rows, present })
}

/// [`for_each_graded_batch`] on several threads: a Parquet file's row groups
/// are split into contiguous parts, one per worker, each folded into its own
/// state from `init`; other formats are read on one. Batches carry their
/// file rows, errors are the earliest in the file whichever worker met them,
/// and ids are checked across all parts.
pub fn for_each_graded_batch_parallel<S: Send>(
    path: &Path,
    options: &ReadOptions,
    workers: usize,
    init: impl Fn() -> S + Sync,
    consume: impl Fn(&mut S, &GradedBatch) + Sync,
) -> Result<(FileSummary, Vec<S>), ReadError> {
    let sequential = || {
        let mut state = init();
        let summary = for_each_graded_batch(path, options, |batch| consume(&mut state, batch))?;
        Ok((summary, vec![state]))
    };
    if workers <= 1 || Format::detect(path)? != Format::Parquet {
        return sequential();
    }
    let groups = read_parquet::row_groups(path)?;
    if groups.len() < 2 {
        return sequential();
    }
    let parts = split_row_groups(&groups, workers);
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let (init, consume) = (&init, &consume);
                scope.spawn(move || {
                    let mut state = init();
                    let mut duplicate_ids = DuplicateIds::default();
                    let mut rows = 0u64;
                    let result = read_parquet::read(path, options, Some(part), &mut |batch| {
                        validate(&batch, path, options)?;
                        duplicate_ids.add(&batch);
                        rows += batch.num_rows() as u64;
                        consume(&mut state, &batch);
                        Ok(())
                    });
                    (result, state, duplicate_ids, rows)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a reading worker does not panic"))
            .collect()
    });
    let mut states = Vec::with_capacity(outcomes.len());
    let mut duplicate_ids = DuplicateIds::default();
    let mut rows = 0u64;
    let mut present = None;
    let mut earliest_error: Option<ReadError> = None;
    // Parts are in file order, and each stops at its first error, so the
    // first part with an error holds the earliest one.
    for (result, state, ids, part_rows) in outcomes {
        match result {
            Ok(part_present) => present = Some(part_present),
            Err(error) => {
                earliest_error.get_or_insert(error);
            }
        }
        states.push(state);
        duplicate_ids.merge(ids);
        rows += part_rows;
    }
    if let Some(error) = earliest_error {
        return Err(error);
    }
    if rows == 0 {
        return Err(ReadError::Empty {
            path: path.to_owned(),
        });
    }
    duplicate_ids.finish(path, Column::Id.name())?;
    Ok((
        FileSummary {
            rows,
            present: present.unwrap_or_default(),
        },
        states,
    ))
}

/// Contiguous runs of row groups with about equal rows.
fn split_row_groups(groups: &[u64], workers: usize) -> Vec<read_parquet::RowGroups> {
    let total: u64 = groups.iter().sum();
    let share = total.div_ceil(workers as u64).max(1);
    let mut parts: Vec<read_parquet::RowGroups> = Vec::new();
    let mut first_row = 0u64;
    for (index, &rows) in groups.iter().enumerate() {
        let starts_new = parts
            .last()
            .is_none_or(|part| first_row - part.first_row >= share && parts.len() < workers);
        if starts_new {
            parts.push(read_parquet::RowGroups {
                groups: Vec::new(),
                first_row,
            });
        }
        parts.last_mut().expect("pushed above").groups.push(index);
        first_row += rows;
    }
    parts
}

/// Where each known column and each carried column sits among a file's
/// columns.
#[derive(Debug)]
pub(super) struct ColumnMap {
    known: [Option<usize>; Column::ALL.len()],
    pub extra: Vec<usize>,
}

impl ColumnMap {
    /// Resolves the file's column names against the known columns.
    pub fn resolve(
        path: &Path,
        source_names: &[&str],
        options: &ReadOptions,
    ) -> Result<ColumnMap, ReadError> {
        let mut known = [None; Column::ALL.len()];
        let mut extra = Vec::new();
        for (index, name) in source_names.iter().enumerate() {
            if source_names[..index].contains(name) {
                return Err(ReadError::RepeatedColumn {
                    path: path.to_owned(),
                    column: (*name).to_owned(),
                });
            }
            let column = Column::ALL
                .into_iter()
                .find(|&column| options.names.source(column) == *name);
            match column {
                Some(column) => known[column_position(column)] = Some(index),
                None => {
                    let shadowed = Column::from_name(name).is_some();
                    if shadowed && options.carry_read_only {
                        continue;
                    }
                    if shadowed && options.carry_extra {
                        let renamed = Column::from_name(name).expect("checked above");
                        return Err(ReadError::CollidingColumn {
                            path: path.to_owned(),
                            column: (*name).to_owned(),
                            flag: options.names.flag(renamed).unwrap_or("a rename flag"),
                        });
                    }
                    if options.carry_extra {
                        extra.push(index);
                    }
                }
            }
        }
        // A stage that fills or carries the score reads a table without one.
        // A renamed score (`--score-col`, `--map`) must exist all the same.
        let needed = |column: &Column| {
            let optional = options.score_optional
                && *column == Column::Score
                && options.names.flag(Column::Score).is_none();
            column.required() && !optional
        };
        for column in Column::ALL.into_iter().filter(needed) {
            if known[column_position(column)].is_none() {
                let source = options.names.source(column);
                let hint = match options.names.flag(column) {
                    Some(flag) => format!(" (named by {flag})"),
                    None => match source_names
                        .iter()
                        .find(|name| name.eq_ignore_ascii_case(source))
                    {
                        Some(near) => format!("; found \"{near}\", names are case-sensitive"),
                        None => String::new(),
                    },
                };
                return Err(ReadError::MissingColumn {
                    path: path.to_owned(),
                    column: source.to_owned(),
                    hint,
                });
            }
        }
        Ok(ColumnMap { known, extra })
    }

    /// The index of `column` among the file's columns, if it has it.
    pub fn index(&self, column: Column) -> Option<usize> {
        self.known[column_position(column)]
    }

    /// The known columns to read: all but the model versions unless details
    /// are asked for. Latencies are always read where the file has them, so
    /// that every stage refuses the same bad values.
    pub fn wanted(&self, options: &ReadOptions) -> impl Iterator<Item = (Column, usize)> + '_ {
        let details = options.details;
        Column::ALL
            .into_iter()
            .filter(move |column| details || !Column::MODELS.contains(column))
            .filter_map(|column| self.index(column).map(|index| (column, index)))
    }

    pub fn present(&self, options: &ReadOptions) -> Present {
        let has = |column: Column| options.details && self.index(column).is_some();
        Present {
            latencies: Column::LATENCIES.map(has),
            models: Column::MODELS.map(has),
            // Audits travel with the rows whatever the stage asked for.
            audited: Column::AUDITS.map(|column| self.index(column).is_some()),
        }
    }
}

pub(super) fn column_position(column: Column) -> usize {
    Column::ALL
        .iter()
        .position(|&known| known == column)
        .expect("every column is in Column::ALL")
}

/// Builds a batch from arrays already of each column's canonical type. Absent
/// optional costs, and nulls in them, become zero cost.
pub(super) fn assemble(
    first_row: u64,
    lines: Option<Arc<[u64]>>,
    mut known: [Option<ArrayRef>; Column::ALL.len()],
    extra: Vec<(FieldRef, ArrayRef)>,
    rows: usize,
) -> GradedBatch {
    let mut take = |column: Column| known[column_position(column)].take();
    let strings = |array: Option<ArrayRef>| -> StringArray {
        array.expect("required column").as_string::<i32>().clone()
    };
    let booleans = |array: Option<ArrayRef>| -> BooleanArray {
        array.expect("required column").as_boolean().clone()
    };
    let floats = |array: Option<ArrayRef>| -> Option<Float64Array> {
        array.map(|array| array.as_primitive::<Float64Type>().clone())
    };
    let cost = |array: Option<ArrayRef>| -> Float64Array {
        match floats(array) {
            Some(costs) if costs.null_count() == 0 => costs,
            Some(costs) => costs.iter().map(|cost| Some(cost.unwrap_or(0.0))).collect(),
            None => Float64Array::from(vec![0.0; rows]),
        }
    };
    GradedBatch {
        first_row,
        lines,
        id: strings(take(Column::Id)),
        slice: strings(take(Column::Slice)),
        // Absent only where the reader was told the score is optional.
        score: floats(take(Column::Score)).unwrap_or_else(|| Float64Array::new_null(rows)),
        small_ok: booleans(take(Column::SmallOk)),
        large_ok: booleans(take(Column::LargeOk)),
        cost_small: floats(take(Column::CostSmall)).expect("required column"),
        cost_large: floats(take(Column::CostLarge)).expect("required column"),
        cost_verifier: cost(take(Column::CostVerifier)),
        cost_router: cost(take(Column::CostRouter)),
        latencies: Column::LATENCIES.map(|column| floats(take(column))),
        models: Column::MODELS
            .map(|column| take(column).map(|array| array.as_string::<i32>().clone())),
        audited: Column::AUDITS.map(|column| take(column).map(|array| array.as_boolean().clone())),
        extra,
    }
}

/// Checks the row-level rules every stage relies on.
fn validate(batch: &GradedBatch, path: &Path, options: &ReadOptions) -> Result<(), ReadError> {
    let names = &options.names;
    let score_optional = options.score_optional;
    let invalid = |index: usize, column: Column, problem: String| ReadError::InvalidValue {
        path: path.to_owned(),
        location: batch.location(index),
        column: names.source(column).to_owned(),
        problem,
    };
    let missing = |index: usize, column: Column| invalid(index, column, "missing value".into());

    for (column, strings) in [(Column::Id, &batch.id), (Column::Slice, &batch.slice)] {
        if let Some(index) = first_null(strings) {
            return Err(missing(index, column));
        }
        if let Some(index) = (0..strings.len()).find(|&index| is_blank(strings.value(index))) {
            return Err(invalid(index, column, "empty value".into()));
        }
    }
    for (column, flags) in [
        (Column::SmallOk, &batch.small_ok),
        (Column::LargeOk, &batch.large_ok),
    ] {
        if let Some(index) = first_null(flags) {
            return Err(missing(index, column));
        }
    }
    if let Some(index) = first_null(&batch.score)
        && !score_optional
    {
        let problem = if batch.score.null_count() == batch.num_rows() {
            "no score (the column is empty: outcomes without a router's or verifier's score yet; fill it with `routeval router train --scored-out` or `routeval router join`)".to_owned()
        } else {
            "missing value".to_owned()
        };
        return Err(invalid(index, Column::Score, problem));
    }
    if let Some(index) = batch
        .score
        .iter()
        .position(|score| score.is_some_and(|score| !score.is_finite()))
    {
        let score = batch.score.value(index);
        return Err(invalid(
            index,
            Column::Score,
            format!("score must be finite, found {score}"),
        ));
    }
    let costs = [
        (Column::CostSmall, &batch.cost_small),
        (Column::CostLarge, &batch.cost_large),
        (Column::CostVerifier, &batch.cost_verifier),
        (Column::CostRouter, &batch.cost_router),
    ];
    for (column, costs) in costs {
        if let Some(index) = first_null(costs) {
            return Err(missing(index, column));
        }
        let out_of_range = |cost: &f64| !(0.0..=MAX_COST_USD).contains(cost);
        if let Some(index) = costs.values().iter().position(out_of_range) {
            let cost = costs.value(index);
            let problem = if cost.is_finite() && cost > MAX_COST_USD {
                format!("cost {cost} USD exceeds the per-call limit of {MAX_COST_USD} USD")
            } else {
                format!("cost must be a finite, non-negative number of USD, found {cost}")
            };
            return Err(invalid(index, column, problem));
        }
    }
    for (column, latencies) in Column::LATENCIES.into_iter().zip(&batch.latencies) {
        let Some(latencies) = latencies else { continue };
        let bad = latencies
            .iter()
            .position(|latency| latency.is_some_and(|ms| !(ms.is_finite() && ms >= 0.0)));
        if let Some(index) = bad {
            let ms = latencies.value(index);
            return Err(invalid(
                index,
                column,
                format!("latency must be a finite, non-negative number of ms, found {ms}"),
            ));
        }
    }
    Ok(())
}

/// Empty or only white space. Most values start with a visible ASCII
/// character, which settles it without scanning.
fn is_blank(value: &str) -> bool {
    match value.as_bytes().first() {
        None => true,
        Some(byte) if byte.is_ascii_graphic() => false,
        Some(_) => value.trim().is_empty(),
    }
}

fn first_null(array: &dyn Array) -> Option<usize> {
    if array.null_count() == 0 {
        return None;
    }
    (0..array.len()).find(|&index| array.is_null(index))
}

#[cfg(test)]
mod tests {
    use super::split_row_groups;

    #[test]
    fn row_groups_split_into_contiguous_balanced_parts() {
        let parts = split_row_groups(&[100, 100, 100, 100, 100], 2);
        let groups: Vec<Vec<usize>> = parts.iter().map(|part| part.groups.clone()).collect();
        assert_eq!(groups, [vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(parts[1].first_row, 300);
        let uneven = split_row_groups(&[1000, 10, 10, 10], 2);
        assert_eq!(
            uneven
                .iter()
                .map(|part| part.groups.len())
                .collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(split_row_groups(&[5], 4).len(), 1);
    }
}
