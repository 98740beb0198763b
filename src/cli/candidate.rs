//! `routeval replay candidate`.

use std::path::PathBuf;

use clap::Args;

use crate::atomic::{Named, check_outputs};
use crate::exit_codes::Outcome;
use crate::replay::candidate::{Bound, CandidateOptions, render_candidate, replay_candidate};
use crate::schema::CANDIDATE_REPLAY_OUTPUT;
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

    #[command(flatten)]
    pub document: DocumentOutput,
}

pub fn run(args: &CandidateArgs) -> anyhow::Result<Outcome> {
    let outputs = args.document.outputs(&CANDIDATE_REPLAY_OUTPUT);
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
    let document = replay_candidate(&CandidateOptions {
        records: args.records.clone(),
        config: args.config.clone(),
        candidate: args.candidate.clone(),
        calibrations: args.calibrations.clone(),
        results: args.results.clone(),
        labels: args.labels.clone(),
        confidence: args.confidence,
        bound: args.bound,
    })?;
    args.document
        .emit(&document, "the document", || render_candidate(&document))?;
    Ok(Outcome::Passed)
}
