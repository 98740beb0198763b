//! `routeval router train`, `routeval router score` and `routeval router
//! join`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::atomic::{Named, Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::router::{JoinOptions, ScoreOptions, TrainOptions};
use crate::router_model::{Folds, ROUTER_OUTPUT};
use crate::schema::{GRADED_OUTPUT, ScoreColumn};
use crate::units::Fraction;

use super::print::println;

#[derive(Debug, Subcommand)]
pub enum RouterCommand {
    /// Fit on graded results; write the model and cross-fitted scores.
    Train(RouterTrainArgs),
    /// Score prompts with a trained model.
    Score(RouterScoreArgs),
    /// Join an external router's scores into the results by id.
    Join(RouterJoinArgs),
}

#[derive(Debug, Args)]
pub struct RouterTrainArgs {
    /// Graded results with a prompt column.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// The model to deploy, fitted on the training part, with the prompts it
    /// was fitted on.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Also write the calibration part, scored by that model in --into
    /// (Parquet): the rows `calibrate` and `gate` certify on.
    #[arg(long, value_name = "FILE")]
    pub scored_out: Option<PathBuf>,

    /// The share of prompts kept out of training for calibration, split by
    /// a hash of the prompt's text.
    #[arg(long, value_name = "SHARE", default_value = "0.5")]
    pub calibration_share: Fraction,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score (a cascade's verifier score) beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: ScoreColumn,

    /// Folds for the cross-fitted APGR reported on the training part.
    #[arg(long, value_name = "K", default_value = "5")]
    pub folds: Folds,

    /// Seed of the training order.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The column with the prompt text.
    #[arg(long, value_name = "NAME", default_value = "prompt")]
    pub prompt_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Args)]
pub struct RouterScoreArgs {
    /// A model from `routeval router train`.
    #[arg(long, value_name = "FILE")]
    pub router: PathBuf,

    /// Graded results with a prompt column.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// The results with the router's scores in --into (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: ScoreColumn,

    /// The column with the prompt text.
    #[arg(long, value_name = "NAME", default_value = "prompt")]
    pub prompt_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Args)]
pub struct RouterJoinArgs {
    /// Graded results.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// A table (CSV, JSONL or Parquet) with an `id` column and the scores.
    #[arg(long, value_name = "FILE")]
    pub scores: PathBuf,

    /// The column of --scores that holds them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub scores_col: String,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: ScoreColumn,

