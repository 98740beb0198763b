//! Where a run's rows live on disk. While it runs, rows reach
//! `OUT/parts/` in small Parquet files, each sorted, synced and renamed into
//! place, so a crash loses at most the rows not yet flushed (the requests in
//! flight and the last second or two). At the end, and in `routeval merge`,
//! the sorted parts are merged into `responses.parquet` in the table's order:
//! prompt, tier, sample. Rows are streamed, never all held at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::atomic::write_atomically;
use crate::schema::CallTier;
use crate::schema::{ResponseRow, ResponsesWriter, read_responses};

use crate::atomic::run_directory::PARTS;
use crate::schema::RESPONSES_FILE;

/// A (prompt, tier, sample) packed for compact sets.
pub fn packed_key(prompt_index: u64, tier: CallTier, sample: u32) -> u128 {
    (u128::from(prompt_index) << 48) | (u128::from(tier.id()) << 32) | u128::from(sample)
}

/// The tier of a [`packed_key`].
pub fn packed_tier(key: u128) -> CallTier {
    CallTier::from_id(((key >> 32) & 0xffff) as u16)
}

/// Writes sorted parts into `OUT/parts/`.
#[derive(Debug)]
pub struct PartWriter {
    directory: PathBuf,
    run_tag: String,
    next: u64,
}

impl PartWriter {
    pub fn new(out: &Path) -> anyhow::Result<PartWriter> {
        let directory = out.join(PARTS);
        std::fs::create_dir_all(&directory)
            .with_context(|| format!("{}: cannot create", directory.display()))?;
        let run_tag = format!(
            "{}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_millis()),
            std::process::id()
        );
        Ok(PartWriter {
            directory,
            run_tag,
            next: 0,
        })
    }

    /// Names this writer's parts apart from every other run's.
    pub fn tag(&self) -> &str {
        &self.run_tag
    }

    /// Sorts `rows` and writes them as one part, atomically.
    pub fn flush(&mut self, rows: &mut Vec<ResponseRow>) -> anyhow::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        rows.sort_by_key(ResponseRow::key);
        let path = self
            .directory
            .join(format!("part-{}-{:06}.parquet", self.run_tag, self.next));
        self.next += 1;
        write_atomically(&path, |file: &mut File| {
            let mut writer = ResponsesWriter::new(file)?;
            writer.write(rows)?;
            writer.close()
        })
        .with_context(|| format!("{}: cannot write results", path.display()))?;
        rows.clear();
        Ok(())
    }
}

/// Every sorted file holding rows of the run at `out`.
pub fn sources(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut sources = Vec::new();
    let finished = out.join(RESPONSES_FILE);
    if finished.exists() {
        sources.push(finished);
    }
    let parts = out.join(PARTS);
    if parts.exists() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&parts)
            .with_context(|| format!("{}: cannot list", parts.display()))?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|extension| extension == "parquet")
                    && !path
                        .file_name()
                        .is_some_and(|name| name.to_string_lossy().starts_with('.'))
            })
            .collect();
        found.sort();
        sources.extend(found);
    }
    Ok(sources)
}

/// What an earlier, interrupted run already did.
#[derive(Debug, Default)]
pub struct Done {
    /// Calls that need no new request.
    pub completed: HashSet<u128>,
    /// Answers whose verifier call is still to make, by (prompt, verifier,
    /// sample).
    pub awaiting_verifier: HashMap<(u64, CallTier, u32), String>,
    /// Unreadable files moved aside, with why they could not be read.
    pub quarantined: Vec<(PathBuf, String)>,
}

/// The keys of the calls a stored file holds, all or nothing: a file that
/// cannot be read to its end yields an error and no keys.
fn stored_keys(source: &Path, retry_errors: bool) -> anyhow::Result<Vec<u128>> {
    let mut keys = Vec::new();
    for batch in read_responses(source, 8192)? {
        for row in batch? {
            if row.answered() || !retry_errors {
                keys.push(packed_key(row.prompt_index, row.tier, row.sample));
            }
        }
    }
    Ok(keys)
}

use crate::atomic::run_directory::QUARANTINE;

