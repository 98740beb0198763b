//! One record per request, kept durably: appended to a JSON-lines journal
//! (`part-NNNNNN.jsonl`) on a writer thread that syncs each batch it drains,
//! and rolled into a Parquet part of the same number (`part-NNNNNN.parquet`,
//! written under a temporary name and committed whole) every `roll_after`
//! records and when serve stops. The directory is what `drift --records`,
//! `replay` and `sample` read as it is: parts and the live journal alike.
//! A journal left by a killed serve is rolled when the next one starts; a
//! torn last line (the kill came mid-write) is the only thing dropped.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use anyhow::Context;
use serde::Serialize;

use crate::records::{FieldNames, RecordsWriter, for_each_record};

/// The lock serve holds on its records directory.
pub const LOCK: &str = ".routeval-serve.lock";

/// A served request, as the journal writes it (the request-records columns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServedRecord {
    pub id: String,
    pub timestamp: i64,
    pub slice: String,
    pub logical_model: String,
    pub route: String,
    pub model: Option<String>,
    pub reason: String,
    pub score: Option<f64>,
    pub status: &'static str,
    pub input_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    pub total_ms: Option<f64>,
    pub finish_reason: Option<String>,
    pub cost_usd: Option<f64>,
    pub prompt: Option<String>,
    pub messages: Option<String>,
    pub config_version: u64,
    pub config_sha256: String,
    pub shadow_route: Option<String>,
    pub shadow_reason: Option<String>,
    pub shadow_score: Option<f64>,
    pub shadow_config_version: Option<u64>,
}

/// The sending end: records go to the writer thread.
#[derive(Debug, Clone)]
pub struct Journal {
    sender: mpsc::Sender<ServedRecord>,
}

/// The writer thread; joined when serve stops, after the last part rolls.
#[derive(Debug)]
pub struct JournalThread {
    handle: std::thread::JoinHandle<anyhow::Result<()>>,
    _lock: File,
}

impl Journal {
    pub fn write(&self, record: ServedRecord) {
        // The writer stops only once every sender is gone.
        let _ = self.sender.send(record);
    }
}

impl JournalThread {
    /// Waits for the writer to drain, sync and roll what it holds.
    pub fn finish(self) -> anyhow::Result<()> {
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("the records writer panicked"))?
    }
}

/// Refuses a records directory serve did not make: one that exists, holds
/// anything, and has no [`LOCK`] (which only serve creates). serve rolls and
/// removes the journals it finds there, so a directory of someone else's
/// `part-*.jsonl` must never be taken for its own.
pub fn check_directory(directory: &Path) -> anyhow::Result<()> {
    let mut entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("{}: cannot list (--records)", directory.display()));
        }
    };
    let made_by_serve = std::fs::symlink_metadata(directory.join(LOCK))
        .is_ok_and(|metadata| metadata.file_type().is_file());
    if made_by_serve || entries.next().is_none() {
        return Ok(());
    }
    anyhow::bail!(
        "{}: is not empty and was not made by routeval serve (no {LOCK}); give a new or empty --records",
        directory.display()
    )
}

