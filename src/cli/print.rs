//! Everything the CLI prints to stdout goes through here, so a failed write
//! (a full disk behind a redirect) is an error with a non-zero exit, not a
//! silent success. A closed pipe (`| head`) is the reader's choice, not an
//! error.

use std::io::Write;

use anyhow::Context;

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(error).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}

/// [`print`] with a newline.
pub fn println(text: &str) -> anyhow::Result<()> {
    print(&format!("{text}\n"))
}
