//! What teams already log, as request records: LiteLLM's logs (its own
//! module), OpenAI-style request/response log lines, any table of the records'
//! fields under other names (`--map`), and a routeval run's responses.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::fields::FieldNames;
use super::from_litellm::{BilledAttempts, Deployments, spend_row};
use super::from_litellm_standard::standard_records;
use super::log_fields::{
    Problem, at, first_choice_finish, last_user_message, messages_at, number_at, required, text_at,
    timestamp_at, tokens_at,
};
use super::read::{check_values, for_each_record};
use super::reason::Reason;
use super::record::Record;
use super::schema::RECORD_COLUMNS;
use super::schema::Status;
use super::write::RecordsWriter;
use crate::schema::InputError;
use crate::schema::RowLocation;
use crate::schema::for_each_object;

/// Where the records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// Rows of LiteLLM's `LiteLLM_SpendLogs` table (JSON lines or CSV).
    Litellm,
    /// LiteLLM's StandardLoggingPayload, one per call and attempt (JSON
    /// lines).
    LitellmStandard,
    /// `{"request": {model, messages}, "response": {id, model, usage, choices}}`
    /// per line.
    OpenaiLog,
    /// The records' own columns, under the names `--map` gives.
    Generic,
    /// A routeval run directory.
    Run,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogImportOptions {
    pub format: ImportFormat,
    pub input: PathBuf,
    /// Generic: `field=column,...`.
    pub map: Option<String>,
    /// The field (a dotted path into a line's JSON) naming each record's
    /// slice; the format's default when `None`.
    pub slice_field: Option<String>,
    /// Run: milliseconds between consecutive prompts' records (a batch run
    /// records no arrival times).
    pub interval_ms: u64,
    /// LiteLLM: the route names and logical model of the signed config the
    /// export came from, so its deployment ids read back as routes.
    pub deployments: Option<Deployments>,
}

/// What an import wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Imported {
    pub records: u64,
    /// LiteLLM's billed retry attempts (`ID-attempt-N`), folded into their
    /// request: their spend added to its cost, no record of their own.
    pub folded_attempts: u64,
    /// Spend rows: attempts a request abandoned when it fell back, kept as
    /// records of their own (`ID-attempt-1`, on the route it left).
    pub kept_attempts: u64,
}

/// What an importer keeps: each record checked as every reader checks it,
/// its id unique, and the attempts abandoned by requests that fell back
/// counted.
#[derive(Debug, Default)]
struct Kept {
    ids: UniqueIds,
    records: u64,
    attempts: u64,
}

impl Kept {
    fn push<W: std::io::Write + Send>(
        &mut self,
        writer: &mut RecordsWriter<W>,
        path: &Path,
        location: RowLocation,
        record: Record<'static>,
    ) -> Result<(), InputError> {
        check_values(&record).map_err(|(index, problem)| InputError::Invalid {
            path: path.to_owned(),
            location,
            field: RECORD_COLUMNS[index].name.to_owned(),
            problem,
        })?;
        self.ids
            .check(path, location, &record.id, RECORD_COLUMNS[ID_FIELD].name)?;
        self.records += 1;
        self.attempts += u64::from(record.reason.as_ref().is_some_and(Reason::is_abandoned));
        writer.push(record).map_err(|error| InputError::Unreadable {
            path: path.to_owned(),
            message: error.to_string(),
        })
    }
}

impl LogImportOptions {
    fn slice_field(&self) -> String {
        self.slice_field
            .clone()
            .unwrap_or_else(|| self.format.default_slice_field().to_owned())
    }
}