/// Opens `directory` (created if missing), rolls what a killed serve left,
/// and starts the writer.
pub fn open(directory: &Path, roll_after: u64) -> anyhow::Result<(Journal, JournalThread)> {
    check_directory(directory)?;
    std::fs::create_dir_all(directory)
        .with_context(|| format!("{}: cannot create (--records)", directory.display()))?;
    let lock = crate::atomic::lock_directory(directory, LOCK, "routeval serve", "--records")?;
    let mut next = 1;
    for (number, kind) in parts(directory)? {
        next = next.max(number + 1);
        if kind == PartKind::Journal {
            recover(directory, number)?;
        }
    }
    let (sender, receiver) = mpsc::channel();
    let directory = directory.to_owned();
    let handle = std::thread::Builder::new()
        .name("serve-records".to_owned())
        .spawn(move || write_loop(&directory, next, roll_after, &receiver))?;
    Ok((
        Journal { sender },
        JournalThread {
            handle,
            _lock: lock,
        },
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartKind {
    Journal,
    Parquet,
}

fn journal_path(directory: &Path, number: u64) -> PathBuf {
    directory.join(format!("part-{number:06}.jsonl"))
}

fn parquet_path(directory: &Path, number: u64) -> PathBuf {
    directory.join(format!("part-{number:06}.parquet"))
}

/// The numbered parts in `directory`.
fn parts(directory: &Path) -> anyhow::Result<Vec<(u64, PartKind)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory)
        .with_context(|| format!("{}: cannot list (--records)", directory.display()))?
    {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("part-") else {
            continue;
        };
        let (number, kind) = match (rest.strip_suffix(".jsonl"), rest.strip_suffix(".parquet")) {
            (Some(number), _) => (number, PartKind::Journal),
            (_, Some(number)) => (number, PartKind::Parquet),
            _ => continue,
        };
        if let Ok(number) = number.parse::<u64>() {
            found.push((number, kind));
        }
    }
    found.sort_by_key(|(number, _)| *number);
    Ok(found)
}

/// A journal a killed serve left: rolled into its part, unless the part
/// is already there (the kill came between the commit and the removal).
fn recover(directory: &Path, number: u64) -> anyhow::Result<()> {
    let journal = journal_path(directory, number);
    // A link or a device by a journal's name is not a journal serve wrote.
    crate::atomic::check_destination(&journal, "--records")?;
    if std::fs::symlink_metadata(parquet_path(directory, number)).is_ok() {
        std::fs::remove_file(&journal)
            .with_context(|| format!("{}: cannot remove the rolled journal", journal.display()))?;
        return Ok(());
    }
    let bytes = std::fs::read(&journal)
        .with_context(|| format!("{}: cannot read the journal", journal.display()))?;
    let whole = bytes
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |end| end + 1);
    if whole < bytes.len() {
        let file = std::fs::OpenOptions::new().write(true).open(&journal)?;
        file.set_len(whole as u64)?;
        file.sync_all()?;
    }
    roll(directory, number)
}

/// Writes journal `number` as its Parquet part, then removes the journal.
fn roll(directory: &Path, number: u64) -> anyhow::Result<()> {
    let journal = journal_path(directory, number);
    let parquet = parquet_path(directory, number);
    if std::fs::metadata(&journal)
        .map(|metadata| metadata.len())
        .unwrap_or(0)
        > 0
    {
        let staged = crate::atomic::Staged::new(&parquet, |file| {
            let mut writer = RecordsWriter::new(file)?;
            let mut failed = None;
            for_each_record(&journal, &FieldNames::default(), |_, record| {
                if failed.is_none()
                    && let Err(error) = writer.push(record.clone().into_owned())
                {
                    failed = Some(error);
                }
                Ok(())
            })?;
            if let Some(error) = failed {
                return Err(error);
            }
            writer.close()?;
            Ok(())
        })
        .with_context(|| format!("{}: cannot roll the journal", journal.display()))?;
        staged.commit_new()?;
    }
    std::fs::remove_file(&journal)
        .with_context(|| format!("{}: cannot remove the rolled journal", journal.display()))?;
    crate::atomic::sync_directory(&journal)
}

fn write_loop(
    directory: &Path,
    mut number: u64,
    roll_after: u64,
    receiver: &mpsc::Receiver<ServedRecord>,
) -> anyhow::Result<()> {
    let mut file: Option<File> = None;
    let mut written = 0u64;
    let open = |number: u64| -> anyhow::Result<File> {
        let path = journal_path(directory, number);
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("{}: cannot create the journal", path.display()))?;
        crate::atomic::sync_directory(&path)?;
        Ok(file)
    };
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        batch.extend(receiver.try_iter());
        let mut lines = Vec::new();
        for record in &batch {
            serde_json::to_writer(&mut lines, record)?;
            lines.push(b'\n');
        }
        let journal = match &mut file {
            Some(journal) => journal,
            None => file.insert(open(number)?),
        };
        journal.write_all(&lines)?;
        // One sync per batch: a record is on disk before the next batch.
        journal.sync_data()?;
        written += batch.len() as u64;
        if written >= roll_after {
            file = None;
            roll(directory, number)?;
            number += 1;
            written = 0;
        }
    }
    if file.take().is_some() {
        roll(directory, number)?;
    }
    Ok(())
}
