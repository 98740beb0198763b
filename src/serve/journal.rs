//! One record per request, kept durably: appended to a JSON-lines journal
//! (`part-NNNNNN.jsonl`) by a writer thread that commits (writes and syncs)
//! what it has every [`COMMIT_WINDOW`] or [`MAX_BATCH`] records, whichever
//! comes first, and rolled into a Parquet part of the same number
//! (`part-NNNNNN.parquet`, written under a temporary name and committed
//! whole) as its [`Roll`] says (by records, bytes or age) and when serve
//! stops. The directory is
//! what `drift --records`, `replay` and `sample` read as it is: parts and
//! the live journal alike. A journal left by a killed serve is rolled when
//! the next one starts; a torn last line (the kill came mid-write) is the
//! only thing dropped.
//!
//! What a kill can lose is bounded: an answer's end waits for its record's
//! commit whenever more than [`MAX_UNCOMMITTED`] records are waiting for
//! one, so at most that many answered requests are ever without a durable
//! record. A write that fails (a full disk, a directory serve may no longer
//! write) is loud at once (stderr naming the file, `/metrics`, `/readyz`
//! not ready); the records of the gap are kept in memory, up to
//! [`MAX_KEPT`], and written as soon as the journal can be written again,
//! and any dropped beyond that are counted.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::log::{Level, Log};
use super::served::ServedRecord;
use crate::records::{FieldNames, RecordsWriter, for_each_record};

/// The lock serve holds on its records directory.
pub const LOCK: &str = ".routeval-serve.lock";

/// The number the next journal takes, kept beside the parts so that part
/// names never repeat for one records directory: an operator who ships
/// rolled parts away (to a bucket) and restarts serve must not get a
/// second `part-000001.parquet` that a sync would overwrite or skip.
pub const NEXT_PART: &str = ".routeval-serve.next-part";

/// The next part's number as kept in [`NEXT_PART`], if it is there.
fn kept_next_part(directory: &Path) -> anyhow::Result<Option<u64>> {
    let path = directory.join(NEXT_PART);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map(Some)
            .with_context(|| format!("{}: is not a part number (--records)", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => {
            Err(error).with_context(|| format!("{}: cannot read (--records)", path.display()))
        }
    }
}

/// Keeps `next` as the next part's number, durably, before a journal of
/// a lower number is created.
fn keep_next_part(directory: &Path, next: u64) -> anyhow::Result<()> {
    crate::atomic::write_bytes_atomically(
        &directory.join(NEXT_PART),
        format!("{next}\n").as_bytes(),
    )
}

/// How long the writer gathers records into one commit after the first.
pub const COMMIT_WINDOW: Duration = Duration::from_millis(2);
/// The most records one commit writes while the journal is healthy.
pub const MAX_BATCH: usize = 4096;
/// The most answered requests whose records may wait for a commit; past
/// it, an answer's end waits for its record.
pub const MAX_UNCOMMITTED: u64 = 256;
/// The records the queue to the writer holds; a record that finds it full
/// is dropped and counted.
const QUEUE: usize = 65_536;
/// The most records kept in memory while the journal cannot be written.
pub const MAX_KEPT: usize = 100_000;
/// How often a journal that could not be written is tried again.
const RETRY_INTERVAL: Duration = Duration::from_millis(250);
/// How often a failing journal is tried when serve stops, before the
/// records it still holds are given up (and said so).
const TRIES_AT_STOP: u32 = 8;

/// What the request path and `/metrics` know of the writer.
#[derive(Debug, Default)]
pub struct JournalHealth {
    /// Records given to the writer, and records written and synced: the
    /// first `committed` of the `sent` (they are written in order).
    sent: AtomicU64,
    committed: AtomicU64,
    failing: AtomicBool,
    /// What the last failed write said, naming the file.
    problem: Mutex<Option<String>>,
    pub write_errors: AtomicU64,
    pub dropped: AtomicU64,
    committed_now: tokio::sync::Notify,
}

impl JournalHealth {
    /// Why the records cannot be written now, if they cannot.
    pub fn problem(&self) -> Option<String> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        self.problem.lock().expect("unpoisoned").clone()
    }

    /// Records not yet written and synced.
    pub fn pending(&self) -> u64 {
        self.sent
            .load(Ordering::Acquire)
            .saturating_sub(self.committed.load(Ordering::Acquire))
    }
}

/// When a journal is rolled into its Parquet part: after `records`
/// records, once it holds `bytes` bytes, or at its first commit `age`
/// after it was begun, whichever comes first (and when serve stops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roll {
    pub records: u64,
    pub bytes: u64,
    pub age: Duration,
    /// How long rolled parts are kept (`--records-retain-days`): for ever
    /// when `None`.
    pub retain: Option<Duration>,
}

