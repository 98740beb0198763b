//! Parquet records as checked columns, a batch at a time: the fast path of
//! folds over millions of records (`drift --records`). Only the columns a
//! check or the fold needs are decoded; the texts a fold groups by (slice,
//! route, reason, model, status) stay dictionary-encoded, so a fold maps
//! each distinct value once per batch instead of comparing strings per row;
//! and every check `records::read` makes of a row is made here over whole
//! arrays. A batch that fails any of them is read again from that row by the
//! row reader, which names the row, the field and the problem exactly as a
//! sequential read would (or folds the rows if the vectorised check was
//! only cautious). Files whose column types are not the table's own are
//! read by the row reader throughout.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, DictionaryArray, Float64Array, StringArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Float64Type, Int32Type, Int64Type, Schema, UInt64Type};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};

use super::fields::FieldNames;
use super::read::{check_table_version, fold_records, join_workers, parquet_records};
use super::record::Record;
use super::schema::field::{
    CACHED_INPUT_TOKENS, CONFIG_VERSION, COST_USD, FINISH_REASON, ID, INPUT_TOKENS, LOGICAL_MODEL,
    MODEL, OUTPUT_TOKENS, REASON, ROUTE, SCORE, SLICE, STATUS, TIMESTAMP, TOTAL_MS, TTFT_MS,
};
use super::schema::{RECORD_COLUMNS, RecordKind, Status};
use crate::schema::Format;
use crate::schema::InputError;

/// Rows per batch: large enough that mapping each dictionary once per batch
/// costs nothing, small enough that a batch of every projected column stays
/// a few megabytes.
const BATCH_ROWS: usize = 16_384;

/// What a fold is handed: a batch of checked columns, or one record from
/// the row reader (text formats, unusual column types, and a batch that
/// failed a vectorised check).
#[derive(Debug)]
pub enum RecordChunk<'a> {
    Columns(&'a RecordColumns),
    Record(&'a Record<'a>),
}

/// A dictionary-encoded text column of a batch: each row's key into
/// `values`, or null.
#[derive(Debug, Clone, Copy)]
pub struct Texts<'a> {
    keys: &'a [i32],
    nulls: Option<&'a NullBuffer>,
    values: &'a StringArray,
}

impl<'a> Texts<'a> {
    fn of(array: &'a ArrayRef) -> Texts<'a> {
        let dictionary: &DictionaryArray<Int32Type> = array.as_dictionary();
        Texts {
            keys: dictionary.keys().values(),
            nulls: dictionary.nulls(),
            values: dictionary.values().as_string::<i32>(),
        }
    }

    /// The distinct values rows point at by [`Texts::key`]. An empty text
    /// reads as missing, as in the row reader.
    pub fn values(&self) -> impl ExactSizeIterator<Item = Option<&'a str>> + 'a {
        let values = self.values;
        (0..values.len()).map(move |index| {
            (values.is_valid(index) && !values.value(index).is_empty()).then(|| values.value(index))
        })
    }

    /// Row `row`'s index into [`Texts::values`], or `None` for a null.
    pub fn key(&self, row: usize) -> Option<usize> {
        if self.nulls.is_some_and(|nulls| nulls.is_null(row)) {
            return None;
        }
        Some(self.keys[row] as usize)
    }

    /// Whether every row holds a value for which `accept` holds, computed
    /// once per distinct value.
    fn all(&self, accept: impl Fn(&str) -> bool) -> bool {
        let accepted: Vec<bool> = self
            .values()
            .map(|value| value.is_some_and(&accept))
            .collect();
        (0..self.keys.len()).all(|row| self.key(row).is_some_and(|key| accepted[key]))
    }
}

/// A batch of records, every value checked as `records::read` checks a row.
#[derive(Debug)]
pub struct RecordColumns {
    rows: usize,
    timestamps: ArrayRef,
    slice: ArrayRef,
    logical_model: Option<ArrayRef>,
    route: ArrayRef,
    model: Option<ArrayRef>,
    reason: Option<ArrayRef>,
    status: ArrayRef,
    finish_reason: Option<ArrayRef>,
    score: Option<ArrayRef>,
    ttft_ms: Option<ArrayRef>,
    cost_usd: Option<ArrayRef>,
    config_version: Option<ArrayRef>,
}

impl RecordColumns {
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Milliseconds since 1970, one per row.
    pub fn timestamps(&self) -> &[i64] {
        self.timestamps.as_primitive::<Int64Type>().values()
    }

