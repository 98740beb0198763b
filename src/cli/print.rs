//! Everything the CLI prints to stdout goes through here, so a failed write
//! (a full disk behind a redirect) is an error with a non-zero exit, not a
//! silent success. A closed pipe (`| head`) is the reader's choice, not an
//! error.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::atomic::write_bytes_atomically;

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

/// A command's document: written to `--out` when given, then printed as
/// JSON with `--json`, else as the text `render` draws. The one place a
/// command does either; `what` names the document in errors ("the
/// calibration").
pub fn emit<T: Serialize>(
    document: &T,
    what: &str,
    out: Option<&Path>,
    json: bool,
    render: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let encoded = encode(document, what)?;
    if let Some(out) = out {
        write_bytes_atomically(out, encoded.as_bytes())
            .with_context(|| format!("{}: cannot write {what} (--out)", out.display()))?;
    }
    print(&if json { encoded } else { render() })
}

/// A document as the pretty JSON every command prints and writes.
pub fn encode<T: Serialize>(document: &T, what: &str) -> anyhow::Result<String> {
    Ok(
        serde_json::to_string_pretty(document).with_context(|| format!("cannot encode {what}"))?
            + "\n",
    )
}
