//! `routeval drift`.

use anyhow::{Context, bail};

use crate::atomic::{Named, Output, check_outputs, write_bytes_atomically};
use crate::drift::{
    DriftOptions, RecordsDriftOptions, RecordsInput, drift, drift_records, markdown,
    render_records, terminal,
};
use crate::exit_codes::Outcome;
use crate::schema::{Column, ColumnNames, ReadOptions};
use crate::schema::{DRIFT_OUTPUT, RECORDS_DRIFT_OUTPUT, Verdict};

use super::args::DriftArgs;
use super::print::print;

pub fn run(args: DriftArgs) -> anyhow::Result<Outcome> {
    if args.records.is_some() || args.aggregates.is_some() {
        return from_records(args);
    }
    let results = args.results.clone().expect("clap requires --results");
    if let Some(confidence) = args.confidence
        && !(confidence > 0.0 && confidence < 1.0)
    {
        bail!("--confidence must be in (0, 1), got {confidence}");
    }
    let options = DriftOptions {
        config: args.config.clone(),
        results,
        baseline_results: args.baseline_results.clone(),
        read: ReadOptions {
            names: ColumnNames::new(Column::Score.name(), args.slice_col.clone()),
            carry_extra: false,
            details: true,
            score_optional: false,
            carry_read_only: false,
        },
        score_col: args.score_col.clone(),
        target: args.target,
        confidence: args.confidence,
    };
    if let Some(out) = &args.out {
        let mut inputs = vec![
            Named::new(&options.config, "--config"),
            Named::new(&options.results, "--results"),
        ];
        if let Some(baseline) = &options.baseline_results {
            inputs.push(Named::new(baseline, "--baseline-results"));
        }
        check_outputs(&[Output::new(out, "--out", &DRIFT_OUTPUT)], &inputs)?;
    }
    let document = drift(&options)?;
    emit(&document, document.verdict, &args, || {
        if args.markdown {
            markdown(&document)
        } else {
            terminal(&document)
        }
    })
}

/// Writes the document to `--out`, prints it (JSON with `--json`, else
/// `render`), and fails the check when something needs recalibration.
fn emit<T: serde::Serialize>(
    document: &T,
    verdict: Verdict,
    args: &DriftArgs,
    render: impl FnOnce() -> String,
) -> anyhow::Result<Outcome> {
    let json =
        serde_json::to_string_pretty(document).context("cannot encode the drift document")? + "\n";
    if let Some(out) = &args.out {
        write_bytes_atomically(out, json.as_bytes()).with_context(|| {
            format!("{}: cannot write the drift document (--out)", out.display())
        })?;
    }
    print(&if args.json { json } else { render() })?;
    Ok(if verdict == Verdict::Recalibrate {
        Outcome::CheckFailed
    } else {
        Outcome::Passed
    })
}

/// `drift --records` and `drift --aggregates`.
fn from_records(args: DriftArgs) -> anyhow::Result<Outcome> {
    let (input, flag) = match (&args.records, &args.aggregates) {
        (Some(path), _) => (RecordsInput::Records(path.clone()), "--records"),
        (None, Some(path)) => (RecordsInput::Aggregates(path.clone()), "--aggregates"),
        (None, None) => unreachable!("checked by the caller"),
    };
    let path = args
        .records
        .as_ref()
        .or(args.aggregates.as_ref())
        .expect("one of them");
    if let Some(out) = &args.out {
        let mut inputs = vec![Named::new(&args.config, "--config"), Named::new(path, flag)];
        if let Some(baseline) = &args.baseline_results {
            inputs.push(Named::new(baseline, "--baseline-results"));
        }
        check_outputs(&[Output::new(out, "--out", &RECORDS_DRIFT_OUTPUT)], &inputs)?;
    }
    let window_ms = super::replay::milliseconds("--window", &args.window)?.round() as i64;
    if window_ms <= 0 {
        bail!("--window {}: must be positive", args.window);
    }
    let document = drift_records(&RecordsDriftOptions {
        config: args.config.clone(),
        input,
        baseline_results: args.baseline_results.clone(),
        window_ms,
    })?;
    emit(&document, document.verdict, &args, || {
        render_records(&document, args.markdown)
    })
}
