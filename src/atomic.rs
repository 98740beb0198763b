//! Output files appear whole or not at all: each is written to a temporary
//! file beside its destination, synced, and renamed over it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `path` through `write`, atomically. On any error the destination is
/// left as it was and the temporary file is removed.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut File) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let temporary = temporary_path(path);
    let result = (|| {
        let mut file = File::create(&temporary)?;
        write(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Writes `bytes` to `path` atomically.
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomically(path, |file| Ok(file.write_all(bytes)?))
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
}
