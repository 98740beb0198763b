//! What every reader of graded results shares: which columns to read
//! ([`ReadOptions`]), where they sit in a file ([`ColumnMap`]), and each
//! batch assembled from them and validated, whatever the format.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, StringArray};
use arrow::datatypes::{FieldRef, Float64Type};

use super::error::ReadError;
use super::graded::{Column, GradedBatch, Present};

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
    /// The names a mapping `graded_column=file_column,...` gives
    /// (`import generic --map score=p_hard,small_ok=mixtral_correct`).
    pub fn from_map(map: &str) -> Result<ColumnNames, String> {
        let mut names = ColumnNames {
            from_map: true,
            ..ColumnNames::default()
        };
        for pair in map
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (target, source) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not graded_column=file_column"))?;
            let column = Column::from_name(target.trim())
                .ok_or_else(|| format!("{target:?} is not a graded-results column"))?;
            let source = source.trim().to_owned();
            match column {
                Column::Score => names.score = source,
                Column::Slice => names.slice = source,
                other => names.mapped.push((other, source)),
            }
        }
        Ok(names)
    }

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

impl ReadOptions {
    /// The columns every stage needs, as `names` calls them.
    pub fn of(names: ColumnNames) -> ReadOptions {
        ReadOptions {
            names,
            ..ReadOptions::default()
        }
    }

    /// Also the detail columns: latencies and model versions.
    pub fn with_details(self) -> ReadOptions {
        ReadOptions {
            details: true,
            ..self
        }
    }
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
pub(super) fn validate(
    batch: &GradedBatch,
    path: &Path,
    options: &ReadOptions,
) -> Result<(), ReadError> {
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
