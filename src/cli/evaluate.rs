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

impl EvaluateArgs {
    /// The stage's options.
    pub fn options(&self) -> EvaluateOptions {
        EvaluateOptions {
            results: self.results.clone(),
            seed: self.seed,
            score_col: self.score_col.clone(),
            slice_col: self.slice_col.clone(),
        }
    }
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<Outcome> {
    let document = evaluate(&args.options())?;
    emit(&document, "the evaluation", None, args.json, || {
        render(&document)
    })?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use crate::cli::{Cli, Command};
    use crate::evaluate::EvaluateOptions;

    #[test]
    fn flags_become_options() {
        let argv = "routeval evaluate --results r.parquet --seed 7 --score-col router_score";
        let Command::Evaluate(args) = Cli::try_parse_from(argv.split_whitespace())
            .unwrap()
            .command
        else {
            panic!("an evaluate command");
        };
        assert_eq!(
            args.options(),
            EvaluateOptions {
                results: PathBuf::from("r.parquet"),
                seed: 7,
                score_col: "router_score".to_owned(),
                slice_col: "slice".to_owned(),
            }
        );
    }
}
