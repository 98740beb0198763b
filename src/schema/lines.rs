//! The one loop over the lines of a JSON-lines file: 64 KiB reads, 1-based
//! physical line numbers for messages, lines of only whitespace (Unicode's
//! included) skipped.

use std::io::BufRead;
use std::path::Path;

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