/// What an answer waits for before its last bytes leave
/// (`--records-durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Its record's commit only while more than [`MAX_UNCOMMITTED`]
    /// records wait for one: a kill loses at most that many.
    Bounded,
    /// Its record's commit, always: a kill loses no answered request's
    /// record while the journal can be written. Records are still
    /// committed in groups, so waiting answers share one sync.
    Acknowledged,
}

/// The sending end: records go to the writer thread.
#[derive(Debug, Clone)]
pub struct Journal {
    log: Arc<Log>,
    durability: Durability,
    /// Boxed: the queue's slots are allocated up front, a pointer each.
    sender: mpsc::SyncSender<Box<ServedRecord>>,
    /// Held while a record is numbered and queued, so that numbers follow
    /// the queue's order.
    order: Arc<Mutex<()>>,
    pub health: Arc<JournalHealth>,
}

/// The writer thread; joined when serve stops, after the last part rolls.
#[derive(Debug)]
pub struct JournalThread {
    handle: std::thread::JoinHandle<anyhow::Result<()>>,
    _lock: File,
}

impl Journal {
    /// Queues `record`; its number in the journal's order, or `None` if the
    /// queue was full and it was dropped (and counted).
    pub fn write(&self, record: ServedRecord) -> Option<u64> {
        let _order = self.order.lock().expect("unpoisoned");
        match self.sender.try_send(Box::new(record)) {
            Ok(()) => Some(
                self.health
                    .sent
                    .fetch_add(1, Ordering::AcqRel)
                    .saturating_add(1),
            ),
            Err(_) => {
                if self.health.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    self.log
                        .event(
                            Level::Error,
                            "records_dropped",
                            format!("the records writer is {QUEUE} records behind; records are being dropped (routeval_records_dropped_total)"),
                        )
                        .emit();
                }
                None
            }
        }
    }

    /// Waits until record `number` is written and synced, if more than
    /// [`MAX_UNCOMMITTED`] records are waiting or answers are acknowledged;
    /// a journal that cannot be written keeps its records in memory
    /// instead, and nothing waits.
    pub async fn committed(&self, number: u64) {
        loop {
            let notified = self.health.committed_now.notified();
            let health = &self.health;
            let behind =
                self.durability == Durability::Acknowledged || health.pending() > MAX_UNCOMMITTED;
            if !behind
                || health.committed.load(Ordering::Acquire) >= number
                || health.failing.load(Ordering::Acquire)
            {
                return;
            }
            notified.await;
        }
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

/// The directory `mkfs` makes at a filesystem's root.
const LOST_AND_FOUND: &str = "lost+found";

/// Refuses a records directory serve did not make: one that exists, holds
/// anything but a filesystem's `lost+found`, and has no [`LOCK`] (which only serve creates). serve rolls and
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
    // A filesystem's root holds `lost+found`, a directory of the
    // filesystem's own: a volume mounted as --records is empty all the same.
    let anything = entries.any(|entry| {
        entry.is_ok_and(|entry| {
            entry.file_name() != LOST_AND_FOUND
                || !entry.file_type().is_ok_and(|kind| kind.is_dir())
        })
    });
    if made_by_serve || !anything {
        return Ok(());
    }
    anyhow::bail!(
        "{}: is not empty and was not made by routeval serve (no {LOCK}); give a new or empty --records",
        directory.display()
    )
}

