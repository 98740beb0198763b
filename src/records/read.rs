//! Reads request records from Parquet, CSV or JSON lines, one at a time, so
//! a file of any length is read in memory bounded by one batch. Every
//! value is checked: a bad one is one error naming the file, the line or
//! row, and the field.

use std::borrow::Cow;
use std::path::Path;

use parquet::arrow::arrow_reader::RowSelection;

use super::fields::FieldNames;
use super::reason::Reason;
use super::record::Record;
use super::rows::{CsvRow, JsonRow, ParquetColumns, ParquetRow, Row};
use super::schema::field::*;
use super::schema::{
    Draw, RECORD_COLUMNS, RECORDS_SCHEMA_VERSION, SCHEMA_VERSION_KEY, Status, TokenSource,
};
use crate::schema::InputError;
use crate::schema::{Format, RowLocation};

fn build<'r>(row: &'r impl Row, names: &FieldNames) -> Result<Record<'r>, (String, String)> {
    let field = |index: usize| names.source(index).to_owned();
    let blame = |index: usize| move |problem: String| (field(index), problem);
    let text = |index: usize| row.text(index).map_err(blame(index));
    let required_text = |index: usize| -> Result<Cow<'r, str>, (String, String)> {
        text(index)?.ok_or_else(|| (field(index), "missing".to_owned()))
    };
    let number = |index: usize| row.number(index).map_err(blame(index));
    let tokens = |index: usize| -> Result<Option<u64>, (String, String)> {
        match number(index)? {
            Some(value) if !(value.is_finite() && value >= 0.0 && value.fract() == 0.0) => Err((
                field(index),
                format!("{value} is not a whole number of tokens"),
            )),
            value => Ok(value.map(|value| value as u64)),
        }
    };
    let version = |index: usize| -> Result<Option<u64>, (String, String)> {
        match number(index)? {
            Some(value) if !(value.is_finite() && value >= 1.0 && value.fract() == 0.0) => {
                Err((field(index), format!("{value} is not a config version")))
            }
            value => Ok(value.map(|value| value as u64)),
        }
    };
    let timestamp_ms = row
        .timestamp(TIMESTAMP)
        .map_err(blame(TIMESTAMP))?
        .ok_or_else(|| (field(TIMESTAMP), "missing".to_owned()))?;
    let status_text = required_text(STATUS)?;
    let status = Status::parse(&status_text).ok_or_else(|| {
        (
            field(STATUS),
            format!("{status_text:?} is not ok, error, rate_limited, timeout or an HTTP status"),
        )
    })?;
    let record = Record {
        id: required_text(ID)?,
        timestamp_ms,
        slice: required_text(SLICE)?,
        logical_model: text(LOGICAL_MODEL)?,
        route: required_text(ROUTE)?,
        model: text(MODEL)?,
        reason: text(REASON)?.map(|text| Reason::from(&*text)),
        score: number(SCORE)?,
        status,
        input_tokens: tokens(INPUT_TOKENS)?,
        cached_input_tokens: tokens(CACHED_INPUT_TOKENS)?,
        output_tokens: tokens(OUTPUT_TOKENS)?,
        ttft_ms: number(TTFT_MS)?,
        total_ms: number(TOTAL_MS)?,
        finish_reason: text(FINISH_REASON)?,
        cost_usd: number(COST_USD)?,
        prompt: text(PROMPT)?,
        messages: text(MESSAGES)?,
        config_version: version(CONFIG_VERSION)?,
        config_sha256: text(CONFIG_SHA256)?,
        shadow_route: text(SHADOW_ROUTE)?,
        shadow_reason: text(SHADOW_REASON)?.map(|text| Reason::from(&*text)),
        shadow_score: number(SHADOW_SCORE)?,
        shadow_config_version: version(SHADOW_CONFIG_VERSION)?,
        propensity: number(PROPENSITY)?,
        draw: match text(DRAW)? {
            Some(draw) => Some(
                Draw::parse(&draw)
                    .ok_or_else(|| (field(DRAW), format!("{draw:?} is not policy or explore")))?,
            ),
            None => None,
        },
        decided_route: text(DECIDED_ROUTE)?,
        token_source: match text(TOKEN_SOURCE)? {
            Some(source) => Some(TokenSource::parse(&source).ok_or_else(|| {
                (
                    field(TOKEN_SOURCE),
                    format!("{source:?} is not provider or estimated"),
                )
            })?),
            None => None,
        },
        tenant: text(TENANT)?,
    };
    check_values(&record).map_err(|(index, problem)| (field(index), problem))?;
    Ok(record)
}

/// The most tokens a record may count: more is a unit or a parsing error.
pub const MAX_TOKENS: u64 = 1_000_000_000_000_000;

