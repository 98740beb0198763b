//! The one loop over the lines of a JSON-lines file (64 KiB reads, 1-based
//! physical line numbers for messages, lines of only whitespace, Unicode's
//! included, skipped), the one over the records of a CSV file, and the one
//! way rows become JSON lines.

use std::io::BufRead;
use std::path::Path;

/// `rows` as JSON lines: one compact object a line, each ending in `\n`.
pub fn json_lines<T: serde::Serialize>(rows: &[T]) -> Vec<u8> {
    let mut text = Vec::new();
    for row in rows {
        serde_json::to_writer(&mut text, row).expect("a row serialises to JSON");
        text.push(b'\n');
    }
    text
}

/// Streams each non-blank line of `path` (without its newline) to `visit`
/// with its 1-based line number; `io_error` turns a failure to open or read
/// the file into the caller's error.
pub fn for_each_line<E>(
    path: &Path,
    io_error: impl Fn(std::io::Error) -> E,
    mut visit: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let file = std::fs::File::open(path).map_err(&io_error)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(&io_error)? == 0 {
            return Ok(());
        }
        number += 1;
        let blank = line.iter().all(u8::is_ascii_whitespace)
            || std::str::from_utf8(&line).is_ok_and(|text| text.trim().is_empty());
        if blank {
            continue;
        }
        visit(number, &line)?;
    }
}

/// Streams the records of the CSV file at `path` to `visit` with the
/// header row and each record's 1-based physical line; `unreadable` names a
/// file that cannot be opened or has no header, `malformed` a bad record.
pub fn for_each_csv_record<E>(
    path: &Path,
    unreadable: impl Fn(String) -> E,
    malformed: impl Fn(super::RowLocation, String) -> E,
    mut visit: impl FnMut(&csv::StringRecord, super::RowLocation, &csv::StringRecord) -> Result<(), E>,
) -> Result<(), E> {
    let mut reader = csv::Reader::from_path(path).map_err(|error| unreadable(error.to_string()))?;
    let headers = reader
        .headers()
        .map_err(|error| unreadable(error.to_string()))?
        .clone();
    let line = |position: Option<&csv::Position>| {
        super::RowLocation::Line(position.map_or(0, csv::Position::line))
    };
    for record in reader.records() {
        let record =
            record.map_err(|error| malformed(line(error.position()), error.to_string()))?;
        visit(&headers, line(record.position()), &record)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_are_skipped_and_numbers_are_physical() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("x.jsonl");
        std::fs::write(&path, "a\n\n  \nb\n\u{a0}\nc").unwrap();
        let mut seen = Vec::new();
        for_each_line(
            &path,
            |error| error.to_string(),
            |number, line| {
                seen.push((number, String::from_utf8(line.to_vec()).unwrap()));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(
            seen,
            [
                (1, "a\n".to_owned()),
                (4, "b\n".to_owned()),
                (6, "c".to_owned())
            ]
        );
    }
}
