//! The run's write-ahead journal. Every call's row is appended to
//! `OUT/journal/journal-<tag>.jsonl` as one JSON line the moment it arrives
//! (written to the operating system within milliseconds, in batches of what
//! arrived together), so a process killed at any instant has lost only the
//! calls still in flight: a paid call is never paid twice. The Parquet parts
//! remain the run's store; once a part holding the journal's rows is synced,
//! the journal is emptied. A resume first folds what a dead run's journals
//! hold into a part (`recover`), then removes them. A line cut short by the
//! kill is the one call that was being written, and is sent again.

use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::store::PartWriter;
use crate::schema::ResponseRow;

use crate::atomic::run_directory::JOURNAL as JOURNAL_DIR;

/// The open journal of a running run.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    pending: Vec<u8>,
}

impl Journal {
    /// Starts a new journal under `out`.
    pub fn create(out: &Path, tag: &str) -> anyhow::Result<Journal> {
        let directory = out.join(JOURNAL_DIR);
        std::fs::create_dir_all(&directory)
            .with_context(|| format!("{}: cannot create", directory.display()))?;
        let path = directory.join(format!("journal-{tag}.jsonl"));
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("{}: cannot create", path.display()))?;
        crate::atomic::sync_directory(&path)?;
        Ok(Journal {
            file,
            path,
            pending: Vec::with_capacity(1 << 16),
        })
    }

    /// Queues a row; [`Journal::write`] hands it to the operating system.
    pub fn append(&mut self, row: &ResponseRow) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.pending, row).context("cannot encode a journal row")?;
        self.pending.push(b'\n');
        Ok(())
    }

    /// Writes the queued rows: from here they survive the process.
    pub fn write(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file
            .write_all(&self.pending)
            .with_context(|| format!("{}: cannot write", self.path.display()))?;
        self.pending.clear();
        Ok(())
    }

    /// Empties the journal: every row it held is now in a synced part.
    pub fn truncate(&mut self) -> anyhow::Result<()> {
        self.write()?;
        self.file
            .set_len(0)
            .with_context(|| format!("{}: cannot truncate", self.path.display()))
    }

    /// Removes the journal once every row it held is in a synced part.
    pub fn close(mut self) -> anyhow::Result<()> {
        self.truncate()?;
        std::fs::remove_file(&self.path)
            .with_context(|| format!("{}: cannot remove", self.path.display()))
    }
}

/// What [`recover`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub journals: usize,
    pub rows: u64,
    /// Lines cut short by the kill: their calls are sent again.
    pub torn: u64,
}

/// Folds the journals a killed run left under `out` into one part, then
/// removes them.
pub fn recover(out: &Path) -> anyhow::Result<Recovered> {
    let directory = out.join(JOURNAL_DIR);
    let mut found = Recovered::default();
    let Ok(entries) = std::fs::read_dir(&directory) else {
        return Ok(found);
    };
    let mut journals: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "jsonl")
                && path
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("journal-"))
        })
        .collect();
    journals.sort();
    let mut rows = Vec::new();
    for journal in &journals {
        let file =
            File::open(journal).with_context(|| format!("{}: cannot read", journal.display()))?;
        let mut reader = std::io::BufReader::new(file);
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = reader
                .read_until(b'\n', &mut line)
                .with_context(|| format!("{}: cannot read", journal.display()))?;
            if read == 0 {
                break;
            }
            let complete = line.last() == Some(&b'\n');
            match serde_json::from_slice::<ResponseRow>(&line) {
                Ok(row) if complete => rows.push(row),
                _ => found.torn += 1,
            }
        }
        found.journals += 1;
    }
    found.rows = rows.len() as u64;
    if !rows.is_empty() {
        PartWriter::new(out)?.flush(&mut rows)?;
    }
    for journal in &journals {
        std::fs::remove_file(journal)
            .with_context(|| format!("{}: cannot remove", journal.display()))?;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::store::scan;
    use crate::schema::CallTier;

    fn row(prompt_index: u64) -> ResponseRow {
        ResponseRow {
            prompt_index,
            id: format!("p{prompt_index}"),
            slice: "s".into(),
            tier: CallTier::SMALL,
            sample: 0,
            model: "m-1".into(),
            model_version: Some("m-1".into()),
            text: Some(format!("answer {prompt_index} \"quoted\"\nline")),
            finish_reason: Some("stop".into()),
            input_tokens: Some(10),
            cached_input_tokens: None,
            output_tokens: Some(2),
            usage_estimated: false,
            cost_usd: Some(0.1 + 0.2),
            ttft_ms: Some(1.0 / 3.0),
            total_ms: Some(9.0),
            attempts: 1,
            error_kind: None,
            error_message: None,
            cached: false,
            verdict_logprobs: None,
        }
    }

    #[test]
    fn a_killed_runs_journal_becomes_a_part_and_a_torn_line_is_dropped() {
        let directory = tempfile::tempdir().unwrap();
        let out = directory.path();
        let mut journal = Journal::create(out, "t").unwrap();
        for index in 0..3 {
            journal.append(&row(index)).unwrap();
        }
        journal.write().unwrap();
        let path = journal.path.clone();
        drop(journal);
        // The kill came in the middle of the fourth line.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"prompt_index\":3,\"id\":\"p").unwrap();
        drop(file);

        let recovered = recover(out).unwrap();
        assert_eq!(
            recovered,
            Recovered {
                journals: 1,
                rows: 3,
                torn: 1
            }
        );
        assert!(!path.exists(), "the journal is folded and removed");
        let done = scan(out, false, &[]).unwrap();
        assert_eq!(done.completed.len(), 3);
        let parts = super::super::store::sources(out).unwrap();
        let rows = crate::schema::read_all_responses(&parts[0]).unwrap();
        // Floats and text come back exactly as they were recorded.
        assert_eq!(rows, (0..3).map(row).collect::<Vec<_>>());
        assert_eq!(recover(out).unwrap(), Recovered::default());
    }
}
