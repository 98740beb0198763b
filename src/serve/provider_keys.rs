//! The upstream providers' keys from `serve --provider-keys`: a file of
//! `NAME=VALUE` lines (as systemd's `EnvironmentFile=` reads them) or a
//! directory with one file per variable (a Kubernetes Secret mounted as a
//! volume). Its variables stand for the routes' `api_key_env` instead of
//! the process environment (a variable dropped from it must not fall back
//! to a stale one there), and are read again at every reload, so a rotated
//! key is used without a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProviderKeysError {
    #[error("--provider-keys {path}: {problem}")]
    Unreadable { path: PathBuf, problem: String },
    #[error("--provider-keys {path}: line {line}: {problem}")]
    Line {
        path: PathBuf,
        line: usize,
        problem: String,
    },
}

/// The variables at `path`, by name.
pub fn read(path: &Path) -> Result<BTreeMap<String, String>, ProviderKeysError> {
    let unreadable = |problem: String| ProviderKeysError::Unreadable {
        path: path.to_owned(),
        problem,
    };
    let metadata = std::fs::metadata(path).map_err(|error| unreadable(error.to_string()))?;
    if metadata.is_dir() {
        read_directory(path)
    } else {
        let text = std::fs::read_to_string(path).map_err(|error| unreadable(error.to_string()))?;
        parse_lines(path, &text)
    }
}

/// The sha256 of what [`read`] reads (each variable's name and value), or
/// none when it cannot be read: the reload watch compares content, so a
/// rotation that keeps a file's length and time is seen all the same.
pub fn fingerprint(path: &Path) -> Option<String> {
    let variables = read(path).ok()?;
    let mut bytes = Vec::new();
    for (name, value) in &variables {
        for part in [name.as_bytes(), b"\0", value.as_bytes(), b"\0"] {
            bytes.extend_from_slice(part);
        }
    }
    Some(crate::digest::sha256_hex(&bytes))
}

/// `NAME=VALUE` lines; blank lines and `#` comments are skipped, and a value
/// in matching single or double quotes loses them.
fn parse_lines(path: &Path, text: &str) -> Result<BTreeMap<String, String>, ProviderKeysError> {
    let mut variables = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let problem = |problem: String| ProviderKeysError::Line {
            path: path.to_owned(),
            line: index.saturating_add(1),
            problem,
        };
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| problem("expected NAME=VALUE".to_owned()))?;
        let name = name.trim();
        if !valid_name(name) {
            return Err(problem(format!(
                "{name:?} is not a variable name (letters, digits and _, not starting with a digit)"
            )));
        }
        let value = unquoted(value.trim());
        if variables
            .insert(name.to_owned(), value.to_owned())
            .is_some()
        {
            return Err(problem(format!("{name} is set twice")));
        }
    }
    Ok(variables)
}

/// One variable a file: its name the file's, its value the content without
/// the line end. Names starting with `.` are the volume's own bookkeeping
/// (a Secret volume's `..data`) and are skipped.
fn read_directory(path: &Path) -> Result<BTreeMap<String, String>, ProviderKeysError> {
    let unreadable = |problem: String| ProviderKeysError::Unreadable {
        path: path.to_owned(),
        problem,
    };
    let mut variables = BTreeMap::new();
    let entries = std::fs::read_dir(path).map_err(|error| unreadable(error.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|error| unreadable(error.to_string()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.path().is_file() {
            continue;
        }
        if !valid_name(&name) {
            return Err(unreadable(format!(
                "{name:?} is not a variable name (letters, digits and _, not starting with a digit)"
            )));
        }
        let value = std::fs::read_to_string(entry.path())
            .map_err(|error| unreadable(format!("{name}: {error}")))?;
        variables.insert(name, value.trim_end_matches(['\n', '\r']).to_owned());
    }
    Ok(variables)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn unquoted(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_lines_and_a_directory_of_files_read_alike() {
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("keys.env");
        std::fs::write(
            &file,
            "# rotated weekly\nOPENAI_API_KEY=sk-one\n\nANTHROPIC_API_KEY=\"sk two\"\n",
        )
        .unwrap();
        let mounted = directory.path().join("secret");
        std::fs::create_dir(&mounted).unwrap();
        std::fs::create_dir(mounted.join("..data")).unwrap();
        std::fs::write(mounted.join("OPENAI_API_KEY"), "sk-one\n").unwrap();
        std::fs::write(mounted.join("ANTHROPIC_API_KEY"), "sk two").unwrap();
        let expected = BTreeMap::from([
            ("ANTHROPIC_API_KEY".to_owned(), "sk two".to_owned()),
            ("OPENAI_API_KEY".to_owned(), "sk-one".to_owned()),
        ]);
        assert_eq!(read(&file).unwrap(), expected);
        assert_eq!(read(&mounted).unwrap(), expected);
        assert_eq!(fingerprint(&file), fingerprint(&mounted));
    }

    #[test]
    fn a_same_length_rotation_changes_the_fingerprint() {
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("keys.env");
        std::fs::write(&file, "OPENAI_API_KEY=sk-aaaa\n").unwrap();
        let before = fingerprint(&file).unwrap();
        std::fs::write(&file, "OPENAI_API_KEY=sk-bbbb\n").unwrap();
        assert_ne!(fingerprint(&file).unwrap(), before);
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("keys.env");
        for (text, expected) in [
            (
                "OPENAI_API_KEY=a\nnot a line\n",
                "line 2: expected NAME=VALUE",
            ),
            ("1KEY=a\n", "line 1: \"1KEY\" is not a variable name"),
            ("A=1\nA=2\n", "line 2: A is set twice"),
        ] {
            std::fs::write(&file, text).unwrap();
            let error = read(&file).unwrap_err().to_string();
            assert!(error.starts_with("--provider-keys "), "{error}");
            assert!(error.contains(expected), "{error}");
        }
        let missing = read(&directory.path().join("absent"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("absent"), "{missing}");
    }
}
