//! Reading graded-results files: format dispatch, whole or batch by batch,
//! in parallel over a Parquet file's row groups.

use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;

use super::assemble::{ReadOptions, validate};
use super::error::ReadError;
use super::format::Format;
use super::graded::{Column, GradedBatch, Present};
use super::ids::DuplicateIds;
use super::{read_parquet, read_text};

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
    check_ids(path, options, duplicate_ids)?;
    Ok(FileSummary { rows, present })
}

/// An error naming the earliest row whose id an earlier row has. The pass
/// kept only the ids' hashes; where two rows share one (nearly always a
/// duplicate), the file's ids are read again to compare them.
fn check_ids(
    path: &Path,
    options: &ReadOptions,
    duplicate_ids: DuplicateIds,
) -> Result<(), ReadError> {
    let mut collisions = duplicate_ids.collisions();
    if collisions.is_empty() {
        return Ok(());
    }
    let mut on_batch = |batch: GradedBatch| -> Result<(), ReadError> {
        collisions.locate(&batch);
        Ok(())
    };
    match Format::detect(path)? {
        Format::Parquet => read_parquet::read(path, options, None, &mut on_batch)?,
        Format::Csv => read_text::read_csv(path, options, &mut on_batch)?,
        Format::JsonLines => read_text::read_json_lines(path, options, &mut on_batch)?,
    };
    collisions.verdict(path, Column::Id.name())
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
    check_ids(path, options, duplicate_ids)?;
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
