//! `routeval report`.

use std::path::Path;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde::de::DeserializeOwned;

use crate::atomic::{Named, Output, Staged, check_outputs, commit_all};
use crate::digest::sha256_hex;
use crate::exit_codes::Outcome;
use crate::markdown::{code, text};
use crate::policy::scores_of;
use crate::policy::{TieredRows, tiered_rows};
use crate::report::{
    Change, ChangeRows, REPORT_HTML_OUTPUT, REPORT_SUMMARY_OUTPUT, RecordsDocuments, ReportInputs,
    SUMMARY_MARKER, change, proposed_from_calibration, records_page, records_section,
    records_summary, render, replay_page, replay_summary, slice_curves, summary,
};
use crate::routes::ResolvedTable;
use crate::routes::RouteConfig;
use crate::schema::GateReport;
use crate::schema::ReplayDocument;
use crate::schema::{CalibrationDocument, Policy};
use crate::schema::{Column, ColumnNames, GradedTable, ReadOptions, read_graded};

use super::print::println;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Graded results to chart (optional with --replay or --records).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["replay", "records"])]
    pub results: Option<PathBuf>,

    /// A replica-routing replay (from `routeval replay replicas --out`).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// What request records said: the documents of `drift --records`,
    /// `replay fallback` and `replay hedge` (`--out`), at most one of each.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub records: Vec<PathBuf>,

    /// Calibration documents, at most one per policy: mark the chosen
    /// thresholds and name each curve's score column.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub calibration: Vec<PathBuf>,

    /// A gate report (gate-report.json).
    #[arg(long, value_name = "FILE")]
    pub gate: Option<PathBuf>,

    /// The deployed route config: the report leads with the change from it
    /// to the proposal (the gate's emitted config with --gate, else the
    /// deployed table with the thresholds of the matching --calibration).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// The margin of the paired comparison with --baseline.
    #[arg(long, value_name = "D", default_value_t = 0.01)]
    pub max_regression: f64,

    /// The confidence of the paired comparison with --baseline.
    #[arg(long, value_name = "C", default_value_t = 0.95)]
    pub confidence: f64,

    /// A drift document (from `routeval drift --out`).
    #[arg(long, value_name = "FILE")]
    pub drift: Option<PathBuf>,

    /// Directory for report.html and summary.md.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// The report's title.
    #[arg(long, value_name = "TEXT", default_value = "routeval report")]
    pub title: String,

    /// The score column of both curves, unless named by their own flags or
    /// the calibration; `score` by default.
    #[arg(long, value_name = "NAME")]
    pub score_col: Option<String>,

    /// The router's score column, for the predictive curve.
    #[arg(long, value_name = "NAME")]
    pub predictive_score_col: Option<String>,

    /// The verifier's score column, for the cascade curve.
    #[arg(long, value_name = "NAME")]
    pub cascade_score_col: Option<String>,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

fn load<T: DeserializeOwned>(path: &Path, flag: &str, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read ({flag})", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not {what} ({flag})", path.display()))
}