impl ImportFormat {
    fn default_slice_field(self) -> &'static str {
        match self {
            ImportFormat::Litellm => "team_id",
            ImportFormat::LitellmStandard => "metadata.user_api_key_team_id",
            ImportFormat::OpenaiLog => "request.user",
            ImportFormat::Generic | ImportFormat::Run => "slice",
        }
    }
}
/// Imports as `options` say into the request-record table at `out`, which
/// lands whole or not at all: a bad row leaves nothing written.
pub fn import_into(options: &LogImportOptions, out: &Path) -> anyhow::Result<Imported> {
    use crate::atomic::{Named, Output, check_outputs, write_atomically};
    let mut inputs = vec![Named::new(&options.input, "--input")];
    let responses = options.input.join(crate::schema::RESPONSES_FILE);
    if options.format == ImportFormat::Run {
        inputs.push(Named::new(&responses, "--input"));
    }
    check_outputs(
        &[Output::new(out, "--out", &super::RECORDS_OUTPUT)],
        &inputs,
    )?;
    let mut imported = Imported::default();
    write_atomically(out, |file| {
        imported = import_records(options, file)?;
        Ok(())
    })
    .map_err(|error| {
        // A bad input row names its own file; anything else is the output's.
        if error.downcast_ref::<InputError>().is_some() {
            error
        } else {
            error.context(format!("{}: cannot write (--out)", out.display()))
        }
    })?;
    Ok(imported)
}

/// Converts the input to records and writes them to `sink`; the number
/// written. Nothing is written for a bad row: the caller stages the file.
pub fn import_records<W: std::io::Write + Send>(
    options: &LogImportOptions,
    sink: W,
) -> anyhow::Result<Imported> {
    let mut folded_attempts = 0;
    let mut kept_attempts = 0;
    let mut writer = RecordsWriter::new(sink)?;
    let path = &options.input;
    match options.format {
        ImportFormat::Generic => {
            let names = match &options.map {
                Some(map) => FieldNames::parse(map).map_err(|problem| InputError::Flag {
                    flag: "--map",
                    path: path.clone(),
                    problem,
                })?,
                None => FieldNames::default(),
            };
            let mut ids = UniqueIds::default();
            for_each_record(path, &names, |location, record| {
                ids.check(path, location, &record.id, names.source(ID_FIELD))?;
                writer
                    .push(record.clone().into_owned())
                    .map_err(|error| InputError::Unreadable {
                        path: path.clone(),
                        message: error.to_string(),
                    })
            })?;
        }
        ImportFormat::LitellmStandard => {
            let slice_field = options.slice_field();
            let mut kept = Kept::default();
            standard_records(
                path,
                &slice_field,
                options.deployments.as_ref(),
                |location, record| kept.push(&mut writer, path, location, record),
            )?;
            kept_attempts = kept.attempts;
        }
        ImportFormat::Litellm | ImportFormat::OpenaiLog => {
            let slice_field = options.slice_field();
            let litellm_format = options.format == ImportFormat::Litellm;
            let attempts = if litellm_format {
                BilledAttempts::of_file(path)?
            } else {
                BilledAttempts::default()
            };
            let mut kept = Kept::default();
            for_each_object::<InputError>(path, |location, object| {
                let object = &object;
                if litellm_format && attempts.folds(object) {
                    folded_attempts += 1;
                    return Ok(());
                }
                let converted = match options.format {
                    ImportFormat::Litellm => {
                        spend_row(object, &slice_field, options.deployments.as_ref())
                    }
                    _ => openai_log(object, &slice_field).map(|record| (record, None)),
                };
                let (mut record, abandoned) =
                    converted.map_err(|(field, problem)| InputError::Invalid {
                        path: path.clone(),
                        location,
                        field,
                        problem,
                    })?;
                if let Some(spent) = attempts.spend_of(&record.id) {
                    record.cost_usd = Some(record.cost_usd.unwrap_or(0.0) + spent);
                }
                attempts.stand_for_request(&mut record);
                for record in std::iter::once(record).chain(abandoned) {
                    kept.push(&mut writer, path, location, record)?;
                }
                Ok(())
            })?;
            kept_attempts = kept.attempts;
            if kept.records == 0 {
                return Err(InputError::Empty {
                    path: path.clone(),
                    nothing: "the file has no records",
                }
                .into());
            }
        }
        ImportFormat::Run => from_run(path, options.interval_ms, &mut writer)?,
    }
    Ok(Imported {
        records: writer.close()?,
        folded_attempts,
        kept_attempts,
    })
}

