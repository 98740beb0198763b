//! The responses table: one row per (prompt, tier, sample) of a run, the
//! contract between `routeval run` and `routeval grade`. Its Arrow schema is
//! defined here once and documented in `docs/schema.md`.

use std::path::Path;
use std::sync::{Arc, LazyLock};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, BooleanBuilder, Float64Builder, RecordBatch,
    StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Float64Type, Schema, SchemaRef, UInt32Type, UInt64Type};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::CallTier;

pub use crate::atomic::run_directory::RESPONSES as RESPONSES_FILE;

pub const RESPONSES_SCHEMA_VERSION: u32 = 1;
const SCHEMA_VERSION_KEY: &str = "routeval.responses.schema_version";

/// What `merge` writes as a run's responses.
pub const RESPONSES_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a responses table",
    crate::atomic::Replaces::Table(SCHEMA_VERSION_KEY),
);

/// One call's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseRow {
    /// The prompt's position in the dataset (0-based): the table's order.
    pub prompt_index: u64,
    pub id: String,
    pub slice: String,
    pub tier: CallTier,
    pub sample: u32,
    /// The model asked for (from the config).
    pub model: String,
    /// The model the endpoint said answered.
    pub model_version: Option<String>,
    pub text: Option<String>,
    pub finish_reason: Option<String>,
    pub input_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// The endpoint sent no usage; tokens were estimated from characters.
    pub usage_estimated: bool,
    pub cost_usd: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub total_ms: Option<f64>,
    pub attempts: u32,
    pub error_kind: Option<String>,
    pub error_message: Option<String>,
    pub cached: bool,
    /// The alternatives of the verdict token as JSON `[[token, logprob], ...]`.
    pub verdict_logprobs: Option<String>,
}

impl ResponseRow {
    pub fn key(&self) -> (u64, CallTier, u32) {
        (self.prompt_index, self.tier, self.sample)
    }

    pub fn answered(&self) -> bool {
        self.error_kind.is_none()
    }
}

pub static RESPONSES_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let field =
        |name: &str, data_type: DataType, nullable: bool| Field::new(name, data_type, nullable);
    Arc::new(Schema::new(vec![
        field("prompt_index", DataType::UInt64, false),
        field("id", DataType::Utf8, false),
        field("slice", DataType::Utf8, false),
        field("tier", DataType::Utf8, false),
        field("sample", DataType::UInt32, false),
        field("model", DataType::Utf8, false),
        field("model_version", DataType::Utf8, true),
        field("text", DataType::Utf8, true),
        field("finish_reason", DataType::Utf8, true),
        field("input_tokens", DataType::UInt64, true),
        field("cached_input_tokens", DataType::UInt64, true),
        field("output_tokens", DataType::UInt64, true),
        field("usage_estimated", DataType::Boolean, false),
        field("cost_usd", DataType::Float64, true),
        field("ttft_ms", DataType::Float64, true),
        field("total_ms", DataType::Float64, true),
        field("attempts", DataType::UInt32, false),
        field("error_kind", DataType::Utf8, true),
        field("error_message", DataType::Utf8, true),
        field("cached", DataType::Boolean, false),
        field("verdict_logprobs", DataType::Utf8, true),
    ]))
});

/// The rows as one record batch of [`RESPONSES_SCHEMA`].
pub fn to_batch(rows: &[ResponseRow]) -> RecordBatch {
    let strings = |value: &dyn Fn(&ResponseRow) -> Option<&str>| -> ArrayRef {
        let mut builder = StringBuilder::new();
        for row in rows {
            builder.append_option(value(row));
        }
        Arc::new(builder.finish())
    };
    let integers = |value: &dyn Fn(&ResponseRow) -> Option<u64>| -> ArrayRef {
        let mut builder = UInt64Builder::with_capacity(rows.len());
        for row in rows {
            builder.append_option(value(row));
        }
        Arc::new(builder.finish())
    };
    let small = |value: &dyn Fn(&ResponseRow) -> u32| -> ArrayRef {
        let mut builder = UInt32Builder::with_capacity(rows.len());
        for row in rows {
            builder.append_value(value(row));
        }
        Arc::new(builder.finish())
    };
    let reals = |value: &dyn Fn(&ResponseRow) -> Option<f64>| -> ArrayRef {
        let mut builder = Float64Builder::with_capacity(rows.len());
        for row in rows {
            builder.append_option(value(row));
        }
        Arc::new(builder.finish())
    };
    let flags = |value: &dyn Fn(&ResponseRow) -> bool| -> ArrayRef {
        let mut builder = BooleanBuilder::with_capacity(rows.len());
        for row in rows {
            builder.append_value(value(row));
        }
        Arc::new(builder.finish())
    };
    let columns: Vec<ArrayRef> = vec![
        integers(&|row| Some(row.prompt_index)),
        strings(&|row| Some(&row.id)),
        strings(&|row| Some(&row.slice)),
        strings(&|row| Some(row.tier.name())),
        small(&|row| row.sample),
        strings(&|row| Some(&row.model)),
        strings(&|row| row.model_version.as_deref()),
        strings(&|row| row.text.as_deref()),
        strings(&|row| row.finish_reason.as_deref()),
        integers(&|row| row.input_tokens),
        integers(&|row| row.cached_input_tokens),
        integers(&|row| row.output_tokens),
        flags(&|row| row.usage_estimated),
        reals(&|row| row.cost_usd),
        reals(&|row| row.ttft_ms),
        reals(&|row| row.total_ms),
        small(&|row| row.attempts),
        strings(&|row| row.error_kind.as_deref()),
        strings(&|row| row.error_message.as_deref()),
        flags(&|row| row.cached),
        strings(&|row| row.verdict_logprobs.as_deref()),
    ];
    RecordBatch::try_new(RESPONSES_SCHEMA.clone(), columns).expect("columns match the schema")
}

