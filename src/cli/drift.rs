//! `routeval drift`.

use anyhow::{Context, bail};

use crate::atomic::{Named, check_outputs, write_bytes_atomically};
use crate::drift::{DriftOptions, Verdict, drift, markdown, terminal};
use crate::exit_codes::Outcome;
use crate::schema::{Column, ColumnNames, ReadOptions};

use super::args::DriftArgs;
use super::print::print;

pub fn run(args: DriftArgs) -> anyhow::Result<Outcome> {
    if let Some(confidence) = args.confidence
        && !(confidence > 0.0 && confidence < 1.0)
    {
        bail!("--confidence must be in (0, 1), got {confidence}");
    }
    let options = DriftOptions {
        config: args.config,
        results: args.results,
        baseline_results: args.baseline_results,
        read: ReadOptions {
            names: ColumnNames::new(Column::Score.name(), args.slice_col),
            carry_extra: false,
            details: true,
            score_optional: false,
            carry_read_only: false,
        },
        score_col: args.score_col,
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
        check_outputs(&[Named::new(out, "--out")], &inputs)?;
    }
    let document = drift(&options)?;
    let json =
        serde_json::to_string_pretty(&document).context("cannot encode the drift document")? + "\n";
    if let Some(out) = &args.out {
        write_bytes_atomically(out, json.as_bytes()).with_context(|| {
            format!("{}: cannot write the drift document (--out)", out.display())
        })?;
    }
    let printed = if args.json {
        json
    } else if args.markdown {
        markdown(&document)
    } else {
        terminal(&document)
    };
    print(&printed)?;
    Ok(if document.verdict == Verdict::Recalibrate {
        Outcome::CheckFailed
    } else {
        Outcome::Passed
    })
}