/// The most a record may say one request cost, USD: a million tokens at the
/// dearest price list is hundreds of dollars, so more is a unit or a
/// parsing error (and sums of a day's costs stay finite).
pub const MAX_COST_USD: f64 = 1e6;

/// Every check of a record's values, whoever made it (a reader or an
/// importer): ids, slices and routes present; scores finite; tokens at most
/// 1e15, cached input at most the input; latencies and cost finite and
/// non-negative, cost at most 1e6 USD, the first token no later than the
/// end. A failure names the
/// field by its position in [`RECORD_COLUMNS`].
pub(super) fn check_values(record: &Record<'_>) -> Result<(), (usize, String)> {
    for (index, text) in [
        (ID, &record.id),
        (SLICE, &record.slice),
        (ROUTE, &record.route),
    ] {
        if text.trim().is_empty() {
            return Err((index, "missing".to_owned()));
        }
    }
    if let Some(score) = record.score
        && !score.is_finite()
    {
        return Err((SCORE, format!("{score} is not a finite number")));
    }
    if let Some(propensity) = record.propensity
        && !(propensity > 0.0 && propensity <= 1.0)
    {
        return Err((
            PROPENSITY,
            format!("{propensity} is not a probability above 0 and at most 1"),
        ));
    }
    for (index, tokens) in [
        (INPUT_TOKENS, record.input_tokens),
        (CACHED_INPUT_TOKENS, record.cached_input_tokens),
        (OUTPUT_TOKENS, record.output_tokens),
    ] {
        if let Some(tokens) = tokens
            && tokens > MAX_TOKENS
        {
            return Err((
                index,
                format!("{tokens} tokens is more than any request has (at most 1e15)"),
            ));
        }
    }
    if let (Some(input), Some(cached)) = (record.input_tokens, record.cached_input_tokens)
        && cached > input
    {
        return Err((
            CACHED_INPUT_TOKENS,
            format!("{cached} cached of {input} input tokens"),
        ));
    }
    for (index, amount) in [
        (TTFT_MS, record.ttft_ms),
        (TOTAL_MS, record.total_ms),
        (COST_USD, record.cost_usd),
    ] {
        if let Some(value) = amount
            && !(value.is_finite() && value >= 0.0)
        {
            return Err((index, format!("{value} is not a non-negative number")));
        }
    }
    if let Some(cost) = record.cost_usd
        && cost > MAX_COST_USD
    {
        return Err((
            COST_USD,
            format!(
                "{} USD is more than any request costs (at most 1e6)",
                crate::units::readable(cost, 2)
            ),
        ));
    }
    if let (Some(ttft), Some(total)) = (record.ttft_ms, record.total_ms)
        && ttft > total
    {
        return Err((
            TTFT_MS,
            format!("first token at {ttft} ms after the end at {total} ms"),
        ));
    }
    Ok(())
}

/// The record files of a directory, in name order: `serve`'s rolled
/// Parquet parts and the journal it is appending to. Other files (its lock)
/// and empty files (a journal not yet written to) are not records.
pub fn record_parts(directory: &Path) -> Result<Vec<std::path::PathBuf>, InputError> {
    let unreadable = |message: String| InputError::Unreadable {
        path: directory.to_owned(),
        message,
    };
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(directory).map_err(|error| unreadable(error.to_string()))? {
        let entry = entry.map_err(|error| unreadable(error.to_string()))?;
        let path = entry.path();
        let is_records = path
            .extension()
            .and_then(|extension| extension.to_str())
            .is_some_and(|extension| matches!(extension, "parquet" | "jsonl" | "csv"));
        let written = entry
            .metadata()
            .is_ok_and(|metadata| metadata.is_file() && metadata.len() > 0);
        if is_records && written {
            parts.push(path);
        }
    }
    parts.sort();
    // A journal and the part it is being rolled into, listed together:
    // the journal holds every record the part does (it is only appended
    // to), so it alone is read.
    let journals: std::collections::BTreeSet<std::path::PathBuf> = parts
        .iter()
        .filter(|part| {
            part.extension()
                .is_some_and(|extension| extension == "jsonl")
        })
        .map(|journal| journal.with_extension("parquet"))
        .collect();
    parts.retain(|part| !journals.contains(part));
    if parts.is_empty() {
        return Err(InputError::Empty {
            path: directory.to_owned(),
            nothing: "the directory has no record files (.parquet, .jsonl, .csv)",
        });
    }
    Ok(parts)
}

