//! Finds duplicate ids across a whole file without keeping a hash set of
//! strings: each row contributes a 64-bit hash and its row number, one sort
//! brings equal hashes together, and only rows whose hashes collide have their
//! strings compared.

use std::hash::BuildHasher;
use std::path::Path;
use std::sync::Arc;

use arrow::array::StringArray;

use super::error::ReadError;
use super::graded::{GradedBatch, RowLocation};

/// Accumulates the ids of a file's batches; [`DuplicateIds::finish`] reports
/// the earliest row whose id appeared before.
#[derive(Debug, Default)]
pub struct DuplicateIds {
    hashed_rows: Vec<(u64, u64)>,
    chunks: Vec<IdChunk>,
}

#[derive(Debug)]
struct IdChunk {
    first_row: u64,
    ids: StringArray,
    lines: Option<Arc<[u64]>>,
}

/// The hash of ids wherever routeval de-duplicates them.
pub fn id_hasher() -> foldhash::fast::FixedState {
    foldhash::fast::FixedState::with_seed(0x726f_7574_6576_616c)
}

impl DuplicateIds {
    pub fn add(&mut self, batch: &GradedBatch) {
        let hasher = id_hasher();
        self.hashed_rows.reserve(batch.num_rows());
        for (index, id) in batch.id.iter().enumerate() {
            let id = id.expect("ids are validated non-null before de-duplication");
            self.hashed_rows
                .push((hasher.hash_one(id), batch.first_row + index as u64));
        }
        self.chunks.push(IdChunk {
            first_row: batch.first_row,
            ids: batch.id.clone(),
            lines: batch.lines.clone(),
        });
    }

    pub fn merge(&mut self, other: DuplicateIds) {
        self.hashed_rows.extend(other.hashed_rows);
        self.chunks.extend(other.chunks);
    }

    pub fn finish(mut self, path: &Path, id_column: &str) -> Result<(), ReadError> {
        self.chunks.sort_unstable_by_key(|chunk| chunk.first_row);
        self.hashed_rows.sort_unstable();
        let mut earliest: Option<(u64, u64)> = None;
        for run in self.hashed_rows.chunk_by(|a, b| a.0 == b.0) {
            if run.len() < 2 {
                continue;
            }
            for (later_index, &(_, later)) in run.iter().enumerate().skip(1) {
                let later_id = self.id_at(later);
                let first = run[..later_index]
                    .iter()
                    .map(|&(_, row)| row)
                    .find(|&row| self.id_at(row) == later_id);
                if let Some(first) = first
                    && earliest.is_none_or(|(_, known)| later < known)
                {
                    earliest = Some((first, later));
                }
            }
        }
        match earliest {
            None => Ok(()),
            Some((first, later)) => Err(ReadError::DuplicateId {
                path: path.to_owned(),
                location: self.location_of(later),
                first: self.location_of(first),
                column: id_column.to_owned(),
                id: self.id_at(later).to_owned(),
            }),
        }
    }

    fn chunk_of(&self, row: u64) -> &IdChunk {
        let index = self
            .chunks
            .partition_point(|chunk| chunk.first_row <= row)
            .checked_sub(1)
            .expect("every hashed row belongs to a chunk");
        &self.chunks[index]
    }

    fn id_at(&self, row: u64) -> &str {
        let chunk = self.chunk_of(row);
        chunk.ids.value((row - chunk.first_row) as usize)
    }

    fn location_of(&self, row: u64) -> RowLocation {
        let chunk = self.chunk_of(row);
        let index = (row - chunk.first_row) as usize;
        match &chunk.lines {
            Some(lines) => RowLocation::Line(lines[index]),
            None => RowLocation::Row(row + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first_row: u64, ids: &[&str]) -> GradedBatch {
        crate::schema::graded::tests::batch_with_ids(first_row, ids)
    }

    #[test]
    fn unique_ids_pass() {
        let mut ids = DuplicateIds::default();
        ids.add(&batch(0, &["a", "b"]));
        ids.add(&batch(2, &["c", "d"]));
        assert!(ids.finish(Path::new("f.parquet"), "id").is_ok());
    }

    #[test]
    fn reports_the_earliest_repeat_across_batches() {
        let mut ids = DuplicateIds::default();
        ids.add(&batch(3, &["x", "b", "a"]));
        ids.add(&batch(0, &["a", "y", "x"]));
        let error = ids.finish(Path::new("f.parquet"), "id").unwrap_err();
        assert_eq!(
            error.to_string(),
            "f.parquet: row 4, column \"id\": duplicate id \"x\", first seen at row 3"
        );
    }
}