/// The rows of a batch of [`RESPONSES_SCHEMA`].
pub fn from_batch(batch: &RecordBatch) -> anyhow::Result<Vec<ResponseRow>> {
    if batch.schema().fields() != RESPONSES_SCHEMA.fields() {
        anyhow::bail!("not a responses table of schema version {RESPONSES_SCHEMA_VERSION}");
    }
    let column = |index: usize| batch.column(index);
    let text = |index: usize, row: usize| -> Option<String> {
        let array = column(index).as_string::<i32>();
        array.is_valid(row).then(|| array.value(row).to_owned())
    };
    let integer = |index: usize, row: usize| -> Option<u64> {
        let array = column(index).as_primitive::<UInt64Type>();
        array.is_valid(row).then(|| array.value(row))
    };
    let real = |index: usize, row: usize| -> Option<f64> {
        let array = column(index).as_primitive::<Float64Type>();
        array.is_valid(row).then(|| array.value(row))
    };
    let small = |index: usize, row: usize| column(index).as_primitive::<UInt32Type>().value(row);
    let flag = |index: usize, row: usize| {
        let array: &BooleanArray = column(index).as_boolean();
        array.value(row)
    };
    (0..batch.num_rows())
        .map(|row| {
            let tier_name = text(3, row).unwrap_or_default();
            let tier = CallTier::parse(&tier_name)
                .ok_or_else(|| anyhow::anyhow!("row {}: unknown tier {tier_name:?}", row + 1))?;
            Ok(ResponseRow {
                prompt_index: integer(0, row).unwrap_or_default(),
                id: text(1, row).unwrap_or_default(),
                slice: text(2, row).unwrap_or_default(),
                tier,
                sample: small(4, row),
                model: text(5, row).unwrap_or_default(),
                model_version: text(6, row),
                text: text(7, row),
                finish_reason: text(8, row),
                input_tokens: integer(9, row),
                cached_input_tokens: integer(10, row),
                output_tokens: integer(11, row),
                usage_estimated: flag(12, row),
                cost_usd: real(13, row),
                ttft_ms: real(14, row),
                total_ms: real(15, row),
                attempts: small(16, row),
                error_kind: text(17, row),
                error_message: text(18, row),
                cached: flag(19, row),
                verdict_logprobs: text(20, row),
            })
        })
        .collect()
}

fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(16 * 1024))
        // Small pages keep what a merge holds per open input small.
        .set_data_page_size_limit(64 * 1024)
        .set_dictionary_page_size_limit(64 * 1024)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_owned(),
            RESPONSES_SCHEMA_VERSION.to_string(),
        )]))
        .build()
}

/// A Parquet writer of the responses table.
pub struct ResponsesWriter<W: std::io::Write + Send> {
    inner: ArrowWriter<W>,
}

impl<W: std::io::Write + Send> std::fmt::Debug for ResponsesWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponsesWriter").finish_non_exhaustive()
    }
}

impl<W: std::io::Write + Send> ResponsesWriter<W> {
    pub fn new(sink: W) -> anyhow::Result<Self> {
        Ok(ResponsesWriter {
            inner: ArrowWriter::try_new(sink, RESPONSES_SCHEMA.clone(), Some(properties()))?,
        })
    }

    pub fn write(&mut self, rows: &[ResponseRow]) -> anyhow::Result<()> {
        if !rows.is_empty() {
            self.inner.write(&to_batch(rows))?;
        }
        Ok(())
    }

    pub fn close(self) -> anyhow::Result<()> {
        self.inner.close()?;
        Ok(())
    }
}

/// Streams the rows of a responses Parquet file in batches of `batch_size`.
pub fn read_responses(
    path: &Path,
    batch_size: usize,
) -> anyhow::Result<impl Iterator<Item = anyhow::Result<Vec<ResponseRow>>> + use<>> {
    let context = |error: &dyn std::fmt::Display| anyhow::anyhow!("{}: {error}", path.display());
    let builder = super::open_parquet(path)?;
    let version = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|pairs| pairs.iter().find(|pair| pair.key == SCHEMA_VERSION_KEY))
        .and_then(|pair| pair.value.clone());
    if version.as_deref() != Some(&RESPONSES_SCHEMA_VERSION.to_string()) {
        return Err(context(&format!(
            "not a responses table of schema version {RESPONSES_SCHEMA_VERSION} (found {})",
            version.as_deref().unwrap_or("none")
        )));
    }
    let reader = builder
        .with_batch_size(batch_size)
        .build()
        .map_err(|source| super::parquet_error(path, source))?;
    let path = path.to_owned();
    Ok(reader.map(move |batch| {
        let batch = batch.map_err(|error| super::arrow_error(&path, error))?;
        from_batch(&batch).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }))
}

/// Every row of a responses file.
pub fn read_all_responses(path: &Path) -> anyhow::Result<Vec<ResponseRow>> {
    let mut rows = Vec::new();
    for batch in read_responses(path, 8192)? {
        rows.extend(batch?);
    }
    Ok(rows)
}
