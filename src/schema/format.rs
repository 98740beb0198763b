//! Which reader a graded-results file needs.

use std::io::Read;
use std::path::Path;

use super::error::ReadError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Parquet,
    Csv,
    JsonLines,
}

impl Format {
    /// The format named by the file's extension; files without a known
    /// extension are recognised as Parquet by their magic bytes.
    pub fn detect(path: &Path) -> Result<Format, ReadError> {
        let extension = path
            .extension()
            .and_then(|extension| extension.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("parquet" | "pq") => return Ok(Format::Parquet),
            Some("csv") => return Ok(Format::Csv),
            Some("jsonl" | "ndjson" | "json") => return Ok(Format::JsonLines),
            _ => {}
        }
        let mut magic = [0u8; 4];
        let read_magic = std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut magic));
        match read_magic {
            Ok(()) if &magic == b"PAR1" => Ok(Format::Parquet),
            Ok(()) => Err(ReadError::UnknownFormat {
                path: path.to_owned(),
            }),
            Err(source) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(ReadError::UnknownFormat {
                    path: path.to_owned(),
                })
            }
            Err(source) => Err(ReadError::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }
}