pub fn run(args: ReportArgs) -> anyhow::Result<Outcome> {
    let html_path = args.out.join("report.html");
    let markdown_path = args.out.join("summary.md");
    let mut inputs = Vec::new();
    inputs.extend(
        args.results
            .iter()
            .map(|path| Named::new(path, "--results")),
    );
    inputs.extend(args.replay.iter().map(|path| Named::new(path, "--replay")));
    inputs.extend(
        args.records
            .iter()
            .map(|path| Named::new(path, "--records")),
    );
    inputs.extend(
        args.calibration
            .iter()
            .map(|path| Named::new(path, "--calibration")),
    );
    inputs.extend(args.gate.iter().map(|path| Named::new(path, "--gate")));
    inputs.extend(args.drift.iter().map(|path| Named::new(path, "--drift")));
    inputs.extend(
        args.baseline
            .iter()
            .map(|path| Named::new(path, "--baseline")),
    );
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        bail!("--confidence must be in (0, 1), got {}", args.confidence);
    }
    if !(0.0..=1.0).contains(&args.max_regression) {
        bail!(
            "--max-regression must be in [0, 1], got {}",
            args.max_regression
        );
    }
    check_outputs(
        &[
            Output::new(&html_path, "--out", &REPORT_HTML_OUTPUT),
            Output::new(&markdown_path, "--out", &REPORT_SUMMARY_OUTPUT),
        ],
        &inputs,
    )?;
    let replay: Option<ReplayDocument> = args
        .replay
        .as_deref()
        .map(|path| load(path, "--replay", "a replay document"))
        .transpose()?;
    let records = records_documents(&args.records)?;
    let Some(results) = &args.results else {
        if !args.calibration.is_empty()
            || args.gate.is_some()
            || args.drift.is_some()
            || args.baseline.is_some()
        {
            bail!(
                "--calibration, --gate, --drift and --baseline describe graded results: give --results too"
            );
        }
        let mut markdown = format!(
            "## {}\n\nFull report with charts: {}.\n\n",
            text(&args.title),
            code(&html_path.display().to_string())
        );
        let mut page = match &replay {
            Some(replay) => {
                replay_summary(&mut markdown, replay);
                replay_page(&args.title, replay)
            }
            None => records_page(&args.title, &RecordsDocuments::default()),
        };
        if !records.is_empty() {
            records_summary(&mut markdown, &records);
            let mut sections = String::new();
            records_section(&mut sections, &records);
            let end = page.rfind("</body>").expect("a page ends its body");
            page.insert_str(end, &sections);
        }
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("{}: cannot create (--out)", args.out.display()))?;
        write_pages(&html_path, &page, &markdown_path, &markdown)?;
        println(&format!(
            "report: {}\nsummary: {}",
            html_path.display(),
            markdown_path.display()
        ))?;
        return Ok(Outcome::Passed);
    };
    let mut calibrations: Vec<CalibrationDocument> = Vec::new();
    let mut tiered: Vec<CalibrationDocument> = Vec::new();
    for path in &args.calibration {
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
        if calibrations
            .iter()
            .any(|other| other.policy == calibration.policy)
        {
            bail!(
                "{}: a second calibration of the {} policy (--calibration takes one per policy)",
                path.display(),
                calibration.policy.name()
            );
        }
        calibrations.push(calibration);
    }
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
            .or_else(|| args.score_col.clone())
            .unwrap_or_else(|| Column::Score.name().to_owned())
    };
    let predictive_column = column_of(&args.predictive_score_col, Policy::Predictive);
    let cascade_column = column_of(&args.cascade_score_col, Policy::Cascade);
    let read = |score: &str| ReadOptions {
        names: ColumnNames::new(score, args.slice_col.clone()),
        carry_extra: false,
        details: false,
        score_optional: false,
        carry_read_only: false,
    };
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
    let gate = args
        .gate
        .as_deref()
        .map(|path| load(path, "--gate", "a gate report"))
        .transpose()?;
    let drift = args
        .drift
        .as_deref()
        .map(|path| load(path, "--drift", "a drift document"))
        .transpose()?;
    let change = match &args.baseline {
        Some(path) => {
            let every: Vec<CalibrationDocument> =
                calibrations.iter().chain(&tiered).cloned().collect();
            Some(the_change(path, results, gate.as_ref(), &every, &args)?)
        }
        None => None,
    };
    let curves = slice_curves(&table, &predictive_scores, &cascade_scores);
    let results_path = results.display().to_string();
    let inputs = ReportInputs {
        title: &args.title,
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
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("{}: cannot create (--out)", args.out.display()))?;
    write_pages(
        &html_path,
        &render(&inputs),
        &markdown_path,
        &summary(&inputs, &html_path.display().to_string()),
    )?;
    println(&format!(
        "report: {}\nsummary: {}",
        html_path.display(),
        markdown_path.display()
    ))?;
    Ok(Outcome::Passed)
}

/// The deployed config at `path` against the proposal: the gate's emitted
/// config when the gate report has one, else the deployed table with the
/// thresholds of the calibration of its policy and score column.
fn the_change(
    path: &Path,
    results: &Path,
    gate: Option<&GateReport>,
    calibrations: &[CalibrationDocument],
    args: &ReportArgs,
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
        slice_col: &args.slice_col,
    };
    change(
        &deployed,
        &proposed,
        proposal,
        &rows,
        args.max_regression,
        1.0 - args.confidence,
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
fn records_documents(paths: &[std::path::PathBuf]) -> anyhow::Result<RecordsDocuments> {
    let mut documents = RecordsDocuments::default();
    for path in paths {
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
            _ => bail!(
                "{}: not a document of `drift --records`, `replay fallback` or `replay hedge` (--records)",
                path.display()
            ),
        }
    }
    Ok(documents)
}