/// Reads `part` of a directory with `read`. A directory serve is writing
/// is read as it stands when it was listed: a journal rolled away since
/// is read from the Parquet part it was rolled into, which holds the same
/// records and those appended after the listing.
pub(super) fn read_part<T>(
    part: &Path,
    mut read: impl FnMut(&Path) -> Result<T, InputError>,
) -> Result<T, InputError> {
    match read(part) {
        Err(error)
            if part
                .extension()
                .is_some_and(|extension| extension == "jsonl") =>
        {
            let rolled = part.with_extension("parquet");
            if std::fs::symlink_metadata(part).is_err() && rolled.is_file() {
                read(&rolled)
            } else {
                Err(error)
            }
        }
        read => read,
    }
}

/// Streams every record of `path` (Parquet, CSV or JSON lines by its
/// extension, or a directory of them: [`record_parts`]) to `visit` with its
/// place in the file, read with `names`. A file without records is an error.
pub fn for_each_record(
    path: &Path,
    names: &FieldNames,
    mut visit: impl FnMut(RowLocation, &Record<'_>) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    if path.is_dir() {
        let mut count = 0;
        for part in record_parts(path)? {
            count += read_part(&part, |part| {
                for_each_record_in_file(part, names, &mut visit)
            })?;
        }
        return Ok(count);
    }
    for_each_record_in_file(path, names, visit)
}

fn for_each_record_in_file(
    path: &Path,
    names: &FieldNames,
    mut visit: impl FnMut(RowLocation, &Record<'_>) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    let invalid = |location: RowLocation, (field, problem): (String, String)| InputError::Invalid {
        path: path.to_owned(),
        location,
        field,
        problem,
    };
    let mut count = 0u64;
    match Format::detect(path)? {
        Format::JsonLines => {
            crate::schema::for_each_json_object(path, |location, object| {
                let row = JsonRow {
                    object: &object,
                    names,
                };
                let record = build(&row, names).map_err(|problem| invalid(location, problem))?;
                count += 1;
                visit(location, &record)
            })?;
        }
        Format::Csv => {
            let mut file = crate::schema::CsvFile::open(path)?;
            // The header is the same for every record: each field's column
            // is found once.
            let positions: Vec<Option<usize>> = (0..RECORD_COLUMNS.len())
                .map(|field| {
                    file.headers()
                        .iter()
                        .position(|header| header == names.source(field))
                })
                .collect();
            let mut record = csv::StringRecord::new();
            while let Some(line) = file.read(&mut record)? {
                let location = RowLocation::Line(line);
                let row = CsvRow {
                    positions: &positions,
                    record: &record,
                };
                let built = build(&row, names).map_err(|problem| invalid(location, problem))?;
                count += 1;
                visit(location, &built)?;
            }
        }
        Format::Parquet => {
            count = parquet_records(path, names, None, 0, &mut visit)?;
        }
    }
    if count == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the file has no records",
        });
    }
    Ok(count)
}

/// [`for_each_record`] on `workers` threads, each folding the records it
/// reads into a state of its own from `init`: a Parquet file's row groups
/// are split between them; other formats are read on one. The states come
/// back with the number of records; the caller merges them. Errors name the
/// same row a sequential read would (the first bad row a worker meets).
pub fn fold_records<S: Send>(
    path: &Path,
    names: &FieldNames,
    workers: usize,
    init: impl Fn() -> S + Sync,
    visit: impl Fn(&mut S, &Record<'_>) + Sync,
) -> Result<(Vec<S>, u64), InputError> {
    if path.is_dir() {
        let (mut states, mut count) = (Vec::new(), 0);
        for part in record_parts(path)? {
            let (folded, rows) = read_part(&part, |part| {
                fold_records_in_file(part, names, workers, &init, &visit)
            })?;
            states.extend(folded);
            count += rows;
        }
        return Ok((states, count));
    }
    fold_records_in_file(path, names, workers, init, visit)
}

fn fold_records_in_file<S: Send>(
    path: &Path,
    names: &FieldNames,
    workers: usize,
    init: impl Fn() -> S + Sync,
    visit: impl Fn(&mut S, &Record<'_>) + Sync,
) -> Result<(Vec<S>, u64), InputError> {
    let format = Format::detect(path)?;
    let metadata = match format {
        Format::Parquet => Some(crate::schema::open_parquet(path)?.metadata().clone()),
        _ => None,
    };
    let groups = metadata
        .as_ref()
        .map_or(0, |metadata| metadata.num_row_groups());
    if metadata.is_none() || workers <= 1 || groups < 2 {
        let mut state = init();
        let count = for_each_record(path, names, |_, record| {
            visit(&mut state, record);
            Ok(())
        })?;
        return Ok((vec![state], count));
    }
    let metadata = metadata.expect("a Parquet file");
    // Row groups dealt round-robin; each knows its first row for messages.
    let mut offsets = Vec::with_capacity(groups);
    let mut rows = 0u64;
    for group in metadata.row_groups() {
        offsets.push(rows);
        rows += group.num_rows() as u64;
    }
    let workers = workers.min(groups);
    let results: Vec<Result<(S, u64), (u64, InputError)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (init, visit, offsets) = (&init, &visit, &offsets);
                scope.spawn(move || -> Result<(S, u64), (u64, InputError)> {
                    let mut state = init();
                    let mut count = 0u64;
                    for group in (worker..groups).step_by(workers) {
                        count += parquet_records(
                            path,
                            names,
                            Some((group, None)),
                            offsets[group],
                            &mut |_, record| {
                                visit(&mut state, record);
                                Ok(())
                            },
                        )
                        .map_err(|error| (offsets[group], error))?;
                    }
                    Ok((state, count))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a reading worker does not panic"))
            .collect()
    });
    let mut states = Vec::with_capacity(workers);
    let mut count = 0u64;
    for (state, rows) in join_workers(results)? {
        states.push(state);
        count += rows;
    }
    if count == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the file has no records",
        });
    }
    Ok((states, count))
}