/// Scans what is on disk under `out`. Failed calls count as done unless
/// `retry_errors`. A stored file that cannot be read (cut short by a full
/// disk or a crash of the file system) is moved to `OUT/quarantine/` and
/// its calls are sent again; the paths moved are returned in
/// [`Done::quarantined`]. `verified` pairs each answering tier whose answers
/// the verifier checks with the verifier's tier.
pub fn scan(
    out: &Path,
    retry_errors: bool,
    verified: &[(CallTier, CallTier)],
) -> anyhow::Result<Done> {
    let mut done = Done::default();
    let mut sources = sources(out)?;
    let mut readable = Vec::with_capacity(sources.len());
    for source in sources.drain(..) {
        match stored_keys(&source, retry_errors) {
            Ok(keys) => {
                done.completed.extend(keys);
                readable.push(source);
            }
            Err(error) => {
                let directory = out.join(QUARANTINE);
                std::fs::create_dir_all(&directory)
                    .with_context(|| format!("{}: cannot create", directory.display()))?;
                let name = source.file_name().expect("a stored file has a name");
                let moved = directory.join(name);
                std::fs::rename(&source, &moved).with_context(|| {
                    format!(
                        "{}: unreadable ({error:#}) and cannot be moved aside",
                        source.display()
                    )
                })?;
                done.quarantined.push((moved, format!("{error:#}")));
            }
        }
    }
    let sources = readable;
    if !verified.is_empty() {
        for source in &sources {
            for batch in read_responses(source, 8192)? {
                for row in batch? {
                    let Some(&(_, verifier)) = verified
                        .iter()
                        .find(|(answering, _)| *answering == row.tier)
                    else {
                        continue;
                    };
                    let pending = !done.completed.contains(&packed_key(
                        row.prompt_index,
                        verifier,
                        row.sample,
                    ));
                    if row.answered() && pending {
                        done.awaiting_verifier.insert(
                            (row.prompt_index, verifier, row.sample),
                            row.text.unwrap_or_default(),
                        );
                    }
                }
            }
        }
    }
    Ok(done)
}

/// A row's place in the table: (prompt, tier, sample).
type RowKey = (u64, CallTier, u32);

/// One sorted input of a merge.
struct Cursor {
    batches: Box<dyn Iterator<Item = anyhow::Result<Vec<ResponseRow>>>>,
    rows: std::vec::IntoIter<ResponseRow>,
}

impl Cursor {
    fn next(&mut self) -> anyhow::Result<Option<ResponseRow>> {
        loop {
            if let Some(row) = self.rows.next() {
                return Ok(Some(row));
            }
            match self.batches.next() {
                None => return Ok(None),
                Some(batch) => self.rows = batch?.into_iter(),
            }
        }
    }
}

/// Merges sorted responses files into `destination` (atomically), in the
/// table's order. A key found more than once keeps its answered row if it
/// has one, else its last one. Returns the number of rows written.
pub fn merge_sorted(inputs: &[PathBuf], destination: &Path) -> anyhow::Result<u64> {
    let mut cursors = Vec::with_capacity(inputs.len());
    for input in inputs {
        cursors.push(Cursor {
            batches: Box::new(read_responses(input, 1024)?),
            rows: Vec::new().into_iter(),
        });
    }
    // Smallest key first; ties go to the earlier input.
    let mut heap: BinaryHeap<Reverse<(RowKey, usize)>> = BinaryHeap::new();
    let mut heads: Vec<Option<ResponseRow>> = Vec::with_capacity(cursors.len());
    for (index, cursor) in cursors.iter_mut().enumerate() {
        let head = cursor.next()?;
        if let Some(row) = &head {
            heap.push(Reverse((row.key(), index)));
        }
        heads.push(head);
    }
    let mut written = 0u64;
    write_atomically(destination, |file: &mut File| {
        let mut writer = ResponsesWriter::new(file)?;
        let mut pending: Vec<ResponseRow> = Vec::with_capacity(8192);
        let mut chosen: Option<ResponseRow> = None;
        while let Some(Reverse((_, index))) = heap.pop() {
            let row = heads[index].take().expect("a head for each heap entry");
            let next = cursors[index].next()?;
            if let Some(next_row) = &next {
                if next_row.key() < row.key() {
                    anyhow::bail!("{}: rows are not in order", inputs[index].display());
                }
                heap.push(Reverse((next_row.key(), index)));
            }
            heads[index] = next;
            chosen = match chosen.take() {
                Some(previous) if previous.key() == row.key() => {
                    Some(if previous.answered() && !row.answered() {
                        previous
                    } else {
                        row
                    })
                }
                Some(previous) => {
                    pending.push(previous);
                    if pending.len() == pending.capacity() {
                        written += pending.len() as u64;
                        writer.write(&pending)?;
                        pending.clear();
                    }
                    Some(row)
                }
                None => Some(row),
            };
        }
        pending.extend(chosen);
        written += pending.len() as u64;
        writer.write(&pending)?;
        writer.close()
    })
    .with_context(|| format!("{}: cannot write", destination.display()))?;
    Ok(written)
}

/// Inputs merged at once: each open input holds a page of every column, so
/// a long run's many parts are merged in rounds of this many.
const FAN_IN: usize = 16;

/// Removes the inputs of a merge but `keep` (the merge itself, and the
/// finished table, which is only ever replaced).
fn remove_merged(inputs: &[PathBuf], keep: [&Path; 2]) -> anyhow::Result<()> {
    // Only after the merged file is in place: a crash here leaves inputs
    // whose rows the merged file already holds, which the next merge folds.
    for input in inputs
        .iter()
        .filter(|input| !keep.contains(&input.as_path()))
    {
        std::fs::remove_file(input)
            .with_context(|| format!("{}: cannot remove a merged part", input.display()))?;
    }
    Ok(())
}

