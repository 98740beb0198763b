//! Writes the graded-results table as Parquet, atomically: the file appears
//! complete under its name or not at all.

use std::fs::File;
use std::path::Path;

use anyhow::Context;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;

use super::assemble::ColumnNames;
use super::graded::{SCHEMA_VERSION, SCHEMA_VERSION_KEY, TWO_TIER_SCHEMA_VERSION};
use super::read::GradedTable;
use super::tiered::{TIERS_KEY, Tiers};
use crate::atomic::Staged;

pub fn write_graded_parquet(table: &GradedTable, path: &Path) -> anyhow::Result<()> {
    stage_graded_parquet(table, path)?
        .commit()
        .with_context(|| format!("{}: cannot write graded results", path.display()))
}

/// The table written under a temporary name, for a command that commits
/// several outputs together.
pub fn stage_graded_parquet(table: &GradedTable, path: &Path) -> anyhow::Result<Staged> {
    let mut batches = table.record_batches();
    let version = match table.tiers {
        Some(_) => SCHEMA_VERSION,
        None => TWO_TIER_SCHEMA_VERSION,
    };
    let mut metadata = vec![KeyValue::new(
        SCHEMA_VERSION_KEY.to_owned(),
        version.to_string(),
    )];
    if let Some(tiers) = &table.tiers {
        batches = batches
            .into_iter()
            .map(|batch| named_for(tiers, batch))
            .collect();
        metadata.push(KeyValue::new(TIERS_KEY.to_owned(), tiers.names().join(",")));
    }
    let schema = match batches.first() {
        Some(batch) => batch.schema(),
        None => anyhow::bail!("{}: refusing to write a table with no rows", path.display()),
    };
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(metadata))
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

/// `batch` with the first tier's columns under its name in place of the
/// small ones, and the last tier's in place of the large ones.
fn named_for(tiers: &Tiers, batch: RecordBatch) -> RecordBatch {
    let names = tiers.column_names(ColumnNames::default());
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|field| {
            let renamed = names
                .mapped
                .iter()
                .find(|(column, _)| column.name() == field.name());
            match renamed {
                Some((_, name)) => field.as_ref().clone().with_name(name),
                None => field.as_ref().clone(),
            }
        })
        .collect();
    RecordBatch::try_new(
        std::sync::Arc::new(Schema::new(fields)),
        batch.columns().to_vec(),
    )
    .expect("renaming keeps the columns")
}