/// Opens `directory` (created if missing), rolls what a killed serve left,
/// and starts the writer.
pub fn open(
    directory: &Path,
    roll: Roll,
    durability: Durability,
    log: Arc<Log>,
) -> anyhow::Result<(Journal, JournalThread)> {
    check_directory(directory)?;
    std::fs::create_dir_all(directory)
        .with_context(|| format!("{}: cannot create (--records)", directory.display()))?;
    let lock = crate::atomic::lock_directory(directory, LOCK, "routeval serve", "--records")?;
    let mut next = kept_next_part(directory)?.unwrap_or(1).max(1);
    for (number, kind) in parts(directory)? {
        next = next.max(number.saturating_add(1));
        if kind == PartKind::Journal {
            recover(directory, number)?;
        }
    }
    super::retention::prune_logged(directory, roll.retain, &log);
    let (sender, receiver) = mpsc::sync_channel(QUEUE);
    let health = Arc::new(JournalHealth::default());
    let writer = Writer {
        directory: directory.to_owned(),
        number: next,
        file: None,
        good_len: 0,
        written: 0,
        begun: Instant::now(),
        roll,
        roll_failed: false,
        created: false,
        health: health.clone(),
        log: log.clone(),
    };
    let handle = std::thread::Builder::new()
        .name("serve-records".to_owned())
        .spawn(move || writer.run(&receiver))?;
    Ok((
        Journal {
            log,
            durability,
            sender,
            order: Arc::new(Mutex::new(())),
            health,
        },
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
        .map_or(0, |end| end.saturating_add(1));
    if whole < bytes.len() {
        let file = std::fs::OpenOptions::new().write(true).open(&journal)?;
        file.set_len(whole as u64)?;
        file.sync_all()?;
    }
    roll(directory, number)
}

/// Writes journal `number` as its Parquet part, then removes the journal.
/// A part already there is one a roll wrote before it could remove its
/// journal (the directory could not be written, or serve was killed): the
/// journal, only ever appended to since, holds all the part holds and
/// perhaps more, and the part is written again from it.
fn roll(directory: &Path, number: u64) -> anyhow::Result<()> {
    let journal = journal_path(directory, number);
    let parquet = parquet_path(directory, number);
    let left_by_a_roll =
        std::fs::symlink_metadata(&parquet).is_ok_and(|metadata| metadata.file_type().is_file());
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
        if left_by_a_roll {
            staged.commit()?;
        } else {
            staged.commit_new()?;
        }
    }
    std::fs::remove_file(&journal)
        .with_context(|| format!("{}: cannot remove the rolled journal", journal.display()))?;
    crate::atomic::sync_directory(&journal)
}

/// The writer thread's state: the journal being appended to.
struct Writer {
    directory: PathBuf,
    number: u64,
    file: Option<File>,
    /// The journal's length after its last commit: a failed write is cut
    /// back to it, so no torn line is left between two whole ones.
    good_len: u64,
    written: u64,
    /// When the journal was begun (or this writer took it over).
    begun: Instant,
    roll: Roll,
    /// A roll failed; the journal is kept and rolled at the next commit.
    roll_failed: bool,
    /// This journal was created by this writer.
    created: bool,
    health: Arc<JournalHealth>,
    log: Arc<Log>,
}

impl Writer {
    fn run(mut self, receiver: &mpsc::Receiver<Box<ServedRecord>>) -> anyhow::Result<()> {
        let mut pending: Vec<ServedRecord> = Vec::new();
        let mut open = true;
        let mut tries_at_stop: u32 = 0;
        while open || !pending.is_empty() {
            if pending.is_empty() {
                match receiver.recv() {
                    Ok(record) => pending.push(*record),
                    Err(_) => break,
                }
            }
            let failing = self.health.failing.load(Ordering::Acquire);
            let window = if failing {
                RETRY_INTERVAL
            } else {
                COMMIT_WINDOW
            };
            let most = if failing { MAX_KEPT } else { MAX_BATCH };
            if open {
                open = Writer::gather(receiver, &mut pending, window, most);
            }
            if failing && pending.len() >= most {
                // Full: the queue holds what comes next, and past it the
                // records are dropped and counted.
                std::thread::sleep(RETRY_INTERVAL);
            }
            match self.commit(&pending) {
                Ok(()) => {
                    let count = pending.len() as u64;
                    pending.clear();
                    self.health.committed.fetch_add(count, Ordering::AcqRel);
                    self.health.committed_now.notify_waiters();
                    if self.health.failing.swap(false, Ordering::AcqRel) {
                        let dropped = self.health.dropped.load(Ordering::Relaxed);
                        self.log
                            .event(
                                Level::Info,
                                "records_resumed",
                                format!("the records are written again; {count} records kept through the gap, {dropped} dropped in all"),
                            )
                            .field("file", self.journal().display().to_string())
                            .field("kept", count)
                            .field("dropped", dropped)
                            .emit();
                    }
                }
                Err(problem) => {
                    self.fail(&problem);
                    if !open {
                        tries_at_stop = tries_at_stop.saturating_add(1);
                        if tries_at_stop >= TRIES_AT_STOP {
                            anyhow::bail!(
                                "{} records could not be written: {problem}",
                                pending.len()
                            );
                        }
                        std::thread::sleep(RETRY_INTERVAL);
                    }
                }
            }
        }
        if self.file.take().is_some() || self.roll_failed {
            roll(&self.directory, self.number)?;
        }
        Ok(())
    }

    /// Adds to `pending` what comes within `window`, up to `most` records;
    /// false once every sender is gone.
    fn gather(
        receiver: &mpsc::Receiver<Box<ServedRecord>>,
        pending: &mut Vec<ServedRecord>,
        window: Duration,
        most: usize,
    ) -> bool {
        let until = Instant::now()
            .checked_add(window)
            .unwrap_or_else(Instant::now);
        while pending.len() < most {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            match receiver.recv_timeout(left) {
                Ok(record) => pending.push(*record),
                Err(mpsc::RecvTimeoutError::Timeout) => return true,
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
        true
    }

    fn journal(&self) -> PathBuf {
        journal_path(&self.directory, self.number)
    }

    /// Writes and syncs `records`, then rolls the journal if it is due.
    fn commit(&mut self, records: &[ServedRecord]) -> anyhow::Result<()> {
        let mut lines = Vec::new();
        for record in records {
            serde_json::to_writer(&mut lines, &record.record)?;
            lines.push(b'\n');
        }
        let path = self.journal();
        if self.file.is_none() {
            // A journal is created new, never over a file serve did not
            // make; one it made is reopened only as the regular file it is.
            let mut options = std::fs::OpenOptions::new();
            options.append(true);
            if self.created {
                crate::atomic::check_destination(&path, "--records")?;
            } else {
                keep_next_part(&self.directory, self.number.saturating_add(1))?;
                options.create_new(true);
            }
            let file = options
                .open(&path)
                .with_context(|| format!("{}: cannot open the journal", path.display()))?;
            self.created = true;
            self.begun = Instant::now();
            self.good_len = file.metadata().map_or(0, |metadata| metadata.len());
            crate::atomic::sync_directory(&path)?;
            self.file = Some(file);
        }
        let file = self.file.as_mut().expect("opened above");
        let written = file.write_all(&lines).and_then(|()| file.sync_data());
        if let Err(error) = written {
            // Cut what reached the file back to the last whole line; the
            // records are written again, whole, with the next commit.
            let _ = file.set_len(self.good_len);
            return Err(error).with_context(|| format!("{}: cannot write", path.display()));
        }
        self.good_len = self.good_len.saturating_add(lines.len() as u64);
        self.written = self.written.saturating_add(records.len() as u64);
        let due = self.written >= self.roll.records
            || self.good_len >= self.roll.bytes
            || self.begun.elapsed() >= self.roll.age;
        if due || self.roll_failed {
            self.file = None;
            match roll(&self.directory, self.number) {
                Ok(()) => {
                    super::retention::prune_logged(&self.directory, self.roll.retain, &self.log);
                    self.roll_failed = false;
                    self.created = false;
                    self.number = self.number.saturating_add(1);
                    self.written = 0;
                    self.good_len = 0;
                }
                // The records are committed in the journal; it is rolled
                // with a later commit.
                Err(problem) => {
                    self.roll_failed = true;
                    self.log
                        .event(
                            Level::Error,
                            "records_roll_failed",
                            format!("{problem:#}; the journal is kept and rolled later"),
                        )
                        .field("file", path.display().to_string())
                        .emit();
                }
            }
        }
        Ok(())
    }

    fn fail(&self, problem: &anyhow::Error) {
        self.health.write_errors.fetch_add(1, Ordering::Relaxed);
        let text = format!("{problem:#}");
        let mut last = self.health.problem.lock().expect("unpoisoned");
        let first = !self.health.failing.swap(true, Ordering::AcqRel);
        if first || last.as_deref() != Some(text.as_str()) {
            self.log
                .event(
                    Level::Error,
                    "records_write_failed",
                    format!("the records cannot be written: {text}; their records are kept in memory (at most {MAX_KEPT}) until the journal can be written again"),
                )
                .field("file", self.journal().display().to_string())
                .field("error", text.clone())
                .emit();
        }
        *last = Some(text);
        self.health.committed_now.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_of(directory: &Path, ids: &[&str]) {
        let mut lines = Vec::new();
        for id in ids {
            serde_json::to_writer(&mut lines, &ServedRecord::for_test(id, "s").record).unwrap();
            lines.push(b'\n');
        }
        std::fs::write(journal_path(directory, 1), lines).unwrap();
    }

    #[test]
    fn a_part_left_beside_its_journal_is_written_again_from_the_journal() {
        let directory = tempfile::tempdir().unwrap();
        journal_of(directory.path(), &["a", "b"]);
        roll(directory.path(), 1).unwrap();
        // The journal could not be removed, and took a record more.
        journal_of(directory.path(), &["a", "b", "c"]);
        roll(directory.path(), 1).unwrap();
        assert!(!journal_path(directory.path(), 1).exists());
        let mut ids = Vec::new();
        for_each_record(
            &parquet_path(directory.path(), 1),
            &FieldNames::default(),
            |_, record| {
                ids.push(record.id.to_string());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(ids, ["a", "b", "c"]);
    }
}
