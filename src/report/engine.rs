//! `routeval report` as a whole: every input document and table the options
//! name, read and checked against one another, and the HTML page and the
//! Markdown summary written together.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::de::DeserializeOwned;

use super::html::render;
use super::kit::{Drawn, ReportInputs, insert_before_body_end};
use super::markdown::summary;
use super::{
    Change, ChangeRows, REPORT_HTML_OUTPUT, REPORT_SUMMARY_OUTPUT, RecordsDocuments,
    SUMMARY_MARKER, change, decide, proposed_from_calibration, records_page, records_section,
    records_summary, replay_page, replay_summary, slice_curves,
};
use crate::atomic::{Named, Output, Staged, check_outputs, commit_all};
use crate::digest::sha256_hex;
use crate::markdown::{code, text};
use crate::policy::{TieredRows, scores_of, tiered_rows};
use crate::routes::{ResolvedTable, RouteConfig};
use crate::schema::{
    CalibrationDocument, Column, ColumnNames, GateReport, GradedTable, Policy, ReadOptions,
    ReplayDocument, read_graded,
};
use crate::schema::{DocumentError, read_document};
use crate::units::{Confidence, Margin};

/// A report request.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Graded results; without them, a page of the replay or the records
    /// documents alone.
    pub results: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    pub records: Vec<PathBuf>,
    pub calibration: Vec<PathBuf>,
    pub gate: Option<PathBuf>,
    /// The deployed route config the proposal is compared with.
    pub baseline: Option<PathBuf>,
    pub max_regression: Margin,
    pub confidence: Confidence,
    pub drift: Option<PathBuf>,
    /// The directory of `report.html` and `summary.md`.
    pub out: PathBuf,
    pub title: String,
    pub score_col: Option<String>,
    pub predictive_score_col: Option<String>,
    pub cascade_score_col: Option<String>,
    pub slice_col: String,
}

/// The two pages a report wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub html: PathBuf,
    pub markdown: PathBuf,
}

fn load<T: DeserializeOwned>(
    path: &Path,
    flag: &'static str,
    what: &'static str,
) -> Result<T, DocumentError> {
    Ok(read_document(path, what, Some(flag))?.document)
}

