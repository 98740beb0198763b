//! The three draws of `routeval sample` carried to their file: the outputs
//! checked before anything is read, an empty draw refused with nothing
//! written, the set written atomically, and the line that tells the user
//! what was drawn and what to do with it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::{AuditOptions, SAMPLE_OUTPUT, SampleOptions, draw_audits, draw_labels, sample};
use crate::atomic::{Named, Output, check_outputs, write_bytes_atomically};
use crate::schema::{
    AUDITS_OUTPUT_CSV, AUDITS_OUTPUT_LINES, ColumnNames, LABEL_SET_OUTPUT, audits_are_csv,
    audits_to_bytes, json_lines,
};
use crate::units::Share;

/// What `routeval sample` was asked to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleRequest {
    /// The next labelling set of prompts, for `routeval run`.
    Prompts(SampleOptions),
    /// The logged decisions to label, for `replay candidate --labels`.
    Labels {
        records: PathBuf,
        share: Share,
        seed: u64,
        audit: Option<Share>,
    },
    /// The graded rows a person audits, for `calibrate --audits`.
    Audits {
        results: PathBuf,
        names: ColumnNames,
        options: AuditOptions,
    },
}

/// Draws what `request` asks for into `out` and says what was written.
pub fn draw_into(request: &SampleRequest, out: &Path) -> anyhow::Result<String> {
    match request {
        SampleRequest::Prompts(options) => prompts(options, out),
        SampleRequest::Labels {
            records,
            share,
            seed,
            audit,
        } => labels(records, (*share, *audit), *seed, out),
        SampleRequest::Audits {
            results,
            names,
            options,
        } => audits(results, names.clone(), *options, out),
    }
}

fn prompts(options: &SampleOptions, out: &Path) -> anyhow::Result<String> {
    check_outputs(
        &[Output::new(out, "--out", &SAMPLE_OUTPUT)],
        &[Named::new(&options.records, "--records")],
    )?;
    let (prompts, summary) = sample(options)?;
    if prompts.is_empty() {
        bail!(
            "{}: no records with a prompt to sample{}; nothing written",
            options.records.display(),
            if options.since_ms.is_some() {
                " since --since"
            } else {
                ""
            }
        );
    }
    written(out, &json_lines(&prompts))?;
    let taken: Vec<String> = summary
        .slices
        .iter()
        .map(|(slice, (eligible, taken))| format!("{slice} {taken} of {eligible}"))
        .collect();
    Ok(format!(
        "sampled {} prompts ({}) from {} records: {} duplicates, {} without a prompt, {} before --since, {} secrets redacted; wrote {}",
        prompts.len(),
        taken.join(", "),
        summary.records,
        summary.duplicates,
        summary.without_prompt,
        summary.too_old,
        summary.redactions,
        out.display()
    ))
}

fn labels(
    records: &Path,
    (share, audit): (Share, Option<Share>),
    seed: u64,
    out: &Path,
) -> anyhow::Result<String> {
    check_outputs(
        &[Output::new(out, "--out", &LABEL_SET_OUTPUT)],
        &[Named::new(records, "--records")],
    )?;
    let (rows, counts) = draw_labels(records, share, seed, audit)?;
    if rows.is_empty() {
        bail!(
            "{}: no decision of serve was drawn ({} decisions at --label-share {share}); nothing written",
            records.display(),
            counts.values().map(|(decisions, _)| decisions).sum::<u64>()
        );
    }
    written(out, &json_lines(&rows))?;
    let drawn: Vec<String> = counts
        .iter()
        .map(|(slice, (decisions, drawn))| format!("{slice} {drawn} of {decisions}"))
        .collect();
    let audited = rows.iter().filter(|row| row.audit == Some(true)).count();
    let audit_line = match audit {
        Some(audit) => format!(
            "; {audited} of them drawn at {audit} for a person to audit: set audited_ok on each row with audit true"
        ),
        None => String::new(),
    };
    Ok(format!(
        "drew {} decisions to label ({}) at probability {share}, seed {seed}; wrote {}: set ok (true or false) on every row for the answer its route gave{audit_line}, then pass it to routeval replay candidate --labels",
        rows.len(),
        drawn.join(", "),
        out.display()
    ))
}

fn audits(
    results: &Path,
    names: ColumnNames,
    options: AuditOptions,
    out: &Path,
) -> anyhow::Result<String> {
    let csv = audits_are_csv(out);
    let kind = if csv {
        &AUDITS_OUTPUT_CSV
    } else {
        &AUDITS_OUTPUT_LINES
    };
    check_outputs(
        &[Output::new(out, "--out", kind)],
        &[Named::new(results, "--results")],
    )?;
    let (rows, slices) = draw_audits(results, names, options)?;
    written(out, &audits_to_bytes(&rows, csv))?;
    let drawn: Vec<String> = slices
        .iter()
        .map(|(slice, (rows, drawn))| format!("{slice} {drawn} of {rows}"))
        .collect();
    Ok(format!(
        "drew {} rows to audit ({}) in {} score strata, seed {}; wrote {}: fill in audited_ok_small and audited_ok_large on every row, then pass it to routeval calibrate --audits",
        rows.len(),
        drawn.join(", "),
        options.strata,
        options.seed,
        out.display()
    ))
}

fn written(out: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_bytes_atomically(out, bytes)
        .with_context(|| format!("{}: cannot write (--out)", out.display()))
}
