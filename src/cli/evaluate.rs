//! `routeval evaluate`.

use std::path::PathBuf;

use clap::Args;

use crate::evaluate::{EvaluateOptions, evaluate, render};
use crate::exit_codes::Outcome;

use super::print::emit;

#[derive(Debug, Args)]
pub struct EvaluateArgs {
    /// Graded results with router scores.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Print the metrics as JSON.
    #[arg(long)]
    pub json: bool,

    /// Seed of the random router.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The file's name for the score column.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<Outcome> {
    let document = evaluate(&EvaluateOptions {
        results: args.results,
        seed: args.seed,
        score_col: args.score_col,
        slice_col: args.slice_col,
    })?;
    emit(&document, "the evaluation", None, args.json, || {
        render(&document)
    })?;
    Ok(Outcome::Passed)
}