/// Reads every input the options name, checks them against one another, and
/// writes the HTML page and the Markdown summary together.
pub fn report(options: &ReportOptions) -> anyhow::Result<Written> {
    let html_path = options.out.join("report.html");
    let markdown_path = options.out.join("summary.md");
    check_outputs(
        &[
            Output::new(&html_path, "--out", &REPORT_HTML_OUTPUT),
            Output::new(&markdown_path, "--out", &REPORT_SUMMARY_OUTPUT),
        ],
        &inputs(options),
    )?;
    let replay: Option<ReplayDocument> = options
        .replay
        .as_deref()
        .map(|path| load(path, "--replay", "a replay document"))
        .transpose()?;
    let records = records_documents(&options.records)?;
    let Some(results) = &options.results else {
        return without_results(options, replay.as_ref(), &records, html_path, markdown_path);
    };
    let (calibrations, tiered) = calibrations(&options.calibration)?;
    // Each policy's curve is drawn on its own score: the flag naming it, or
    // the column of that policy's calibration.
    let column_of = |flag: &Option<String>, policy: Policy| {
        flag.clone()
            .or_else(|| {
                calibrations
                    .iter()
                    .find(|calibration| calibration.policy == policy)
                    .map(|calibration| calibration.score_column.clone())
            })
            .or_else(|| options.score_col.clone())
            .unwrap_or_else(|| Column::Score.name().to_owned())
    };
    let predictive_column = column_of(&options.predictive_score_col, Policy::Predictive);
    let cascade_column = column_of(&options.cascade_score_col, Policy::Cascade);
    let read = |score: &str| ReadOptions::of(ColumnNames::new(score, options.slice_col.clone()));
    let table = read_graded(results, &read(&predictive_column))?;
    let predictive_scores = scores_of(&table);
    let cascade_scores = if cascade_column == predictive_column {
        predictive_scores.clone()
    } else {
        scores_of(&read_graded(results, &read(&cascade_column))?)
    };
    let sha256 = sha256_hex(
        &std::fs::read(results).with_context(|| format!("{}: cannot read", results.display()))?,
    );
    let gate = options
        .gate
        .as_deref()
        .map(|path| load(path, "--gate", "a gate report"))
        .transpose()?;
    let drift = options
        .drift
        .as_deref()
        .map(|path| load(path, "--drift", "a drift document"))
        .transpose()?;
    let change = match &options.baseline {
        Some(path) => {
            let every: Vec<CalibrationDocument> =
                calibrations.iter().chain(&tiered).cloned().collect();
            Some(the_change(path, results, gate.as_ref(), &every, options)?)
        }
        None => None,
    };
    let curves = slice_curves(&table, &predictive_scores, &cascade_scores);
    let signed = signed_config(gate.as_ref());
    let results_path = results.display().to_string();
    let inputs = ReportInputs {
        title: &options.title,
        results_path: &results_path,
        results_sha256: &sha256,
        rows: table.num_rows() as u64,
        curves: &curves,
        score_columns: [&predictive_column, &cascade_column],
        calibrations: &calibrations,
        gate: gate.as_ref(),
        drift: drift.as_ref(),
        change: change.as_ref(),
        replay: replay.as_ref(),
        records: (!records.is_empty()).then_some(&records),
        tiered: &tiered,
        signed: signed.as_ref(),
        confidence: options.confidence.get(),
        drawn: drawn(options, &calibrations),
    };
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("{}: cannot create (--out)", options.out.display()))?;
    let decision = decide(&inputs);
    write_pages(
        &html_path,
        &render(&inputs, &decision),
        &markdown_path,
        &summary(&inputs, &decision, &html_path.display().to_string()),
    )?;
    Ok(Written {
        html: html_path,
        markdown: markdown_path,
    })
}

/// The two-tier curves a report draws: a policy's when a two-tier
/// calibration of it was given or its score column named, and the predictive one over the
/// results' score when nothing names either.
fn drawn(options: &ReportOptions, calibrations: &[CalibrationDocument]) -> Drawn {
    let named = |policy: Policy, flag: &Option<String>| {
        flag.is_some()
            || calibrations
                .iter()
                .any(|calibration| calibration.policy == policy)
    };
    let cascade = named(Policy::Cascade, &options.cascade_score_col);
    let predictive = named(Policy::Predictive, &options.predictive_score_col);
    Drawn {
        predictive: predictive || !cascade,
        cascade,
    }
}

