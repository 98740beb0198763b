//! The one way routeval writes a file. Output files appear whole or not at
//! all: each is written to a new temporary file beside its destination,
//! synced, renamed over it, and the directory synced so the rename survives a
//! crash. A destination that is anything but absent or a regular file (a
//! symbolic link, a FIFO, a device, a directory) is refused, and so is one
//! that is also an input of the same command: routeval never replaces what
//! it did not create.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why an output path was refused.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "{}: is {what}, not a regular file; routeval writes only regular files ({flag})",
        path.display()
    )]
    NotRegular {
        path: PathBuf,
        what: &'static str,
        flag: String,
    },
    #[error(
        "{}: is also an input ({input_flag}); write the output to another path ({flag})",
        path.display()
    )]
    SameAsInput {
        path: PathBuf,
        flag: String,
        input_flag: String,
    },
    #[error("{}: named as two outputs ({first} and {second})", path.display())]
    Twice {
        path: PathBuf,
        first: String,
        second: String,
    },
    #[error("{}: cannot inspect: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A path a command reads or writes, with the flag that named it.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub path: &'a Path,
    pub flag: &'a str,
}

impl<'a> Named<'a> {
    pub fn new(path: &'a Path, flag: &'a str) -> Named<'a> {
        Named { path, flag }
    }
}

/// What kind of thing sits at `path`, without following a final symbolic
/// link; `None` when nothing does.
fn kind_at(path: &Path) -> Result<Option<(&'static str, std::fs::Metadata)>, OutputError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(OutputError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        "a regular file"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Ok(Some((what, metadata)))
}

/// Refuses a destination that exists and is not a regular file.
pub fn check_destination(path: &Path, flag: &str) -> Result<(), OutputError> {
    match kind_at(path)? {
        Some((what, metadata)) if !metadata.file_type().is_file() => Err(OutputError::NotRegular {
            path: path.to_owned(),
            what,
            flag: flag.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Checks every output of a command before it writes any: each must be
/// absent or a regular file, none may be the same file as an input (by
/// device and inode, so another spelling of the path is caught too), and no
/// two outputs may be one file.
pub fn check_outputs(outputs: &[Named<'_>], inputs: &[Named<'_>]) -> Result<(), OutputError> {
    let identity = |path: &Path| -> Option<(u64, u64)> {
        std::fs::metadata(path)
            .ok()
            .map(|metadata| (metadata.dev(), metadata.ino()))
    };
    let inputs: Vec<(Option<(u64, u64)>, &Named<'_>)> = inputs
        .iter()
        .map(|input| (identity(input.path), input))
        .collect();
    for (index, output) in outputs.iter().enumerate() {
        check_destination(output.path, output.flag)?;
        // `b.toml` and `./b.toml`, or a path through a link, are one file
        // even before it exists.
        let resolved_output = resolved(output.path);
        let same_path = |other: &Path| {
            other == output.path
                || resolved_output.as_ref().is_some_and(|resolved_output| {
                    resolved(other).as_ref() == Some(resolved_output)
                })
        };
        if let Some(earlier) = outputs[..index]
            .iter()
            .find(|earlier| same_path(earlier.path))
        {
            return Err(OutputError::Twice {
                path: output.path.to_owned(),
                first: earlier.flag.to_owned(),
                second: output.flag.to_owned(),
            });
        }
        let here = identity(output.path);
        for (identity, input) in &inputs {
            let same = same_path(input.path) || (here.is_some() && here == *identity);
            if same {
                return Err(OutputError::SameAsInput {
                    path: output.path.to_owned(),
                    flag: output.flag.to_owned(),
                    input_flag: input.flag.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// `path` with its directory resolved (absolute, links followed) and its
/// own name kept, so two spellings of one destination compare equal whether
/// or not the file exists yet; `None` where the directory does not exist.
fn resolved(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

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
        let mut file = options.write(true).create_new(true).open(&temporary)?;
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
        sync_directory(&self.destination)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temporary);
        }
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
pub fn lock_directory(directory: &Path, name: &str, who: &str) -> anyhow::Result<File> {
    use anyhow::Context;
    let path = directory.join(name);
    check_destination(&path, "--out")?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("{}: cannot open the lock of the {who}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "{}: another {who} is writing to this directory (it holds {name}); wait for it to finish or give another --out",
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
mod tests {
    use super::*;

    #[test]
    fn failed_write_leaves_no_file_behind() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("out.json");
        let result = write_atomically(&path, |file| {
            file.write_all(b"half")?;
            anyhow::bail!("interrupted")
        });
        assert!(result.is_err());
        assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 0);
    }

    #[test]
    fn replaces_the_destination_whole() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("out.json");
        std::fs::write(&path, "old").unwrap();
        write_bytes_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 1);
    }

    #[test]
    fn symbolic_links_and_directories_are_refused() {
        let directory = tempfile::tempdir().unwrap();
        let target = directory.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = directory.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = write_bytes_atomically(&link, b"new").unwrap_err();
        assert!(error.to_string().contains("a symbolic link"), "{error}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        let error = write_bytes_atomically(directory.path(), b"new").unwrap_err();
        assert!(error.to_string().contains("a directory"), "{error}");
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_under_any_spelling() {
        let directory = tempfile::tempdir().unwrap();
        let input = directory.path().join("results.csv");
        std::fs::write(&input, "id\n").unwrap();
        let spelled_otherwise = directory.path().join(".").join("results.csv");
        let error = check_outputs(
            &[Named::new(&spelled_otherwise, "--out")],
            &[Named::new(&input, "--results")],
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}: is also an input (--results); write the output to another path (--out)",
                spelled_otherwise.display()
            )
        );
        let fresh = directory.path().join("new.json");
        check_outputs(
            &[Named::new(&fresh, "--out")],
            &[Named::new(&input, "--results")],
        )
        .unwrap();
        let error = check_outputs(
            &[
                Named::new(&fresh, "--out"),
                Named::new(&fresh, "--scored-out"),
            ],
            &[],
        )
        .unwrap_err();
        assert!(error.to_string().contains("two outputs"), "{error}");
    }
}