/// A name in `parts` for a merge of round `round`, taken by no file there:
/// a kill during an earlier compaction leaves its merges behind as inputs,
/// and a merge written over an input of a later group would lose that
/// input's rows.
fn free_merge_name(parts: &Path, round: usize, index: usize) -> PathBuf {
    let mut attempt = 0u32;
    loop {
        let name = if attempt == 0 {
            format!("merge-{round:02}-{index:06}.parquet")
        } else {
            format!("merge-{round:02}-{index:06}-{attempt}.parquet")
        };
        let path = parts.join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            return path;
        }
        attempt += 1;
    }
}

/// Folds the parts of `out` into `responses.parquet` and removes them.
/// Every step is safe to kill: a merge is renamed into place before its
/// inputs are removed, and never over a file that still holds rows.
pub fn compact(out: &Path) -> anyhow::Result<u64> {
    let mut inputs = sources(out)?;
    let destination = out.join(RESPONSES_FILE);
    let parts = out.join(PARTS);
    let mut round = 0;
    while inputs.len() > FAN_IN {
        let mut merged = Vec::with_capacity(inputs.len().div_ceil(FAN_IN));
        for (index, group) in inputs.chunks(FAN_IN).enumerate() {
            let into = free_merge_name(&parts, round, index);
            merge_sorted(group, &into)?;
            remove_merged(group, [&into, &destination])?;
            merged.push(into);
        }
        inputs = merged;
        round += 1;
    }
    let written = merge_sorted(&inputs, &destination)?;
    remove_merged(&inputs, [&destination, &destination])?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::read_all_responses;

    fn row(prompt_index: u64, tier: CallTier, sample: u32, error: bool) -> ResponseRow {
        ResponseRow {
            prompt_index,
            id: format!("p{prompt_index}"),
            slice: "s".into(),
            tier,
            sample,
            model: "m-1".into(),
            model_version: Some("m-1".into()),
            text: (!error).then(|| format!("answer {prompt_index}")),
            finish_reason: (!error).then(|| "stop".into()),
            input_tokens: Some(10),
            cached_input_tokens: Some(0),
            output_tokens: Some(2),
            usage_estimated: false,
            cost_usd: Some(0.001),
            ttft_ms: Some(5.0),
            total_ms: Some(9.0),
            attempts: 1,
            error_kind: error.then(|| "server_error".into()),
            error_message: error.then(|| "HTTP 500".into()),
            cached: false,
            verdict_logprobs: None,
        }
    }

    #[test]
    fn parts_merge_in_order_and_prefer_answers() {
        let directory = tempfile::tempdir().unwrap();
        let out = directory.path();
        let mut parts = PartWriter::new(out).unwrap();
        parts
            .flush(&mut vec![
                row(3, CallTier::LARGE, 0, false),
                row(1, CallTier::SMALL, 0, true),
            ])
            .unwrap();
        parts
            .flush(&mut vec![
                row(1, CallTier::SMALL, 0, false),
                row(0, CallTier::VERIFIER, 0, false),
                row(0, CallTier::SMALL, 0, false),
            ])
            .unwrap();
        assert_eq!(
            packed_tier(packed_key(3, CallTier::VERIFIER, 1)),
            CallTier::VERIFIER
        );
        let done = scan(out, true, &[(CallTier::SMALL, CallTier::VERIFIER)]).unwrap();
        assert_eq!(done.completed.len(), 4);
        assert_eq!(
            done.awaiting_verifier.keys().collect::<Vec<_>>(),
            vec![&(1, CallTier::VERIFIER, 0)]
        );
        let written = compact(out).unwrap();
        assert_eq!(written, 4);
        let rows = read_all_responses(&out.join(RESPONSES_FILE)).unwrap();
        let keys: Vec<_> = rows.iter().map(ResponseRow::key).collect();
        assert_eq!(
            keys,
            vec![
                (0, CallTier::SMALL, 0),
                (0, CallTier::VERIFIER, 0),
                (1, CallTier::SMALL, 0),
                (3, CallTier::LARGE, 0)
            ]
        );
        assert!(rows.iter().all(ResponseRow::answered));
        assert!(sources(out).unwrap().len() == 1, "parts were left behind");
    }

    #[test]
    fn many_parts_merge_in_rounds_into_one_sorted_table() {
        let directory = tempfile::tempdir().unwrap();
        let out = directory.path();
        let mut parts = PartWriter::new(out).unwrap();
        // 40 parts, each holding every 40th prompt, with one error answered later.
        for part in 0..40u64 {
            let mut rows: Vec<ResponseRow> = (0..10)
                .map(|step| row(step * 40 + part, CallTier::SMALL, 0, false))
                .collect();
            if part == 39 {
                rows.push(row(0, CallTier::LARGE, 0, false));
            }
            if part == 0 {
                rows.push(row(0, CallTier::LARGE, 0, true));
            }
            parts.flush(&mut rows).unwrap();
        }
        assert_eq!(compact(out).unwrap(), 401);
        let rows = read_all_responses(&out.join(RESPONSES_FILE)).unwrap();
        assert!(rows.windows(2).all(|pair| pair[0].key() < pair[1].key()));
        assert!(rows.iter().all(ResponseRow::answered));
        assert_eq!(sources(out).unwrap().len(), 1, "parts were left behind");
    }
}