    pub fn slice(&self) -> Texts<'_> {
        Texts::of(&self.slice)
    }

    pub fn logical_model(&self) -> Option<Texts<'_>> {
        self.logical_model.as_ref().map(Texts::of)
    }

    pub fn route(&self) -> Texts<'_> {
        Texts::of(&self.route)
    }

    pub fn model(&self) -> Option<Texts<'_>> {
        self.model.as_ref().map(Texts::of)
    }

    pub fn reason(&self) -> Option<Texts<'_>> {
        self.reason.as_ref().map(Texts::of)
    }

    pub fn finish_reason(&self) -> Option<Texts<'_>> {
        self.finish_reason.as_ref().map(Texts::of)
    }

    /// The status texts; every one parses ([`Status::parse`]).
    pub fn status(&self) -> Texts<'_> {
        Texts::of(&self.status)
    }

    pub fn score(&self) -> Option<&Float64Array> {
        self.score.as_ref().map(AsArray::as_primitive)
    }

    pub fn ttft_ms(&self) -> Option<&Float64Array> {
        self.ttft_ms.as_ref().map(AsArray::as_primitive)
    }

    pub fn cost_usd(&self) -> Option<&Float64Array> {
        self.cost_usd.as_ref().map(AsArray::as_primitive)
    }

    /// The version of the config that served each row, where recorded;
    /// every one checked to be a version (a whole number from 1).
    pub fn config_version(&self) -> Option<&arrow::array::UInt64Array> {
        self.config_version.as_ref().map(AsArray::as_primitive)
    }
}

/// The texts a fold groups by, read dictionary-encoded.
const GROUPED: [usize; 7] = [
    SLICE,
    LOGICAL_MODEL,
    ROUTE,
    MODEL,
    REASON,
    STATUS,
    FINISH_REASON,
];
/// The numbers some check or the fold needs.
const NUMBERS: [usize; 8] = [
    CONFIG_VERSION,
    SCORE,
    INPUT_TOKENS,
    CACHED_INPUT_TOKENS,
    OUTPUT_TOKENS,
    TTFT_MS,
    TOTAL_MS,
    COST_USD,
];

/// How a file is read on the fast path: which of its columns hold each
/// field, and the reader schema that keeps the grouped texts encoded.
#[derive(Debug)]
struct Plan {
    metadata: ArrowReaderMetadata,
    /// The file's column of each field, by position in [`RECORD_COLUMNS`].
    columns: Vec<Option<usize>>,
}