/// The id column's position in [`RECORD_COLUMNS`].
const ID_FIELD: usize = 0;

/// The ids seen so far, each with where it was first seen: ids are unique
/// in a record table (docs/schema.md), and a second is refused naming both
/// places. Kept as 128-bit hashes, so a million ids cost about 40 MB.
#[derive(Debug, Default)]
pub struct UniqueIds {
    seen: std::collections::HashMap<u128, RowLocation>,
}

impl UniqueIds {
    pub fn check(
        &mut self,
        path: &Path,
        location: RowLocation,
        id: &str,
        field: &str,
    ) -> Result<(), InputError> {
        use std::hash::{BuildHasher, Hasher};
        let half = |seed: u64| {
            let mut hasher = foldhash::quality::FixedState::with_seed(seed).build_hasher();
            hasher.write(id.as_bytes());
            hasher.finish()
        };
        let key = (u128::from(half(0x6964_7331)) << 64) | u128::from(half(0x6964_7332));
        match self.seen.entry(key) {
            std::collections::hash_map::Entry::Occupied(first) => Err(InputError::Invalid {
                path: path.to_owned(),
                location,
                field: field.to_owned(),
                problem: format!("{id:?} is also the id of {}; ids are unique", first.get()),
            }),
            std::collections::hash_map::Entry::Vacant(place) => {
                place.insert(location);
                Ok(())
            }
        }
    }
}

/// One OpenAI-style log line: `request.model` (the route and logical
/// model), `request.messages`, `response.id`, `response.model`,
/// `response.created` (unless a top-level `timestamp` says when),
/// `response.usage`, `response.choices[0].finish_reason`; optional
/// top-level `ttft_ms`, `total_ms` (or `latency_ms`), `cost_usd`, `status`
/// and `error` (a failed request).
fn openai_log(
    object: &serde_json::Map<String, Value>,
    slice_field: &str,
) -> Result<Record<'static>, Problem> {
    let failed = at(object, "error").is_some();
    let status = match text_at(object, "status") {
        Some(text) => Status::parse(&text)
            .ok_or_else(|| ("status".to_owned(), format!("{text:?} is not a status")))?,
        None if failed => text_at(object, "error.status")
            .and_then(|code| Status::parse(&code))
            .unwrap_or(Status::Error),
        None => Status::Ok,
    };
    let timestamp_ms = match timestamp_at(object, "timestamp")? {
        Some(at) => at,
        None => {
            let created = number_at(object, "response.created")?.ok_or_else(|| {
                (
                    "timestamp".to_owned(),
                    "missing (and response.created)".to_owned(),
                )
            })?;
            (created * 1000.0) as i64
        }
    };
    let id = text_at(object, "id")
        .or_else(|| text_at(object, "response.id"))
        .ok_or_else(|| ("response.id".to_owned(), "missing (and id)".to_owned()))?;
    let route = required(object, "request.model")?;
    let mut record = Record::new(
        id,
        timestamp_ms,
        required(object, slice_field)?,
        route.clone(),
        status,
    );
    record.logical_model = Some(Cow::Owned(route));
    record.model = text_at(object, "response.model").map(Cow::Owned);
    record.input_tokens = tokens_at(object, "response.usage.prompt_tokens")?;
    record.cached_input_tokens =
        tokens_at(object, "response.usage.prompt_tokens_details.cached_tokens")?;
    record.output_tokens = tokens_at(object, "response.usage.completion_tokens")?;
    record.finish_reason = first_choice_finish(object, "response").map(Cow::Owned);
    record.ttft_ms = number_at(object, "ttft_ms")?;
    record.total_ms = match number_at(object, "total_ms")? {
        Some(total) => Some(total),
        None => number_at(object, "latency_ms")?,
    };
    record.cost_usd = number_at(object, "cost_usd")?;
    record.score = number_at(object, "score")?;
    record.reason = text_at(object, "reason").map(|text| Reason::from(text.as_str()));
    if let Some(messages) = messages_at(object, "request.messages") {
        record.prompt = last_user_message(&messages).map(Cow::Owned);
        record.messages = Some(Cow::Owned(messages.to_string()));
    }
    Ok(record)
}

