//! Why an input file could not be read: a graded-results table
//! ([`ReadError`]), or a file of rows of another kind (a dataset, request
//! records, a trace: [`InputError`]). Every message names the file, and
//! where it can, the column or field and the row or line.

use std::path::PathBuf;

use super::graded::RowLocation;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{}: not a readable Parquet file: {source}", path.display())]
    Parquet {
        path: PathBuf,
        source: parquet::errors::ParquetError,
    },

    #[error(
        "{}: unknown file format; name it .parquet, .csv or .jsonl",
        path.display()
    )]
    UnknownFormat { path: PathBuf },

    #[error(
        "{}: graded-results schema version {found} is newer than the {supported} this routeval reads; upgrade routeval",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: String,
        supported: u32,
    },

    #[error("{}: missing column \"{column}\"{hint}", path.display())]
    MissingColumn {
        path: PathBuf,
        column: String,
        hint: String,
    },

    #[error(
        "{}: column \"{column}\" collides with the column renamed by {flag}; rename it in the file",
        path.display()
    )]
    CollidingColumn {
        path: PathBuf,
        column: String,
        flag: &'static str,
    },

    #[error("{}: column \"{column}\" appears more than once", path.display())]
    RepeatedColumn { path: PathBuf, column: String },

    #[error(
        "{}: column \"{column}\" has type {found}, expected {expected}",
        path.display()
    )]
    WrongType {
        path: PathBuf,
        column: String,
        found: String,
        expected: &'static str,
    },

    #[error("{}: {location}, column \"{column}\": {problem}", path.display())]
    InvalidValue {
        path: PathBuf,
        location: RowLocation,
        column: String,
        problem: String,
    },

    #[error("{}: {location}: {problem}", path.display())]
    Malformed {
        path: PathBuf,
        location: RowLocation,
        problem: String,
    },

    #[error(
        "{}: {location}, column \"{column}\": duplicate id {id:?}, first seen at {first}",
        path.display()
    )]
    DuplicateId {
        path: PathBuf,
        location: RowLocation,
        first: RowLocation,
        column: String,
        id: String,
    },

    #[error("{}: the file has no rows", path.display())]
    Empty { path: PathBuf },
}

/// Why a dataset, a file of request records or a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: cannot read: {message}", path.display())]
    Unreadable { path: PathBuf, message: String },
    #[error("{}: {location}, field \"{field}\": {problem}", path.display())]
    Invalid {
        path: PathBuf,
        location: RowLocation,
        field: String,
        problem: String,
    },
    #[error("{}: {location}: {problem}", path.display())]
    Malformed {
        path: PathBuf,
        location: RowLocation,
        problem: String,
    },
    /// `nothing` says what is missing: "the trace has no requests".
    #[error("{}: {nothing}", path.display())]
    Empty {
        path: PathBuf,
        nothing: &'static str,
    },
    /// A flag's value that does not fit the file, `--map` of the records.
    #[error("{}: {flag} {problem}", path.display())]
    Flag {
        path: PathBuf,
        flag: &'static str,
        problem: String,
    },
    /// The file could not be opened as a table at all; the message names it.
    #[error(transparent)]
    Table(#[from] ReadError),
}

impl InputError {
    /// Refuses `path` when nothing readable is there, before a command reads
    /// its other inputs: the file the user named is the one the error names.
    pub fn check_present(path: &std::path::Path) -> Result<(), InputError> {
        std::fs::metadata(path)
            .map(|_| ())
            .map_err(|error| InputError::Unreadable {
                path: path.to_owned(),
                message: error.to_string(),
            })
    }
}