/// The config the gate signed, where `emitted` names a file that is still
/// the one it signed (its sha256): its expiry is read from it.
fn signed_config(gate: Option<&GateReport>) -> Option<RouteConfig> {
    let emitted = gate?.emitted.as_ref()?;
    let bytes = std::fs::read(&emitted.config).ok()?;
    if sha256_hex(&bytes) != emitted.sha256 {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

/// Every input the report reads, named by its flag.
fn inputs(options: &ReportOptions) -> Vec<Named<'_>> {
    let mut inputs = Vec::new();
    inputs.extend(
        options
            .results
            .iter()
            .map(|path| Named::new(path, "--results")),
    );
    inputs.extend(
        options
            .replay
            .iter()
            .map(|path| Named::new(path, "--replay")),
    );
    inputs.extend(
        options
            .records
            .iter()
            .map(|path| Named::new(path, "--records")),
    );
    inputs.extend(
        options
            .calibration
            .iter()
            .map(|path| Named::new(path, "--calibration")),
    );
    inputs.extend(options.gate.iter().map(|path| Named::new(path, "--gate")));
    inputs.extend(options.drift.iter().map(|path| Named::new(path, "--drift")));
    inputs.extend(
        options
            .baseline
            .iter()
            .map(|path| Named::new(path, "--baseline")),
    );
    inputs
}

/// The report of replays and records alone, with no graded results.
fn without_results(
    options: &ReportOptions,
    replay: Option<&ReplayDocument>,
    records: &RecordsDocuments,
    html_path: PathBuf,
    markdown_path: PathBuf,
) -> anyhow::Result<Written> {
    if !options.calibration.is_empty()
        || options.gate.is_some()
        || options.drift.is_some()
        || options.baseline.is_some()
    {
        bail!(
            "--calibration, --gate, --drift and --baseline describe graded results: give --results too"
        );
    }
    let mut markdown = format!(
        "## {}\n\nFull report with charts: {}.\n\n",
        text(&options.title),
        code(&html_path.display().to_string())
    );
    let mut page = match &replay {
        Some(replay) => {
            replay_summary(&mut markdown, replay);
            replay_page(&options.title, replay)
        }
        None => records_page(&options.title, &RecordsDocuments::default()),
    };
    if !records.is_empty() {
        records_summary(&mut markdown, records);
        let mut sections = String::new();
        records_section(&mut sections, records);
        insert_before_body_end(&mut page, &sections);
    }
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("{}: cannot create (--out)", options.out.display()))?;
    write_pages(&html_path, &page, &markdown_path, &markdown)?;
    Ok(Written {
        html: html_path,
        markdown: markdown_path,
    })
}

/// The two-tier calibrations, one per policy, and those of more tiers, one
/// per policy and kind.
fn calibrations(
    paths: &[PathBuf],
) -> anyhow::Result<(Vec<CalibrationDocument>, Vec<CalibrationDocument>)> {
    let mut calibrations: Vec<CalibrationDocument> = Vec::new();
    let mut tiered: Vec<CalibrationDocument> = Vec::new();
    for path in paths {
        let calibration: CalibrationDocument =
            load(path, "--calibration", "a calibration document")?;
        if calibration.two_tiers(path, "report").is_err() {
            if tiered
                .iter()
                .any(|other| other.policy == calibration.policy)
            {
                bail!(
                    "{}: a second calibration of more than two tiers for the {} policy (--calibration takes one per policy and kind)",
                    path.display(),
                    calibration.policy.name()
                );
            }
            tiered.push(calibration);
            continue;
        }
        // A plain fit and a certified one of a policy are both shown: what
        // the guarantee costs is the difference.
        if calibrations.iter().any(|other| {
            other.policy == calibration.policy
                && other.confidence.is_some() == calibration.confidence.is_some()
        }) {
            bail!(
                "{}: a second {} calibration of the {} policy (--calibration takes one plain and one certified per policy)",
                path.display(),
                if calibration.confidence.is_some() {
                    "certified"
                } else {
                    "plain"
                },
                calibration.policy.name()
            );
        }
        calibrations.push(calibration);
    }
    Ok((calibrations, tiered))
}

/// The deployed config at `path` against the proposal: the gate's emitted
/// config when the gate report has one, else the deployed table with the
/// thresholds of the calibration of its policy and score column.
fn the_change(
    path: &Path,
    results: &Path,
    gate: Option<&GateReport>,
    calibrations: &[CalibrationDocument],
    options: &ReportOptions,
) -> anyhow::Result<Change> {
    let deployed: RouteConfig = load(path, "--baseline", "a route config")?;
    let (proposed, proposal) = match gate.and_then(|gate| gate.emitted.as_ref()) {
        Some(emitted) => {
            let config: RouteConfig = load(
                Path::new(&emitted.config),
                "--gate",
                "the route config the gate emitted",
            )?;
            (
                config.table,
                format!("the gate's version {}", config.version),
            )
        }
        None => {
            let proposed = proposed_from_calibration(&deployed.table, calibrations).with_context(|| {
                format!(
                    "{}: nothing to compare with: give --gate with an emitted config, or the --calibration of the deployed policy and score column",
                    path.display()
                )
            })?;
            (proposed, "the calibrated thresholds".to_owned())
        }
    };
    let rows = ResultsFile {
        path: results,
        slice_col: &options.slice_col,
    };
    change(
        &deployed,
        &proposed,
        proposal,
        &rows,
        options.max_regression.get(),
        options.confidence.delta(),
    )
}

