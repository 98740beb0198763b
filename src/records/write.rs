//! Writes request records as Parquet, in batches, with the table's schema
//! version in the file's metadata.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Builder, Int64Builder, StringBuilder, UInt64Builder};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::reason::Reason;
use super::record::Record;
use super::schema::{
    Draw, RECORDS_SCHEMA, RECORDS_SCHEMA_VERSION, SCHEMA_VERSION_KEY, TokenSource,
};

const BATCH: usize = 8192;
const ROW_GROUP: usize = 1 << 16;
const UNIQUE_COLUMNS: [&str; 8] = [
    "id",
    "timestamp",
    "score",
    "ttft_ms",
    "total_ms",
    "cost_usd",
    "prompt",
    "messages",
];

/// Records to a Parquet file, one batch at a time.
pub struct RecordsWriter<W: std::io::Write + Send> {
    writer: ArrowWriter<W>,
    pending: Vec<Record<'static>>,
    written: u64,
}

impl<W: std::io::Write + Send> std::fmt::Debug for RecordsWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordsWriter")
            .field("written", &self.written)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl<W: std::io::Write + Send> RecordsWriter<W> {
    pub fn new(sink: W) -> anyhow::Result<RecordsWriter<W>> {
        let mut properties =
            WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default()));
        // Columns whose values are nearly all distinct: a dictionary of a
        // whole row group's values only makes them larger and slower to read.
        for column in UNIQUE_COLUMNS {
            properties = properties.set_column_dictionary_enabled(ColumnPath::from(column), false);
        }
        let properties = properties
            // Row groups small enough for every core to read its share.
            .set_max_row_group_row_count(Some(ROW_GROUP))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                SCHEMA_VERSION_KEY.to_owned(),
                RECORDS_SCHEMA_VERSION.to_string(),
            )]))
            .build();
        Ok(RecordsWriter {
            writer: ArrowWriter::try_new(sink, RECORDS_SCHEMA.clone(), Some(properties))?,
            pending: Vec::with_capacity(BATCH),
            written: 0,
        })
    }

    pub fn push(&mut self, record: Record<'static>) -> anyhow::Result<()> {
        self.pending.push(record);
        if self.pending.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.pending);
        let texts = |value: &dyn for<'r> Fn(&'r Record<'static>) -> Option<&'r str>| -> ArrayRef {
            let mut builder = StringBuilder::new();
            for row in &rows {
                builder.append_option(value(row));
            }
            Arc::new(builder.finish())
        };
        let reasons =
            |value: &dyn for<'r> Fn(&'r Record<'static>) -> Option<&'r Reason>| -> ArrayRef {
                let mut builder = StringBuilder::new();
                for row in &rows {
                    match value(row) {
                        Some(reason) => builder.append_value(reason.to_string()),
                        None => builder.append_null(),
                    }
                }
                Arc::new(builder.finish())
            };
        let reals = |value: &dyn Fn(&Record<'static>) -> Option<f64>| -> ArrayRef {
            let mut builder = Float64Builder::new();
            for row in &rows {
                builder.append_option(value(row));
            }
            Arc::new(builder.finish())
        };
        let counts = |value: &dyn Fn(&Record<'static>) -> Option<u64>| -> ArrayRef {
            let mut builder = UInt64Builder::new();
            for row in &rows {
                builder.append_option(value(row));
            }
            Arc::new(builder.finish())
        };
        let mut timestamps = Int64Builder::new();
        for row in &rows {
            timestamps.append_value(row.timestamp_ms);
        }
        let columns: Vec<ArrayRef> = vec![
            texts(&|row| Some(&row.id)),
            Arc::new(timestamps.finish()),
            texts(&|row| Some(&row.slice)),
            texts(&|row| row.logical_model.as_deref()),
            texts(&|row| Some(&row.route)),
            texts(&|row| row.model.as_deref()),
            reasons(&|row| row.reason.as_ref()),
            reals(&|row| row.score),
            texts(&|row| Some(row.status.name())),
            counts(&|row| row.input_tokens),
            counts(&|row| row.cached_input_tokens),
            counts(&|row| row.output_tokens),
            reals(&|row| row.ttft_ms),
            reals(&|row| row.total_ms),
            texts(&|row| row.finish_reason.as_deref()),
            reals(&|row| row.cost_usd),
            texts(&|row| row.prompt.as_deref()),
            texts(&|row| row.messages.as_deref()),
            counts(&|row| row.config_version),
            texts(&|row| row.config_sha256.as_deref()),
            texts(&|row| row.shadow_route.as_deref()),
            reasons(&|row| row.shadow_reason.as_ref()),
            reals(&|row| row.shadow_score),
            counts(&|row| row.shadow_config_version),
            reals(&|row| row.propensity),
            texts(&|row| row.draw.map(Draw::name)),
            texts(&|row| row.decided_route.as_deref()),
            texts(&|row| row.token_source.map(TokenSource::name)),
            texts(&|row| row.tenant.as_deref()),
        ];
        self.written += rows.len() as u64;
        let batch = RecordBatch::try_new(RECORDS_SCHEMA.clone(), columns)?;
        self.writer.write(&batch)?;
        Ok(())
    }

    /// Writes what is pending and the file's footer; the number of records.
    pub fn close(mut self) -> anyhow::Result<u64> {
        self.flush()?;
        self.writer.close()?;
        Ok(self.written)
    }
}
