//! `--records-retain-days`: the records' Parquet parts older than the
//! retention are removed, at start and after each roll, so a records volume
//! holds a bounded window of requests. Only serve's own rolled parts
//! (`part-NNNNNN.parquet`, regular files) are ever removed, judged by when
//! they were written; the journal being written, a symlink, and any other
//! file in the directory are left alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::log::{Level, Log};

/// Whether `name` is a part serve rolls: `part-`, six or more digits,
/// `.parquet`.
fn is_rolled_part(name: &str) -> bool {
    name.strip_prefix("part-")
        .and_then(|rest| rest.strip_suffix(".parquet"))
        .is_some_and(|digits| digits.len() >= 6 && digits.bytes().all(|byte| byte.is_ascii_digit()))
}

/// Removes the rolled parts in `directory` last written before `now` less
/// `retain`: the parts removed, in name order, and the first error met
/// (later parts are still tried).
fn prune(directory: &Path, retain: Duration, now: SystemTime) -> (Vec<PathBuf>, Option<String>) {
    let Some(cutoff) = now.checked_sub(retain) else {
        return (Vec::new(), None);
    };
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) => {
            return (
                Vec::new(),
                Some(format!("{}: {error}", directory.display())),
            );
        }
    };
    let mut old: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(is_rolled_part))
        .map(|entry| entry.path())
        .filter(|path| {
            std::fs::symlink_metadata(path).is_ok_and(|metadata| {
                metadata.file_type().is_file()
                    && metadata.modified().is_ok_and(|written| written < cutoff)
            })
        })
        .collect();
    old.sort();
    let mut removed = Vec::with_capacity(old.len());
    let mut first_error = None;
    for path in old {
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(error) => {
                first_error.get_or_insert_with(|| format!("{}: {error}", path.display()));
            }
        }
    }
    (removed, first_error)
}

/// [`prune`] with `retain`, if set, said in the log: `records_pruned`
/// naming the parts removed, `records_prune_failed` naming what could
/// not be.
pub(super) fn prune_logged(directory: &Path, retain: Option<Duration>, log: &Log) {
    let Some(retain) = retain else {
        return;
    };
    let (removed, failed) = prune(directory, retain, SystemTime::now());
    let days = retain.as_secs() / 86_400;
    if !removed.is_empty() {
        let names: Vec<String> = removed
            .iter()
            .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
            .collect();
        log.event(
            Level::Info,
            "records_pruned",
            format!(
                "removed {} records part(s) older than --records-retain-days {days}: {}",
                names.len(),
                names.join(", ")
            ),
        )
        .field("parts", names)
        .emit();
    }
    if let Some(problem) = failed {
        log.event(
            Level::Warn,
            "records_prune_failed",
            format!("cannot remove a records part past --records-retain-days {days}: {problem}"),
        )
        .emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_serves_own_rolled_parts_are_named_so() {
        for name in ["part-000001.parquet", "part-1234567.parquet"] {
            assert!(is_rolled_part(name), "{name}");
        }
        for name in [
            "part-000001.jsonl",
            "part-1.parquet",
            "part-00000a.parquet",
            "part-000001.parquet.bak",
            "my-part-000001.parquet",
            "lost+found",
        ] {
            assert!(!is_rolled_part(name), "{name}");
        }
    }
}