/// The graded results a change is scored on.
struct ResultsFile<'a> {
    path: &'a Path,
    slice_col: &'a str,
}

impl ResultsFile<'_> {
    fn read(&self, score_column: Option<&str>) -> ReadOptions {
        ReadOptions {
            names: ColumnNames::new(score_column.unwrap_or("score"), self.slice_col),
            carry_extra: false,
            details: true,
            score_optional: score_column.is_none(),
            carry_read_only: false,
        }
    }
}

impl ChangeRows for ResultsFile<'_> {
    fn results(&self, score_column: Option<&str>) -> anyhow::Result<GradedTable> {
        Ok(read_graded(self.path, &self.read(score_column))?)
    }

    fn tiered(&self, table: &ResolvedTable) -> anyhow::Result<Option<TieredRows>> {
        Ok(tiered_rows(self.path, &self.read(None), table)?)
    }
}

/// The report's two pages, both or neither: staged, then committed, each
/// error naming its file (a full disk says only "No space left on
/// device"). The summary begins with its marker.
fn write_pages(
    html_path: &Path,
    html: &str,
    markdown_path: &Path,
    markdown: &str,
) -> anyhow::Result<()> {
    use std::io::Write;
    let stage = |path: &Path, parts: &[&str]| {
        Staged::new(path, |file| {
            for part in parts {
                file.write_all(part.as_bytes())?;
            }
            Ok(())
        })
        .with_context(|| format!("{}: cannot write (--out)", path.display()))
    };
    let staged = vec![
        stage(html_path, &[html])?,
        stage(markdown_path, &[SUMMARY_MARKER, markdown])?,
    ];
    commit_all(staged).with_context(|| format!("{}: cannot write (--out)", html_path.display()))
}

/// The documents `report --records` names, each known by its `kind`.
fn records_documents(paths: &[PathBuf]) -> anyhow::Result<RecordsDocuments> {
    let mut documents = RecordsDocuments::default();
    for path in paths {
        if path.is_dir() {
            anyhow::bail!(
                "{}: a directory; report --records takes the documents drift --records, replay fallback, replay hedge and replay candidate write (--out), not the records: run `routeval drift --records {} --config CONFIG.json --out drift-records.json` and pass that",
                path.display(),
                path.display()
            );
        }
        let value: serde_json::Value = load(path, "--records", "a JSON document")?;
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let twice = || {
            anyhow::anyhow!(
                "{}: a second {kind} document (--records takes one of each)",
                path.display()
            )
        };
        let parse = |what: &str| format!("{}: not {what} (--records)", path.display());
        match kind.as_str() {
            "records" if documents.drift.is_none() => {
                documents.drift = Some(
                    serde_json::from_value(value)
                        .with_context(|| parse("a drift-records document"))?,
                );
            }
            "fallback" if documents.fallback.is_none() => {
                documents.fallback = Some(
                    serde_json::from_value(value).with_context(|| parse("a fallback document"))?,
                );
            }
            "hedge" if documents.hedge.is_none() => {
                documents.hedge =
                    Some(serde_json::from_value(value).with_context(|| parse("a hedge document"))?);
            }
            "records" | "fallback" | "hedge" => return Err(twice()),
            // One per candidate: a review compares them.
            crate::schema::CANDIDATE_REPLAY_KIND => documents.candidates.push(
                serde_json::from_value(value)
                    .with_context(|| parse("a replay candidate document"))?,
            ),
            _ => bail!(
                "{}: not a document of `drift --records`, `replay fallback`, `replay hedge` or `replay candidate` (--records)",
                path.display()
            ),
        }
    }
    Ok(documents)
}
