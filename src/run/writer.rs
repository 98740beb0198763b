//! The run's writer: every answered call journaled as it arrives, and the
//! buffered rows written as sorted parts, so that no paid call is lost to a
//! kill or a full disk.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use super::journal::Journal;
use super::store::PartWriter;
use crate::schema::ResponseRow;

/// Journals every row as it arrives, and writes the buffered rows as sorted
/// parts every `flush_every`; each synced part empties the journal. At the
/// first write that fails it signals `failed` and writes no more, but keeps
/// the rows that still arrive (calls in flight) and, when stopped, tries
/// once to save them in a part of their own, which is written whole or not
/// at all; the error says how many it could not save.
pub(super) async fn write_rows(
    out: PathBuf,
    mut rows: mpsc::Receiver<ResponseRow>,
    flush_every: Duration,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    failed: tokio::sync::oneshot::Sender<()>,
) -> anyhow::Result<()> {
    const PART_ROWS: usize = 65_536;
    // Rows per journal write: enough to batch a burst into one system call,
    // few enough that the encoded batch stays small.
    const JOURNAL_BATCH: usize = 512;
    let mut parts = PartWriter::new(&out)?;
    let mut journal = Journal::create(&out, parts.tag())?;
    let mut buffer: Vec<ResponseRow> = Vec::new();
    let mut tick = tokio::time::interval(flush_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failure: Option<anyhow::Error> = None;
    // The rows at the front of `buffer` that the journal holds.
    let mut journaled = 0usize;
    let mut failed = Some(failed);
    let mut fail = |failure: &mut Option<anyhow::Error>, error: anyhow::Error| {
        *failure = Some(error);
        if let Some(failed) = failed.take() {
            let _ = failed.send(());
        }
    };
    loop {
        tokio::select! {
            row = rows.recv() => match row {
                Some(row) => {
                    let first = buffer.len();
                    buffer.push(row);
                    // Whatever else has arrived goes in the same write.
                    for _ in 1..JOURNAL_BATCH {
                        if buffer.len() >= PART_ROWS {
                            break;
                        }
                        let Ok(row) = rows.try_recv() else { break };
                        buffer.push(row);
                    }
                    if failure.is_some() {
                        continue;
                    }
                    let written = buffer[first..]
                        .iter()
                        .try_for_each(|row| journal.append(row))
                        .and_then(|()| journal.write());
                    if written.is_ok() {
                        journaled = buffer.len();
                    }
                    let written = written.and_then(|()| {
                        if buffer.len() >= PART_ROWS {
                            flush(&mut parts, &mut journal, &mut buffer)
                        } else {
                            Ok(())
                        }
                    });
                    match written {
                        Ok(()) => journaled = buffer.len(),
                        Err(error) => fail(&mut failure, error),
                    }
                }
                None => break,
            },
            _ = tick.tick(), if failure.is_none() => {
                match flush(&mut parts, &mut journal, &mut buffer) {
                    Ok(()) => journaled = 0,
                    Err(error) => fail(&mut failure, error),
                }
            }
            _ = &mut stop => {
                // Stopped: keep what arrived, including rows already queued.
                while let Ok(row) = rows.try_recv() {
                    if failure.is_none() {
                        journal.append(&row)?;
                    }
                    buffer.push(row);
                }
                break;
            }
        }
    }
    let Some(error) = failure else {
        flush(&mut parts, &mut journal, &mut buffer)?;
        return journal.close();
    };
    Err(save_after_failure(
        &mut parts,
        &mut journal,
        &mut buffer,
        journaled,
        &error,
    ))
}

/// The journal's rows written into a part, synced, and the journal
/// emptied.
fn flush(
    parts: &mut PartWriter,
    journal: &mut Journal,
    buffer: &mut Vec<ResponseRow>,
) -> anyhow::Result<()> {
    tokio::task::block_in_place(|| {
        journal.write()?;
        parts.flush(buffer)?;
        journal.truncate()
    })
}

/// After the first write that failed: tries once to save the rows kept in
/// a part of their own, and says how many are lost (`journaled`: the rows
/// at the front of `buffer` the journal holds).
fn save_after_failure(
    parts: &mut PartWriter,
    journal: &mut Journal,
    buffer: &mut Vec<ResponseRow>,
    journaled: usize,
    error: &anyhow::Error,
) -> anyhow::Error {
    // The journal may end in a line cut short: it is written no more, and
    // the resume sends that call again.
    let unjournaled = buffer.len() - journaled.min(buffer.len());
    let saved = tokio::task::block_in_place(|| parts.flush(buffer)).is_ok();
    if saved {
        let _ = journal.truncate();
    }
    let kept = if saved || unjournaled == 0 {
        "every answered call is saved; the calls in flight will be sent again".to_owned()
    } else {
        format!(
            "{unjournaled} answered calls could not be saved; they and the calls in flight will be sent again"
        )
    };
    anyhow::anyhow!("{error:#}; {kept}")
}
