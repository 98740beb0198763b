//! Everything the CLI prints to stdout goes through here, so a failed write
//! (a full disk behind a redirect) is an error with a non-zero exit, not a
//! silent success. A closed pipe (`| head`) is the reader's choice, not an
//! error.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::atomic::{Output, OutputKind, write_bytes_atomically};

/// `--json` and `--out`: how a command that makes one versioned document
/// gives it.
#[derive(Debug, Args)]
pub struct DocumentOutput {
    /// Print the document as JSON.
    #[arg(long)]
    pub json: bool,

    /// Also write the document here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

impl DocumentOutput {
    /// `--out`, if given, as a file of `kind`, for checking before any work.
    pub fn outputs(&self, kind: &'static OutputKind) -> Vec<Output<'_>> {
        self.out
            .iter()
            .map(|out| Output::new(out, "--out", kind))
            .collect()
    }

    /// [`emit`] as the flags ask.
    pub fn emit<T: Serialize>(
        &self,
        document: &T,
        what: &str,
        render: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        emit(document, what, self.out.as_deref(), self.json, render)
    }
}

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
