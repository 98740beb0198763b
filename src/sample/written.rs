//! The three draws of `routeval sample` carried to their file: the outputs
//! checked before anything is read, an empty draw refused with nothing
//! written, the set written atomically, and the line that tells the user
//! what was drawn and what to do with it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::{AuditOptions, SAMPLE_OUTPUT, SampleOptions, draw_audits, draw_labels, sample};
use crate::atomic::{Named, Output, check_outputs, write_bytes_atomically};
use crate::routes::RouteConfig;
use crate::schema::{
    AUDITS_OUTPUT_CSV, AUDITS_OUTPUT_LINES, ColumnNames, DocumentFile, LABEL_SET_OUTPUT,
    audits_are_csv, audits_to_bytes, json_lines, read_document,
};
use crate::units::Share;

/// What `routeval sample` was asked to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleRequest {
    /// The next labelling set of prompts, for `routeval run`.
    Prompts(SampleOptions),
    /// The logged decisions to label, for `replay candidate --labels`:
    /// at the share and seed given, or those `config` committed (which
    /// any given must equal).
    Labels {
        records: PathBuf,
        share: Option<Share>,
        seed: Option<u64>,
        config: Option<PathBuf>,
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
            config,
            audit,
        } => {
            let draw = label_draw(*share, *seed, config.as_deref())?;
            labels(records, draw, *audit, out)
        }
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

/// A label draw: its share and seed, and the config whose decisions alone
/// it draws (its sha256) where a config committed it.
struct LabelDraw {
    share: Share,
    seed: u64,
    config: Option<(PathBuf, String)>,
}

/// The draw asked for: the share and seed given, or those `config`
/// committed, which any given must equal.
fn label_draw(
    share: Option<Share>,
    seed: Option<u64>,
    config: Option<&Path>,
) -> anyhow::Result<LabelDraw> {
    let Some(config) = config else {
        let share = share.context(
            "--label-share is needed, or --config of a config that commits its label draw",
        )?;
        return Ok(LabelDraw {
            share,
            seed: seed.unwrap_or(0),
            config: None,
        });
    };
    let DocumentFile {
        document: signed,
        sha256,
    } = read_document::<RouteConfig>(config, "a route config", Some("--config"))?;
    let Some(committed) = signed
        .serving
        .as_ref()
        .and_then(|serving| serving.explore.as_ref())
        .and_then(|explore| explore.labels)
    else {
        bail!(
            "{}: commits no label draw ([serving.explore.labels]); give --label-share and --seed instead (--config)",
            config.display()
        );
    };
    if let Some(share) = share
        && (share.get() - committed.share).abs() > 1e-12
    {
        bail!(
            "--label-share {share}: {} commits its label draw at share {} ([serving.explore.labels])",
            config.display(),
            committed.share
        );
    }
    if let Some(seed) = seed
        && seed != committed.seed
    {
        bail!(
            "--seed {seed}: {} commits its label draw with another seed ([serving.explore.labels])",
            config.display()
        );
    }
    Ok(LabelDraw {
        share: Share::new(committed.share).map_err(|error| {
            anyhow::anyhow!("{}: [serving.explore.labels] {error}", config.display())
        })?,
        seed: committed.seed,
        config: Some((config.to_owned(), sha256)),
    })
}

fn labels(
    records: &Path,
    LabelDraw {
        share,
        seed,
        config,
    }: LabelDraw,
    audit: Option<Share>,
    out: &Path,
) -> anyhow::Result<String> {
    let mut inputs = vec![Named::new(records, "--records")];
    if let Some((path, _)) = &config {
        inputs.push(Named::new(path, "--config"));
    }
    check_outputs(&[Output::new(out, "--out", &LABEL_SET_OUTPUT)], &inputs)?;
    let only = config.as_ref().map(|(_, sha256)| sha256.as_str());
    let (rows, counts) = draw_labels(records, (share, seed), audit, only)?;
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