    /// The results with the joined scores (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

pub fn run(command: RouterCommand) -> anyhow::Result<Outcome> {
    match command {
        RouterCommand::Train(args) => train(args),
        RouterCommand::Score(args) => score(args),
        RouterCommand::Join(args) => join(args),
    }
}

impl RouterTrainArgs {
    /// The stage's options, each flag checked where it was parsed.
    pub fn options(&self) -> TrainOptions {
        TrainOptions {
            results: self.results.clone(),
            out: self.out.clone(),
            scored_out: self.scored_out.clone(),
            into: self.into.clone(),
            calibration_share: self.calibration_share,
            folds: self.folds,
            seed: self.seed,
            prompt_col: self.prompt_col.clone(),
            slice_col: self.slice_col.clone(),
        }
    }
}

impl RouterScoreArgs {
    /// The stage's options, each flag checked where it was parsed.
    pub fn options(&self) -> ScoreOptions {
        ScoreOptions {
            router: self.router.clone(),
            results: self.results.clone(),
            out: self.out.clone(),
            into: self.into.clone(),
            prompt_col: self.prompt_col.clone(),
            slice_col: self.slice_col.clone(),
        }
    }
}

impl RouterJoinArgs {
    /// The stage's options, each flag checked where it was parsed.
    pub fn options(&self) -> JoinOptions {
        JoinOptions {
            results: self.results.clone(),
            scores: self.scores.clone(),
            scores_col: self.scores_col.clone(),
            into: self.into.clone(),
            out: self.out.clone(),
            slice_col: self.slice_col.clone(),
        }
    }
}

fn train(args: RouterTrainArgs) -> anyhow::Result<Outcome> {
    let options = args.options();
    let mut outputs = vec![Output::new(&args.out, "--out", &ROUTER_OUTPUT)];
    if let Some(scored) = &args.scored_out {
        outputs.push(Output::new(scored, "--scored-out", &GRADED_OUTPUT));
    }
    check_outputs(&outputs, &[Named::new(&args.results, "--results")])?;
    let trained = crate::router::train(&options)?;
    println(&format!(
        "trained on {} of {} prompts; model: {}",
        trained.training,
        trained.training + trained.calibration,
        args.out.display()
    ))?;
    if let Some(scored) = &args.scored_out {
        println(&format!(
            "calibration part: {} prompts the model never saw, scored by it in {:?}: {}",
            trained.calibration,
            args.into.as_str(),
            scored.display()
        ))?;
    }
    if let Some(apgr) = trained.apgr {
        println(&format!("APGR on the calibration part {apgr:.3}"))?;
    }
    if let Some(apgr) = trained.cross_fitted_apgr {
        println(&format!(
            "cross-fitted ({} folds) APGR on the training part {apgr:.3}",
            args.folds
        ))?;
    }
    Ok(Outcome::Passed)
}

fn score(args: RouterScoreArgs) -> anyhow::Result<Outcome> {
    let options = args.options();
    check_outputs(
        &[Output::new(&args.out, "--out", &GRADED_OUTPUT)],
        &[
            Named::new(&args.router, "--router"),
            Named::new(&args.results, "--results"),
        ],
    )?;
    let prompts = crate::router::score(&options)?;
    println(&format!("scored {prompts} prompts: {}", args.out.display()))?;
    Ok(Outcome::Passed)
}

/// An external router's scores, joined by id into the results.
fn join(args: RouterJoinArgs) -> anyhow::Result<Outcome> {
    let options = args.options();
    check_outputs(
        &[Output::new(&args.out, "--out", &GRADED_OUTPUT)],
        &[
            Named::new(&args.results, "--results"),
            Named::new(&args.scores, "--scores"),
        ],
    )?;
    let rows = crate::router::join(&options)?;
    println(&format!(
        "joined {rows} scores from {} into \"{}\": {}",
        args.scores.display(),
        args.into,
        args.out.display()
    ))?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn command(argv: &str) -> RouterCommand {
        let Command::Router(command) = Cli::try_parse_from(argv.split_whitespace())
            .unwrap()
            .command
        else {
            panic!("{argv} is a router command");
        };
        command
    }

    #[test]
    fn flags_become_options() {
        let RouterCommand::Train(train) = command(
            "routeval router train --results r.parquet --out m.bin --scored-out s.parquet --into router_score --calibration-share 0.3 --folds 4 --seed 9",
        ) else {
            panic!("train");
        };
        assert_eq!(
            train.options(),
            TrainOptions {
                results: PathBuf::from("r.parquet"),
                out: PathBuf::from("m.bin"),
                scored_out: Some(PathBuf::from("s.parquet")),
                into: "router_score".parse().unwrap(),
                calibration_share: Fraction::new(0.3).unwrap(),
                folds: "4".parse().unwrap(),
                seed: 9,
                prompt_col: "prompt".to_owned(),
                slice_col: "slice".to_owned(),
            }
        );
        let RouterCommand::Join(join) = command(
            "routeval router join --results r.parquet --scores s.csv --scores-col p --out o.parquet",
        ) else {
            panic!("join");
        };
        assert_eq!(
            join.options(),
            JoinOptions {
                results: PathBuf::from("r.parquet"),
                scores: PathBuf::from("s.csv"),
                scores_col: "p".to_owned(),
                into: "score".parse().unwrap(),
                out: PathBuf::from("o.parquet"),
                slice_col: "slice".to_owned(),
            }
        );
    }

    #[test]
    fn bad_flags_are_refused_where_they_are_parsed() {
        for (argv, message) in [
            (
                "routeval router train --results r.parquet --out m.bin --folds 1",
                "error: invalid value '1' for '--folds <K>': 1: folds are from 2 to 100",
            ),
            (
                "routeval router train --results r.parquet --out m.bin --calibration-share 1",
                "error: invalid value '1' for '--calibration-share <SHARE>': 1: a fraction is between 0 and 1",
            ),
            (
                "routeval router score --router m.bin --results r.parquet --out o.parquet --into large_ok",
                "error: invalid value 'large_ok' for '--into <NAME>': \"large_ok\" is a column of the graded-results table",
            ),
            (
                "routeval router join --results r.parquet --scores s.csv --out o.parquet --into=",
                "error: invalid value '' for '--into <NAME>': a column name cannot be empty",
            ),
        ] {
            let seen = Cli::try_parse_from(argv.split_whitespace())
                .unwrap_err()
                .to_string();
            assert!(seen.starts_with(message), "{seen}");
        }
    }
}