impl Plan {
    /// The plan for `file`, or `None` when a column's type is not the
    /// table's own (text as a number, a timestamp type, large or view
    /// strings): the row reader handles those, as it always has.
    fn new(file: &std::fs::File, names: &FieldNames) -> Result<Option<Plan>, String> {
        let inferred = ArrowReaderMetadata::load(file, ArrowReaderOptions::new())
            .map_err(|error| error.to_string())?;
        let schema = inferred.schema();
        let mut columns = vec![None; RECORD_COLUMNS.len()];
        for (field, column) in RECORD_COLUMNS.iter().enumerate() {
            let Ok(index) = schema.index_of(names.source(field)) else {
                continue;
            };
            let data_type = schema.field(index).data_type();
            let native = match column.kind {
                RecordKind::Text => *data_type == DataType::Utf8,
                RecordKind::Millis => *data_type == DataType::Int64,
                RecordKind::Count | RecordKind::Real => {
                    data_type.is_numeric()
                        && arrow::compute::can_cast_types(data_type, &DataType::Float64)
                }
            };
            if !native {
                return Ok(None);
            }
            columns[field] = Some(index);
        }
        // A required column missing is the row reader's error to name.
        if [ID, TIMESTAMP, SLICE, ROUTE, STATUS]
            .iter()
            .any(|&field| columns[field].is_none())
        {
            return Ok(None);
        }
        let encoded: Vec<usize> = GROUPED.iter().filter_map(|&field| columns[field]).collect();
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(index, field)| {
                if encoded.contains(&index) {
                    field.as_ref().clone().with_data_type(DataType::Dictionary(
                        Box::new(DataType::Int32),
                        Box::new(DataType::Utf8),
                    ))
                } else {
                    field.as_ref().clone()
                }
            })
            .collect();
        let options = ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)));
        let metadata = ArrowReaderMetadata::try_new(inferred.metadata().clone(), options)
            .map_err(|error| error.to_string())?;
        Ok(Some(Plan { metadata, columns }))
    }

    /// The columns row group `group` must decode: every one a check or the
    /// fold needs, the id only where the group's statistics cannot show
    /// that every id is present. Prompts, messages and finish reasons have
    /// no check beyond their type, which the plan has checked.
    fn projection(&self, group: usize) -> (ProjectionMask, bool) {
        let id_column = self.columns[ID].expect("the plan has an id column");
        let decode_id = !ids_present(&self.metadata, group, id_column);
        let mut wanted: Vec<usize> = std::iter::once(TIMESTAMP)
            .chain(GROUPED)
            .chain(NUMBERS)
            .filter_map(|field| self.columns[field])
            .collect();
        if decode_id {
            wanted.push(id_column);
        }
        let mask = ProjectionMask::roots(self.metadata.parquet_schema(), wanted);
        (mask, decode_id)
    }
}

/// Whether row group `group`'s statistics prove every id present and not
/// blank: no nulls, and every value starting with a printable ASCII
/// character (the least value's first byte above a space, the greatest's
/// below 0x80), which no blank text does. Statistics may be truncated, but
/// a truncated minimum is still a lower bound and a truncated maximum an
/// upper one.
fn ids_present(metadata: &ArrowReaderMetadata, group: usize, column: usize) -> bool {
    let chunk = metadata.metadata().row_group(group).column(column);
    let Some(parquet::file::statistics::Statistics::ByteArray(statistics)) = chunk.statistics()
    else {
        return false;
    };
    let (Some(min), Some(max)) = (statistics.min_opt(), statistics.max_opt()) else {
        return false;
    };
    statistics.null_count_opt() == Some(0)
        && min.data().first().is_some_and(|byte| *byte > b' ')
        && max.data().first().is_some_and(|byte| *byte < 0x80)
}

/// Whether `batch` passes every check `records::read` makes of a row.
/// `false` may be cautious (a batch the row reader would accept): the row
/// reader then decides.
fn passes_checks(batch: &RecordColumns, id: Option<&ArrayRef>) -> bool {
    let present = |text: &str| !text.trim().is_empty();
    let ids_ok = id.is_none_or(|ids| {
        let ids = ids.as_string::<i32>();
        ids.null_count() == 0 && (0..ids.len()).all(|row| present(ids.value(row)))
    });
    ids_ok
        && batch.timestamps.null_count() == 0
        && batch.slice().all(present)
        && batch.route().all(present)
        && batch
            .status()
            .all(|text| present(text) && Status::parse(text).is_some())
}

/// Every slot of `values` satisfies `accept`, null slots included: a
/// branch-free pass the compiler vectorises. Null slots hold whatever the
/// decoder left (zeros, in practice), so a `false` may only be cautious.
fn all_slots<T: Copy>(values: &[T], accept: impl Fn(T) -> bool) -> bool {
    values.iter().fold(true, |ok, &value| ok & accept(value))
}

