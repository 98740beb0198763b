//! Finds duplicate ids across a whole file without keeping its ids: each row
//! contributes a 64-bit hash, and a bucket sort of the hashes finds any that
//! more than one row has. Distinct ids almost never share a hash (about
//! 3 in a million files of 10 million rows), so a shared hash nearly always
//! means a duplicate: only then is the file read again ([`Collisions`]) to
//! compare those rows' ids as strings and name the earliest repeat.

use std::hash::BuildHasher;
use std::path::Path;

use super::error::ReadError;
use super::graded::{GradedBatch, RowLocation};

/// Accumulates the id hashes of a file's batches, in any order.
#[derive(Debug, Default)]
pub struct DuplicateIds {
    hashes: Vec<u64>,
}

/// The hash of ids wherever routeval de-duplicates them.
pub fn id_hasher() -> foldhash::fast::FixedState {
    foldhash::fast::FixedState::with_seed(0x726f_7574_6576_616c)
}

impl DuplicateIds {
    pub fn add(&mut self, batch: &GradedBatch) {
        let hasher = id_hasher();
        self.hashes.extend(batch.id.iter().map(|id| {
            hasher.hash_one(id.expect("ids are validated non-null before de-duplication"))
        }));
    }

    pub fn merge(&mut self, other: DuplicateIds) {
        if self.hashes.is_empty() {
            self.hashes = other.hashes;
        } else {
            self.hashes.extend(other.hashes);
        }
    }

    /// The hashes more than one row has: none when every id is distinct.
    pub fn collisions(self) -> Collisions {
        Collisions {
            hashes: repeated(self.hashes),
            rows: Vec::new(),
        }
    }
}

/// The hashes that appear more than once in `hashes`, sorted: the hashes
/// are spread over buckets by their top bits (two passes), and each
/// bucket, a few dozen hashes, is sorted on its own, in cache.
fn repeated(hashes: Vec<u64>) -> Vec<u64> {
    const ROWS_PER_BUCKET: usize = 32;
    const MOST_BUCKET_BITS: u32 = 20;
    let buckets = (hashes.len() / ROWS_PER_BUCKET)
        .next_power_of_two()
        .min(1 << MOST_BUCKET_BITS);
    let bits = buckets.trailing_zeros();
    let bucket_of = |hash: u64| hash.checked_shr(64 - bits).unwrap_or(0) as usize;
    let mut starts = vec![0usize; buckets + 1];
    for &hash in &hashes {
        starts[bucket_of(hash) + 1] += 1;
    }
    for bucket in 0..buckets {
        starts[bucket + 1] += starts[bucket];
    }
    let mut sorted = vec![0u64; hashes.len()];
    let mut next = starts.clone();
    for &hash in &hashes {
        let bucket = bucket_of(hash);
        sorted[next[bucket]] = hash;
        next[bucket] += 1;
    }
    drop(hashes);
    let mut repeated = Vec::new();
    for bucket in starts.windows(2) {
        let hashes = &mut sorted[bucket[0]..bucket[1]];
        hashes.sort_unstable();
        for run in hashes.chunk_by(|a, b| a == b) {
            if run.len() > 1 {
                repeated.push(run[0]);
            }
        }
    }
    repeated
}

/// The rows whose id hashes are shared, found by a second read of the
/// file, and their ids compared.
#[derive(Debug)]
pub struct Collisions {
    hashes: Vec<u64>,
    /// (hash, 0-based row, id, where it is) of each row with a shared hash.
    rows: Vec<(u64, u64, String, RowLocation)>,
}

impl Collisions {
    /// Whether every id hashed differently: nothing to read again.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Keeps the rows of `batch` whose hash is shared.
    pub fn locate(&mut self, batch: &GradedBatch) {
        let hasher = id_hasher();
        for (index, id) in batch.id.iter().enumerate() {
            let Some(id) = id else { continue };
            let hash = hasher.hash_one(id);
            if self.hashes.binary_search(&hash).is_ok() {
                let row = batch.first_row + index as u64;
                let location = match &batch.lines {
                    Some(lines) => RowLocation::Line(lines[index]),
                    None => RowLocation::Row(row + 1),
                };
                self.rows.push((hash, row, id.to_owned(), location));
            }
        }
    }