/// A run's answers as records: each prompt's first sample on each tier, at
/// the run's start plus `interval_ms` per prompt, the route its tier.
fn from_run<W: std::io::Write + Send>(
    run: &Path,
    interval_ms: u64,
    writer: &mut RecordsWriter<W>,
) -> anyhow::Result<()> {
    use crate::schema::{MANIFEST_FILE, Manifest, RESPONSES_FILE, read_responses};
    let manifest = Manifest::load(&run.join(MANIFEST_FILE))?;
    let start_ms = crate::clock::parse_timestamp_ms(&manifest.started_at).unwrap_or(0);
    let mut prompts = std::collections::HashMap::new();
    let dataset = PathBuf::from(&manifest.dataset.path);
    // Prompts are attached by their place in the dataset: another dataset
    // would give each record another request's prompt.
    if crate::digest::sha256_file(&dataset)? != manifest.dataset.sha256 {
        anyhow::bail!(
            "{}: the dataset changed since the run (sha256 differs from {})",
            dataset.display(),
            run.join(MANIFEST_FILE).display()
        );
    }
    let mut index = 0u64;
    crate::schema::for_each_prompt(&dataset, |row| {
        let question = row
            .messages
            .iter()
            .rev()
            .find(|message| message.role == crate::schema::Role::User)
            .map(|message| message.content.clone());
        let messages = serde_json::to_string(&row.messages).ok();
        prompts.insert(index, (question, messages));
        index += 1;
        Ok(())
    })?;
    let mut count = 0u64;
    for batch in read_responses(&run.join(RESPONSES_FILE), 8192)? {
        for row in batch? {
            if row.sample != 0 || row.tier.is_verifier() {
                continue;
            }
            let status = match row.error_kind.as_deref() {
                None => Status::Ok,
                Some("rate_limited") => Status::RateLimited,
                Some("first_token_timeout" | "stall" | "total_timeout") => Status::Timeout,
                Some(_) => Status::Error,
            };
            let timestamp = row
                .prompt_index
                .checked_mul(interval_ms)
                .and_then(|offset| i64::try_from(offset).ok())
                .and_then(|offset| start_ms.checked_add(offset))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--interval: prompt {} of the run would arrive after the year 292 million",
                        row.prompt_index + 1
                    )
                })?;
            let mut record = Record::new(
                format!("{}:{}", row.id, row.tier),
                timestamp,
                row.slice.clone(),
                row.tier.name().to_owned(),
                status,
            );
            record.model = row.model_version.clone().map(Cow::Owned);
            record.reason = Some(Reason::LabelledRun);
            record.input_tokens = row.input_tokens;
            record.cached_input_tokens = row.cached_input_tokens;
            record.output_tokens = row.output_tokens;
            record.ttft_ms = row.ttft_ms;
            record.total_ms = row.total_ms;
            record.finish_reason = row.finish_reason.clone().map(Cow::Owned);
            record.cost_usd = row.cost_usd;
            if let Some((prompt, messages)) = prompts.get(&row.prompt_index) {
                record.prompt = prompt.clone().map(Cow::Owned);
                record.messages = messages.clone().map(Cow::Owned);
            }
            check_values(&record).map_err(|(index, problem)| {
                anyhow::anyhow!(
                    "{}: row of {}: field {:?}: {problem}",
                    run.display(),
                    row.id,
                    RECORD_COLUMNS[index].name
                )
            })?;
            writer.push(record)?;
            count += 1;
        }
    }
    if count == 0 {
        anyhow::bail!("{}: the run has no answers to convert", run.display());
    }
    Ok(())
}
