//! The one way routeval writes a file. Output files appear whole or not at
//! all: each is written to a new temporary file beside its destination,
//! synced, renamed over it, and the directory synced so the rename survives a
//! crash. Before a command writes anything, [`check_outputs`] applies the one
//! rule for every output: an existing file is replaced only when it is
//! routeval's own output of the same kind (its schema header, metadata key or
//! marker says so); a signed route config, a signature and the files of a run
//! directory are never replaced; a destination that is not a regular file or
//! that is also an input is refused. routeval never replaces what it did not
//! create.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

mod outputs;
mod owned_directory;

pub use outputs::{
    Named, Output, OutputError, OutputKind, Replaces, check_destination, check_outputs,
    is_run_directory, run_directory,
};
pub use owned_directory::OwnedDirectory;

/// A file written and synced under a temporary name beside its destination,
/// not yet in place. A command with several outputs stages them all, then
/// commits them, so that a failure in any leaves none written. Dropped
/// uncommitted, it removes its temporary file.
#[derive(Debug)]
pub struct Staged {
    temporary: PathBuf,
    destination: PathBuf,
    committed: bool,
}

impl Staged {
    /// Writes `path`'s content through `write` under a temporary name.
    pub fn new(
        path: &Path,
        write: impl FnOnce(&mut File) -> anyhow::Result<()>,
    ) -> anyhow::Result<Staged> {
        Staged::with_options(path, std::fs::OpenOptions::new(), write)
    }

    /// [`Staged::new`] for a secret: readable by its owner alone from the
    /// moment it exists.
    pub fn new_secret(
        path: &Path,
        write: impl FnOnce(&mut File) -> anyhow::Result<()>,
    ) -> anyhow::Result<Staged> {
        let mut options = std::fs::OpenOptions::new();
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        Staged::with_options(path, options, write)
    }

    fn with_options(
        path: &Path,
        mut options: std::fs::OpenOptions,
        write: impl FnOnce(&mut File) -> anyhow::Result<()>,
    ) -> anyhow::Result<Staged> {
        check_destination(path, "output")?;
        sweep_stale_temporaries(path);
        let temporary = temporary_path(path);
        // `create_new`: never follow or reuse whatever already sits there.
        // Known before it exists, so that a signal never leaves it behind.
        live_temporaries().push(temporary.clone());
        let mut file = match options.write(true).create_new(true).open(&temporary) {
            Ok(file) => file,
            Err(error) => {
                forget_temporary(&temporary);
                return Err(error.into());
            }
        };
        let staged = Staged {
            temporary,
            destination: path.to_owned(),
            committed: false,
        };
        write(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        Ok(staged)
    }

    /// Moves the file into place and makes the move durable.
    pub fn commit(mut self) -> anyhow::Result<()> {
        check_destination(&self.destination, "output")?;
        std::fs::rename(&self.temporary, &self.destination)?;
        self.committed = true;
        forget_temporary(&self.temporary);
        sync_directory(&self.destination)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temporary);
            forget_temporary(&self.temporary);
        }
    }
}

/// The temporary files this process has open and not yet committed, for
/// [`remove_temporaries`] to take away when a signal ends it.
fn live_temporaries() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static LIVE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    // A thread that panicked while holding the list left it whole.
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn forget_temporary(temporary: &Path) {
    live_temporaries().retain(|live| live != temporary);
}

/// Removes every temporary file this process is writing: what a command
/// stopped by a signal does before it exits, so that an interrupted write
/// leaves nothing behind. Outputs already in place stay.
pub fn remove_temporaries() {
    for temporary in live_temporaries().drain(..) {
        let _ = std::fs::remove_file(temporary);
    }
}

impl Staged {
    /// Moves the file into place only if nothing is there yet (a hard link
    /// to the final name, which fails on any file there, then the
    /// temporary name removed): two writers can never both think they
    /// wrote it.
    pub fn commit_new(mut self) -> anyhow::Result<()> {
        std::fs::hard_link(&self.temporary, &self.destination).map_err(|error| {
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow::anyhow!(
                    "{}: appeared while this command was writing it; left as it is",
                    self.destination.display()
                )
            } else {
                anyhow::Error::from(error)
            }
        })?;
        self.committed = true;
        let _ = std::fs::remove_file(&self.temporary);
        forget_temporary(&self.temporary);
        sync_directory(&self.destination)
    }
}

/// Commits every staged file, in order.
pub fn commit_all(staged: Vec<Staged>) -> anyhow::Result<()> {
    staged.into_iter().try_for_each(Staged::commit)
}

/// Writes `path` through `write`, atomically. On any error the destination is
/// left as it was and the temporary file is removed.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut File) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    Staged::new(path, write)?.commit()
}

/// Writes `bytes` to `path` atomically.
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomically(path, |file| Ok(file.write_all(bytes)?))
}

/// Takes the exclusive lock `name` in `directory` for `who` (`"routeval
/// run"`), or says that another holds it. The operating system releases it
/// when the process ends, however it ends, so a kill leaves no stale lock.
pub fn lock_directory(directory: &Path, name: &str, who: &str, flag: &str) -> anyhow::Result<File> {
    use anyhow::Context;
    let path = directory.join(name);
    check_destination(&path, flag)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("{}: cannot open the lock of the {who}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "{}: another {who} is writing to this directory (it holds {name}); wait for it to finish or give another {flag}",
            directory.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(error).with_context(|| format!("{}: cannot lock", path.display()))
        }
    }
}

/// Syncs the directory holding `path`, so that a rename into it is durable.
pub fn sync_directory(path: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()?;
    Ok(())
}

/// Removes the temporary files of `path` that processes no longer running
/// left (a kill, a crash): `.NAME.PID.tmp` beside it, only for this `NAME`
/// and only where no process `PID` is alive, so a file being written is
/// never touched.
fn sweep_stale_temporaries(path: &Path) {
    let (Some(directory), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let directory = if directory.as_os_str().is_empty() {
        Path::new(".")
    } else {
        directory
    };
    // Whether a process lives is known where /proc is; elsewhere nothing is swept.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let file_name = file_name.to_string_lossy();
        let Some(pid) = file_name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
        else {
            continue;
        };
        let dead = !pid.is_empty()
            && pid.bytes().all(|byte| byte.is_ascii_digit())
            && !Path::new("/proc").join(pid).exists();
        if dead && entry.file_type().is_ok_and(|kind| kind.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests;
