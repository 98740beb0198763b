//! The sha256 digests documents record of their inputs and of each other:
//! lowercase hex of some bytes, or of a file read in blocks of a MiB, so a
//! file of any size costs one buffer.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A file that could not be read to its end, named.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot read: {source}", path.display())]
pub struct UnreadableFile {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// `text` if it is a sha256 as documents write one (64 hexadecimal
/// digits): a flag's value parser.
pub fn parse_sha256(text: &str) -> Result<String, String> {
    if text.len() == 64 && text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        Ok(text.to_owned())
    } else {
        Err(format!("{text:?}: a sha256 is 64 hexadecimal digits"))
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

pub fn sha256_file(path: &Path) -> Result<String, UnreadableFile> {
    let unreadable = |source| UnreadableFile {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(unreadable)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer).map_err(unreadable)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// [`sha256_file`] of a file, [`sha256_directory`] of a directory.
pub fn sha256_path(path: &Path) -> Result<String, UnreadableFile> {
    if path.is_dir() {
        sha256_directory(path)
    } else {
        sha256_file(path)
    }
}

/// The digest of a directory of files (serve's record parts): the sha256
/// of one `NAME SHA256` line per regular file, by name, hidden files (a
/// lock) left out.
pub fn sha256_directory(path: &Path) -> Result<String, UnreadableFile> {
    let unreadable = |source| UnreadableFile {
        path: path.to_owned(),
        source,
    };
    let mut files: Vec<(String, std::path::PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(path).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.file_type().map_err(unreadable)?.is_file() {
            files.push((name, entry.path()));
        }
    }
    files.sort();
    let mut listing = String::new();
    for (name, file) in files {
        listing.push_str(&format!("{name} {}\n", sha256_file(&file)?));
    }
    Ok(sha256_hex(listing.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_and_its_bytes_have_one_digest() {
        // sha256("abc"), FIPS 180-2's example.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("abc");
        std::fs::write(&path, "abc").unwrap();
        assert_eq!(sha256_file(&path).unwrap(), abc);
        let missing = directory.path().join("missing");
        let error = sha256_file(&missing).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("{}: cannot read: ", missing.display())),
            "{error}"
        );
    }
}
