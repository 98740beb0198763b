//! Writes the graded-results table as Parquet, atomically: the file appears
//! complete under its name or not at all.

use std::fs::File;
use std::path::Path;

use anyhow::Context;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::graded::{SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use super::read::GradedTable;
use crate::atomic::Staged;

pub fn write_graded_parquet(table: &GradedTable, path: &Path) -> anyhow::Result<()> {
    stage_graded_parquet(table, path)?
        .commit()
        .with_context(|| format!("{}: cannot write graded results", path.display()))
}

/// The table written under a temporary name, for a command that commits
/// several outputs together.
pub fn stage_graded_parquet(table: &GradedTable, path: &Path) -> anyhow::Result<Staged> {
    let batches = table.record_batches();
    let schema = match batches.first() {
        Some(batch) => batch.schema(),
        None => anyhow::bail!("{}: refusing to write a table with no rows", path.display()),
    };
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_owned(),
            SCHEMA_VERSION.to_string(),
        )]))
        .build();
    Staged::new(path, |file: &mut File| {
        let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(properties))?;
        for batch in &batches {
            writer.write(batch)?;
        }
        writer.close()?;
        Ok(())
    })
    .with_context(|| format!("{}: cannot write graded results", path.display()))
}
