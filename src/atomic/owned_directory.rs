//! A directory a command writes all its outputs into and marks as its own,
//! so that the next run of the command can start afresh there: it clears
//! what it wrote, by name, and nothing else; a directory it did not make is
//! refused unless empty, and so is one that holds the command's inputs or
//! the current directory.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{Named, write_bytes_atomically};

/// Who owns the directory and what it writes there.
#[derive(Debug, Clone, Copy)]
pub struct OwnedDirectory<'a> {
    /// The owner as the messages name it: "the demo".
    pub owner: &'a str,
    /// The flag that names the directory.
    pub flag: &'a str,
    /// The file that marks the directory as the owner's.
    pub marker: &'a str,
    /// What the marker says to someone who finds it.
    pub marker_text: &'a str,
    /// Every file and folder the owner writes at the top of the directory:
    /// all a later run clears.
    pub outputs: &'a [&'a str],
}

impl OwnedDirectory<'_> {
    /// Makes `path` a directory of the owner's with none of its outputs,
    /// or says why it cannot be.
    pub fn claim(&self, path: &Path, inputs: &[Named<'_>]) -> anyhow::Result<()> {
        let flag = self.flag;
        let refuse = |why: String| -> anyhow::Result<()> {
            anyhow::bail!("{}: {why} ({flag})", path.display())
        };
        let metadata = match std::fs::symlink_metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(path)
                    .with_context(|| format!("{}: cannot create ({flag})", path.display()))?;
                return self.mark(path);
            }
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("{}: cannot inspect ({flag})", path.display()));
            }
        };
        if !metadata.is_dir() {
            return refuse("exists and is not a directory".to_owned());
        }
        let canonical = std::fs::canonicalize(path)
            .with_context(|| format!("{}: cannot resolve ({flag})", path.display()))?;
        let owner = self.owner;
        let current = std::env::current_dir().context("cannot read the current directory")?;
        if current.starts_with(&canonical) {
            return refuse(format!(
                "holds the current directory; give {owner} a directory of its own"
            ));
        }
        for input in inputs {
            if let Ok(resolved) = std::fs::canonicalize(input.path)
                && resolved.starts_with(&canonical)
            {
                return refuse(format!(
                    "holds {owner}'s input {} ({}); give {owner} a directory of its own",
                    resolved.display(),
                    input.flag
                ));
            }
        }
        let mut entries = std::fs::read_dir(path)
            .with_context(|| format!("{}: cannot list ({flag})", path.display()))?
            .peekable();
        if entries.peek().is_none() {
            return self.mark(path);
        }
        if !std::fs::symlink_metadata(path.join(self.marker)).is_ok_and(|marker| marker.is_file()) {
            // The message names the flag already.
            anyhow::bail!(
                "{}: is not empty and was not made by {owner} (no {}); {owner} clears only its own directory: give a new or empty {flag}",
                path.display(),
                self.marker
            );
        }
        for name in self.outputs {
            clear(&path.join(name))
                .with_context(|| format!("{}: cannot clear ({flag})", path.join(name).display()))?;
        }
        self.mark(path)
    }

    fn mark(&self, path: &Path) -> anyhow::Result<()> {
        let marker: PathBuf = path.join(self.marker);
        write_bytes_atomically(&marker, self.marker_text.as_bytes())
            .with_context(|| format!("{}: cannot write ({})", marker.display(), self.flag))
    }
}

/// Removes the file or folder at `path`, if there is one.
fn clear(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}