/// Where both of two columns hold a value, `accept` holds of the pair.
fn all_pairs<T: Copy>(
    a: &[T],
    a_nulls: Option<&NullBuffer>,
    b: &[T],
    b_nulls: Option<&NullBuffer>,
    accept: impl Fn(T, T) -> bool,
) -> bool {
    match (a_nulls, b_nulls) {
        (None, None) => a.iter().zip(b).fold(true, |ok, (&a, &b)| ok & accept(a, b)),
        _ => (0..a.len()).all(|row| {
            let valid = |nulls: Option<&NullBuffer>| nulls.is_none_or(|nulls| nulls.is_valid(row));
            !(valid(a_nulls) && valid(b_nulls)) || accept(a[row], b[row])
        }),
    }
}

/// The most tokens a record may count, as the row reader bounds them.
const MAX_TOKENS: f64 = 1e15;

fn amount(value: f64) -> bool {
    value.is_finite() && value >= 0.0
}

fn whole_tokens(value: f64) -> bool {
    amount(value) && value.fract() == 0.0 && value <= MAX_TOKENS
}

/// A token column's checks in its own type: whole and non-negative by
/// type for unsigned integers, so only the bound is left to check.
fn tokens_pass(array: &ArrayRef) -> bool {
    match array.data_type() {
        DataType::UInt64 => all_slots(array.as_primitive::<UInt64Type>().values(), |value| {
            value <= MAX_TOKENS as u64
        }),
        DataType::Int64 => all_slots(array.as_primitive::<Int64Type>().values(), |value| {
            (0..=MAX_TOKENS as i64).contains(&value)
        }),
        _ => arrow::compute::cast(array, &DataType::Float64).is_ok_and(|floats| {
            all_slots(floats.as_primitive::<Float64Type>().values(), whole_tokens)
        }),
    }
}

/// Config versions are whole numbers from 1, where given; a column of
/// another type than the table's goes to the row reader.
fn versions_pass(array: Option<&ArrayRef>) -> bool {
    array.is_none_or(|array| {
        array
            .as_primitive_opt::<UInt64Type>()
            .is_some_and(|versions| {
                versions
                    .iter()
                    .all(|version| version.is_none_or(|v| v >= 1))
            })
    })
}

/// Cached input at most the input, where both are given.
fn cached_within_input(cached: &ArrayRef, input: &ArrayRef) -> bool {
    if let (Some(cached_values), Some(input_values)) = (
        cached.as_primitive_opt::<UInt64Type>(),
        input.as_primitive_opt::<UInt64Type>(),
    ) {
        return all_pairs(
            cached_values.values(),
            cached.nulls(),
            input_values.values(),
            input.nulls(),
            |cached, input| cached <= input,
        );
    }
    let floats = |array: &ArrayRef| arrow::compute::cast(array, &DataType::Float64);
    let (Ok(cached_floats), Ok(input_floats)) = (floats(cached), floats(input)) else {
        return false;
    };
    all_pairs(
        cached_floats.as_primitive::<Float64Type>().values(),
        cached.nulls(),
        input_floats.as_primitive::<Float64Type>().values(),
        input.nulls(),
        |cached, input| cached <= input,
    )
}