/// Refuses a Parquet file whose key-value metadata names a version of the
/// record table this build does not know; a file without it (another
/// writer's) reads as the current version.
pub(super) fn check_table_version(
    path: &Path,
    metadata: &parquet::file::metadata::FileMetaData,
) -> Result<(), InputError> {
    let tagged = metadata
        .key_value_metadata()
        .into_iter()
        .flatten()
        .find(|entry| entry.key == SCHEMA_VERSION_KEY)
        .and_then(|entry| entry.value.as_deref());
    match tagged {
        Some(found) if found.trim() != RECORDS_SCHEMA_VERSION.to_string() => {
            Err(InputError::Unreadable {
                path: path.to_owned(),
                message: format!(
                    "{SCHEMA_VERSION_KEY} = {found}: {}",
                    crate::version::unknown(found, &RECORDS_SCHEMA_VERSION.to_string())
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The states of workers that each read some of a file's row groups, in
/// worker order; or, when any failed, the error of the earliest row group
/// that failed (a worker's error comes with its group's first row), which is
/// the error a sequential read would report.
pub(super) fn join_workers<S>(
    results: Vec<Result<S, (u64, InputError)>>,
) -> Result<Vec<S>, InputError> {
    let mut states = Vec::with_capacity(results.len());
    let mut first_error: Option<(u64, InputError)> = None;
    for result in results {
        match result {
            Ok(state) => states.push(state),
            Err((offset, error)) => {
                if first_error
                    .as_ref()
                    .is_none_or(|(first, _)| offset < *first)
                {
                    first_error = Some((offset, error));
                }
            }
        }
    }
    match first_error {
        Some((_, error)) => Err(error),
        None => Ok(states),
    }
}

/// The records of a Parquet file, or of its row group `group` (only the
/// rows its selection selects, when it has one) whose first row read is row
/// `first_row` + 1 of the file, to `visit`; how many there were.
pub(super) fn parquet_records(
    path: &Path,
    names: &FieldNames,
    group: Option<(usize, Option<RowSelection>)>,
    first_row: u64,
    visit: &mut dyn FnMut(RowLocation, &Record<'_>) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    let unreadable = |message: String| InputError::Unreadable {
        path: path.to_owned(),
        message,
    };
    let builder = crate::schema::open_parquet(path)?;
    check_table_version(path, builder.metadata().file_metadata())?;
    let builder = builder.with_batch_size(8192);
    let reader = match group {
        Some((group, Some(selection))) => builder
            .with_row_groups(vec![group])
            .with_row_selection(selection),
        Some((group, None)) => builder.with_row_groups(vec![group]),
        None => builder,
    }
    .build()
    .map_err(|source| crate::schema::parquet_error(path, source))?;
    let mut row = first_row;
    for batch in reader {
        let batch = batch.map_err(|error| crate::schema::arrow_error(path, error))?;
        let columns = ParquetColumns::new(&batch, names)
            .map_err(|(field, problem)| unreadable(format!("column {field:?}: {problem}")))?;
        for index in 0..batch.num_rows() {
            row += 1;
            let location = RowLocation::Row(row);
            let parquet_row = ParquetRow {
                columns: &columns,
                index,
            };
            let record =
                build(&parquet_row, names).map_err(|(field, problem)| InputError::Invalid {
                    path: path.to_owned(),
                    location,
                    field,
                    problem,
                })?;
            visit(location, &record)?;
        }
    }
    Ok(row - first_row)
}