    /// The earliest row whose id an earlier row has, as an error naming
    /// both; `Ok` when the shared hashes were of distinct ids.
    pub fn verdict(mut self, path: &Path, id_column: &str) -> Result<(), ReadError> {
        self.rows.sort_unstable_by_key(|row| (row.0, row.1));
        let mut earliest: Option<(usize, usize)> = None;
        let mut start = 0;
        for run in self.rows.chunk_by(|a, b| a.0 == b.0) {
            for later in 1..run.len() {
                let first = (0..later).find(|&first| run[first].2 == run[later].2);
                let (first, later) = match first {
                    Some(first) => (start + first, start + later),
                    None => continue,
                };
                if earliest.is_none_or(|(_, known)| self.rows[later].1 < self.rows[known].1) {
                    earliest = Some((first, later));
                }
            }
            start += run.len();
        }
        match earliest {
            None => Ok(()),
            Some((first, later)) => Err(ReadError::DuplicateId {
                path: path.to_owned(),
                location: self.rows[later].3,
                first: self.rows[first].3,
                column: id_column.to_owned(),
                id: self.rows[later].2.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first_row: u64, ids: &[&str]) -> GradedBatch {
        crate::schema::graded::tests::batch_with_ids(first_row, ids)
    }

    /// The verdict on batches of ids, as a read of the file finds it: the
    /// hashes from the first pass, the rows from a second in file order.
    fn verdict(batches: &[GradedBatch]) -> Result<(), ReadError> {
        let mut ids = DuplicateIds::default();
        for batch in batches {
            ids.add(batch);
        }
        let mut collisions = ids.collisions();
        let mut in_file_order: Vec<&GradedBatch> = batches.iter().collect();
        in_file_order.sort_by_key(|batch| batch.first_row);
        for batch in in_file_order {
            collisions.locate(batch);
        }
        collisions.verdict(Path::new("f.parquet"), "id")
    }

    #[test]
    fn unique_ids_pass() {
        let mut ids = DuplicateIds::default();
        ids.add(&batch(0, &["a", "b"]));
        ids.add(&batch(2, &["c", "d"]));
        assert!(ids.collisions().is_empty());
    }

    #[test]
    fn reports_the_earliest_repeat_across_batches() {
        let error = verdict(&[batch(3, &["x", "b", "a"]), batch(0, &["a", "y", "x"])]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "f.parquet: row 4, column \"id\": duplicate id \"x\", first seen at row 3"
        );
    }

    #[test]
    fn every_repeated_hash_is_found_among_many_distinct_ones() {
        let mut hashes: Vec<u64> = (0..100_000u64)
            .map(|value| value.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        hashes.extend([
            hashes[17],
            hashes[99_999],
            hashes[17],
            0,
            0,
            u64::MAX,
            u64::MAX,
        ]);
        let mut expected = vec![hashes[17], hashes[99_999], 0, u64::MAX];
        expected.sort_unstable();
        assert_eq!(repeated(hashes), expected);
        assert_eq!(repeated(Vec::new()), Vec::<u64>::new());
        assert_eq!(repeated(vec![7]), Vec::<u64>::new());
        assert_eq!(repeated(vec![7, 7]), vec![7]);
    }

    #[test]
    fn a_shared_hash_of_distinct_ids_is_no_duplicate() {
        let mut collisions = Collisions {
            hashes: vec![id_hasher().hash_one("a")],
            rows: Vec::new(),
        };
        collisions.locate(&batch(0, &["a", "b"]));
        collisions.rows.push((
            id_hasher().hash_one("a"),
            5,
            "not a".to_owned(),
            RowLocation::Row(6),
        ));
        assert!(collisions.verdict(Path::new("f.parquet"), "id").is_ok());
    }
}