/// The numeric checks: amounts finite and non-negative, costs at most 1e6
/// USD, tokens whole and at most 1e15, scores finite, cached input at most the input, the first
/// token no later than the end.
fn numbers_pass(numbers: &[Option<ArrayRef>; RECORD_COLUMNS.len()]) -> bool {
    let floats = |field: usize| {
        numbers[field]
            .as_ref()
            .map(AsArray::as_primitive::<Float64Type>)
    };
    let slots = |field: usize, accept: fn(f64) -> bool| {
        floats(field).is_none_or(|array| all_slots(array.values(), accept))
    };
    let tokens = |field: usize| numbers[field].as_ref().is_none_or(tokens_pass);
    let within = match (&numbers[CACHED_INPUT_TOKENS], &numbers[INPUT_TOKENS]) {
        (Some(cached), Some(input)) => cached_within_input(cached, input),
        _ => true,
    };
    let first_token_before_end = match (floats(TTFT_MS), floats(TOTAL_MS)) {
        (Some(ttft), Some(total)) => all_pairs(
            ttft.values(),
            ttft.nulls(),
            total.values(),
            total.nulls(),
            |ttft, total| ttft <= total,
        ),
        _ => true,
    };
    versions_pass(numbers[CONFIG_VERSION].as_ref())
        && slots(SCORE, f64::is_finite)
        && [INPUT_TOKENS, CACHED_INPUT_TOKENS, OUTPUT_TOKENS]
            .into_iter()
            .all(tokens)
        && [TTFT_MS, TOTAL_MS, COST_USD]
            .into_iter()
            .all(|field| slots(field, amount))
        && slots(COST_USD, |cost| cost <= super::read::MAX_COST_USD)
        && within
        && first_token_before_end
}

/// [`super::fold_records`] handing the fold batches of checked columns
/// where the file allows it: each worker folds its share of a Parquet
/// file's row groups, a batch at a time; other files, and any batch that
/// fails a check from its first failing batch on, come a record at a time.
/// Errors name the same row a sequential read would.
pub fn fold_record_chunks<S: Send>(
    path: &Path,
    names: &FieldNames,
    workers: usize,
    init: impl Fn() -> S + Sync,
    visit: impl Fn(&mut S, RecordChunk<'_>) + Sync,
) -> Result<(Vec<S>, u64), InputError> {
    if path.is_dir() {
        let (mut states, mut count) = (Vec::new(), 0);
        for part in super::read::record_parts(path)? {
            let (folded, rows) = super::read::read_part(&part, |part| {
                fold_record_chunks_in_file(part, names, workers, &init, &visit)
            })?;
            states.extend(folded);
            count += rows;
        }
        return Ok((states, count));
    }
    fold_record_chunks_in_file(path, names, workers, init, visit)
}

fn fold_record_chunks_in_file<S: Send>(
    path: &Path,
    names: &FieldNames,
    workers: usize,
    init: impl Fn() -> S + Sync,
    visit: impl Fn(&mut S, RecordChunk<'_>) + Sync,
) -> Result<(Vec<S>, u64), InputError> {
    let unreadable = |message: String| InputError::Unreadable {
        path: path.to_owned(),
        message,
    };
    let by_rows = || {
        fold_records(path, names, workers, &init, |state, record| {
            visit(state, RecordChunk::Record(record));
        })
    };
    if Format::detect(path)? != Format::Parquet {
        return by_rows();
    }
    let file = std::fs::File::open(path).map_err(|error| unreadable(error.to_string()))?;
    let Some(plan) = Plan::new(&file, names).map_err(unreadable)? else {
        return by_rows();
    };
    check_table_version(path, plan.metadata.metadata().file_metadata())?;
    let groups = plan.metadata.metadata().num_row_groups();
    let (offsets, rows) = group_offsets(plan.metadata.metadata());
    if rows == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the file has no records",
        });
    }
    let workers = workers.clamp(1, groups.max(1));
    let fold_group = |state: &mut S, group: usize| -> Result<(), InputError> {
        let (mask, decode_id) = plan.projection(group);
        // A handle of its own: clones share one offset, which readers seek.
        let file = std::fs::File::open(path).map_err(|error| unreadable(error.to_string()))?;
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, plan.metadata.clone())
                .with_projection(mask)
                .with_row_groups(vec![group])
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|source| crate::schema::parquet_error(path, source))?;
        let mut done = 0usize;
        for batch in reader {
            let batch = batch.map_err(|error| crate::schema::arrow_error(path, error))?;
            let (columns, id, numbers) = split(&batch, &plan, names, decode_id)
                .map_err(|(name, problem)| unreadable(format!("column {name:?}: {problem}")))?;
            if passes_checks(&columns, id.as_ref()) && numbers_pass(&numbers) {
                visit(state, RecordChunk::Columns(&columns));
                done += columns.len();
                continue;
            }
            // The row reader takes over from this batch's first row, naming
            // the bad row or folding the rest if the check was cautious.
            let total = plan.metadata.metadata().row_group(group).num_rows() as usize;
            let selection = RowSelection::from(vec![
                RowSelector::skip(done),
                RowSelector::select(total - done),
            ]);
            parquet_records(
                path,
                names,
                Some((group, Some(selection))),
                offsets[group] + done as u64,
                &mut |_, record| {
                    visit(state, RecordChunk::Record(record));
                    Ok(())
                },
            )?;
            return Ok(());
        }
        Ok(())
    };
    let results: Vec<Result<S, (u64, InputError)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (init, fold_group, offsets) = (&init, &fold_group, &offsets);
                scope.spawn(move || {
                    let mut state = init();
                    for group in (worker..groups).step_by(workers) {
                        fold_group(&mut state, group).map_err(|error| (offsets[group], error))?;
                    }
                    Ok(state)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a reading worker does not panic"))
            .collect()
    });
    let states = join_workers(results)?;
    Ok((states, rows))
}

