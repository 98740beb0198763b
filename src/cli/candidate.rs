//! `routeval replay candidate`.

use std::path::PathBuf;

use clap::Args;

use crate::atomic::{Named, Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::replay::candidate::{
    Bound, CandidateOptions, ComparisonOptions, render_candidate, replay_candidate, write_state,
};
use crate::schema::{CANDIDATE_REPLAY_OUTPUT, COMPARISON_STATE_OUTPUT, ComparisonBudget};
use crate::units::Confidence;

use super::print::DocumentOutput;

#[derive(Debug, Args)]
pub struct CandidateArgs {
    /// serve's records: its records directory, or a file of them.
    #[arg(long, value_name = "DIR")]
    pub records: PathBuf,

    /// The signed config that decided the records.
    #[arg(long, value_name = "CONFIG.json")]
    pub config: PathBuf,

    /// The candidate route table.
    #[arg(long, value_name = "TABLE.toml")]
    pub candidate: PathBuf,

    /// The calibration its thresholds come from (repeatable).
    #[arg(long = "calibration", value_name = "FILE")]
    pub calibrations: Vec<PathBuf>,

    /// The graded results the candidate was calibrated on: the direct
    /// model of the doubly-robust estimate.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// The label set of the logged answers (`routeval sample --records DIR
    /// --label-share Q`, each drawn record's `ok` filled in).
    #[arg(long, value_name = "FILE")]
    pub labels: PathBuf,

    /// The confidence of every interval.
    #[arg(long, value_name = "C", default_value = "0.95")]
    pub confidence: Confidence,

    /// The intervals: `betting-sequence` holds at every look, so the
    /// estimate may be made again on growing records any number of times;
    /// `empirical-bernstein` holds for one look at a size fixed in advance.
    #[arg(long, value_name = "BOUND", default_value = "betting-sequence")]
    pub bound: Bound,

    /// Compare the candidate with the running config as the records grow:
    /// each run is a look, stopped once the candidate is shown better or
    /// worse at the confidence (or the budget is spent); the state is
    /// carried in this file between runs.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,

    /// With --state: stop undecided once this many labels were read.
    #[arg(long, value_name = "N", requires = "state")]
    pub max_labels: Option<u64>,

    /// With --state: stop undecided once the compared decisions span this
    /// many days (by their records' times).
    #[arg(long, value_name = "DAYS", requires = "state", value_parser = positive_days)]
    pub max_days: Option<f64>,

    #[command(flatten)]
    pub document: DocumentOutput,
}

fn positive_days(given: &str) -> Result<f64, String> {
    match given.parse::<f64>() {
        Ok(days) if days.is_finite() && days > 0.0 => Ok(days),
        _ => Err(format!("{given:?}: a number of days above 0")),
    }
}

pub fn run(args: &CandidateArgs) -> anyhow::Result<Outcome> {
    let mut outputs = args.document.outputs(&CANDIDATE_REPLAY_OUTPUT);
    if let Some(state) = &args.state {
        outputs.push(Output::new(state, "--state", &COMPARISON_STATE_OUTPUT));
    }
    let mut inputs = vec![
        Named::new(&args.records, "--records"),
        Named::new(&args.config, "--config"),
        Named::new(&args.candidate, "--candidate"),
        Named::new(&args.results, "--results"),
        Named::new(&args.labels, "--labels"),
    ];
    inputs.extend(
        args.calibrations
            .iter()
            .map(|path| Named::new(path, "--calibration")),
    );
    check_outputs(&outputs, &inputs)?;
    let (document, state) = replay_candidate(&CandidateOptions {
        records: args.records.clone(),
        config: args.config.clone(),
        candidate: args.candidate.clone(),
        calibrations: args.calibrations.clone(),
        results: args.results.clone(),
        labels: args.labels.clone(),
        confidence: args.confidence,
        bound: args.bound,
        comparison: args.state.as_ref().map(|state| ComparisonOptions {
            state: state.clone(),
            budget: ComparisonBudget {
                max_labels: args.max_labels,
                max_days: args.max_days,
            },
        }),
    })?;
    args.document
        .emit(&document, "the document", || render_candidate(&document))?;
    if let (Some(path), Some(state)) = (&args.state, state) {
        write_state(&state, path)?;
    }
    Ok(Outcome::Passed)
}
