//! A JSON document read from its file, the one way every stage reads what
//! another wrote (a route config, a gate report, a replay): a file that
//! cannot be read or is not the document asked for is one error naming the
//! file, what it should have been and the flag that named it.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::digest::sha256_hex;

/// A document and the sha256 of its file, which documents about it cite.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentFile<T> {
    pub document: T,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("{}: cannot read{}", path.display(), flag_note(flag))]
    Unreadable {
        path: PathBuf,
        flag: Option<&'static str>,
        source: std::io::Error,
    },
    #[error("{}: not {what}{}", path.display(), flag_note(flag))]
    NotTheDocument {
        path: PathBuf,
        what: &'static str,
        flag: Option<&'static str>,
        source: serde_json::Error,
    },
}

fn flag_note(flag: &Option<&'static str>) -> String {
    flag.map(|flag| format!(" ({flag})")).unwrap_or_default()
}

/// The document of type `T` (`what`: "a route config") at `path`, which
/// `flag` named if a flag did.
pub fn read_document<T: DeserializeOwned>(
    path: &Path,
    what: &'static str,
    flag: Option<&'static str>,
) -> Result<DocumentFile<T>, DocumentError> {
    let bytes = std::fs::read(path).map_err(|source| DocumentError::Unreadable {
        path: path.to_owned(),
        flag,
        source,
    })?;
    let document =
        serde_json::from_slice(&bytes).map_err(|source| DocumentError::NotTheDocument {
            path: path.to_owned(),
            what,
            flag,
            source,
        })?;
    Ok(DocumentFile {
        document,
        sha256: sha256_hex(&bytes),
    })
}

/// [`read_document`] of a state carried between runs (`--state`): `None`
/// where there is no file yet, which starts a new one.
pub fn read_state_document<T: DeserializeOwned>(
    path: &Path,
    what: &'static str,
    flag: &'static str,
) -> Result<Option<T>, DocumentError> {
    match read_document(path, what, Some(flag)) {
        Ok(file) => Ok(Some(file.document)),
        Err(DocumentError::Unreadable { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_foreign_file_is_named_with_what_it_should_be_and_its_flag() {
        let directory = tempfile::tempdir().unwrap();
        let missing = directory.path().join("missing.json");
        let error = read_document::<serde_json::Value>(&missing, "a gate report", Some("--gate"))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{}: cannot read (--gate)", missing.display())
        );
        let foreign = directory.path().join("foreign.json");
        std::fs::write(&foreign, "not json").unwrap();
        let error =
            read_document::<serde_json::Value>(&foreign, "a route config", None).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{}: not a route config", foreign.display())
        );
        std::fs::write(&foreign, "{\"a\": 1}").unwrap();
        let read = read_document::<serde_json::Value>(&foreign, "a route config", None).unwrap();
        assert_eq!(read.document["a"], 1);
        assert_eq!(read.sha256, sha256_hex(b"{\"a\": 1}"));
    }
}