/// Each row group's first row in the file, and the file's rows.
fn group_offsets(metadata: &parquet::file::metadata::ParquetMetaData) -> (Vec<u64>, u64) {
    let mut offsets = Vec::with_capacity(metadata.num_row_groups());
    let mut rows = 0u64;
    for group in metadata.row_groups() {
        offsets.push(rows);
        rows += group.num_rows() as u64;
    }
    (offsets, rows)
}

type Split = (
    RecordColumns,
    Option<ArrayRef>,
    [Option<ArrayRef>; RECORD_COLUMNS.len()],
);

/// A decoded batch as the fold's columns, the ids when decoded, and every
/// number as float64 (as the row reader casts them).
fn split(
    batch: &RecordBatch,
    plan: &Plan,
    names: &FieldNames,
    decode_id: bool,
) -> Result<Split, (String, String)> {
    let column = |field: usize| -> Option<ArrayRef> {
        plan.columns[field]?;
        batch.column_by_name(names.source(field)).cloned()
    };
    let required = |field: usize| {
        column(field).ok_or_else(|| (names.source(field).to_owned(), "missing".to_owned()))
    };
    // Reals as float64, as the row reader reads them; token counts in their
    // own type, which their check reads.
    let mut numbers: [Option<ArrayRef>; RECORD_COLUMNS.len()] = Default::default();
    for field in NUMBERS {
        numbers[field] = match (column(field), RECORD_COLUMNS[field].kind) {
            (Some(array), RecordKind::Real) if *array.data_type() != DataType::Float64 => Some(
                arrow::compute::cast(&array, &DataType::Float64)
                    .map_err(|error| (names.source(field).to_owned(), error.to_string()))?,
            ),
            (array, _) => array,
        };
    }
    let columns = RecordColumns {
        rows: batch.num_rows(),
        timestamps: required(TIMESTAMP)?,
        slice: required(SLICE)?,
        logical_model: column(LOGICAL_MODEL),
        route: required(ROUTE)?,
        model: column(MODEL),
        reason: column(REASON),
        status: required(STATUS)?,
        finish_reason: column(FINISH_REASON),
        score: numbers[SCORE].clone(),
        ttft_ms: numbers[TTFT_MS].clone(),
        cost_usd: numbers[COST_USD].clone(),
        config_version: numbers[CONFIG_VERSION].clone(),
    };
    let id = if decode_id { Some(required(ID)?) } else { None };
    Ok((columns, id, numbers))
}
