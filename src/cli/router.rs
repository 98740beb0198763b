//! `routeval router train`, `routeval router score` and `routeval router
//! join`.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};

use crate::atomic::{Named, Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::router::{JoinOptions, ScoreOptions, TrainOptions};
use crate::router_model::ROUTER_OUTPUT;
use crate::schema::{Column, GRADED_OUTPUT};

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
    #[arg(long, value_name = "SHARE", default_value_t = 0.5)]
    pub calibration_share: f64,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score (a cascade's verifier score) beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: String,

    /// Folds for the cross-fitted APGR reported on the training part.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub folds: usize,

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
    pub into: String,

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
    pub into: String,

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

/// The most folds a cross-fit may have: each fold trains a model, so more
/// than this is a typo, not a plan.
pub const MAX_FOLDS: usize = 100;

pub(super) fn check_folds(folds: usize) -> anyhow::Result<()> {
    if !(2..=MAX_FOLDS).contains(&folds) {
        bail!("--folds must be from 2 to {MAX_FOLDS}, got {folds}");
    }
    Ok(())
}

/// Refuses an `--into` that is empty or would overwrite a column of the
/// table other than its score.
fn check_into(into: &str) -> anyhow::Result<()> {
    if into.trim().is_empty() {
        bail!("--into: a column name cannot be empty");
    }
    match Column::from_name(into) {
        Some(column) if column != Column::Score => bail!(
            "--into: \"{into}\" is a column of the graded-results table; name `score` or a new column"
        ),
        _ => Ok(()),
    }
}

impl RouterTrainArgs {
    /// The stage's options, each flag checked where it is parsed.
    pub fn options(&self) -> anyhow::Result<TrainOptions> {
        check_into(&self.into)?;
        check_folds(self.folds)?;
        if !(self.calibration_share > 0.0 && self.calibration_share < 1.0) {
            bail!(
                "--calibration-share must be above 0 and below 1, got {}",
                self.calibration_share
            );
        }
        Ok(TrainOptions {
            results: self.results.clone(),
            out: self.out.clone(),
            scored_out: self.scored_out.clone(),
            into: self.into.clone(),
            calibration_share: self.calibration_share,
            folds: self.folds,
            seed: self.seed,
            prompt_col: self.prompt_col.clone(),
            slice_col: self.slice_col.clone(),
        })
    }
}

impl RouterScoreArgs {
    /// The stage's options, each flag checked where it is parsed.
    pub fn options(&self) -> anyhow::Result<ScoreOptions> {
        check_into(&self.into)?;
        Ok(ScoreOptions {
            router: self.router.clone(),
            results: self.results.clone(),
            out: self.out.clone(),
            into: self.into.clone(),
            prompt_col: self.prompt_col.clone(),
            slice_col: self.slice_col.clone(),
        })
    }
}

impl RouterJoinArgs {
    /// The stage's options, each flag checked where it is parsed.
    pub fn options(&self) -> anyhow::Result<JoinOptions> {
        check_into(&self.into)?;
        Ok(JoinOptions {
            results: self.results.clone(),
            scores: self.scores.clone(),
            scores_col: self.scores_col.clone(),
            into: self.into.clone(),
            out: self.out.clone(),
            slice_col: self.slice_col.clone(),
        })
    }
}

fn train(args: RouterTrainArgs) -> anyhow::Result<Outcome> {
    let options = args.options()?;
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
            args.into,
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
    let options = args.options()?;
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
    let options = args.options()?;
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
            train.options().unwrap(),
            TrainOptions {
                results: PathBuf::from("r.parquet"),
                out: PathBuf::from("m.bin"),
                scored_out: Some(PathBuf::from("s.parquet")),
                into: "router_score".to_owned(),
                calibration_share: 0.3,
                folds: 4,
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
            join.options().unwrap(),
            JoinOptions {
                results: PathBuf::from("r.parquet"),
                scores: PathBuf::from("s.csv"),
                scores_col: "p".to_owned(),
                into: "score".to_owned(),
                out: PathBuf::from("o.parquet"),
                slice_col: "slice".to_owned(),
            }
        );
    }

    #[test]
    fn bad_flags_are_refused_where_they_are_parsed() {
        let RouterCommand::Train(train) =
            command("routeval router train --results r.parquet --out m.bin --folds 1")
        else {
            panic!("train");
        };
        assert_eq!(
            train.options().unwrap_err().to_string(),
            "--folds must be from 2 to 100, got 1"
        );
        let RouterCommand::Train(train) =
            command("routeval router train --results r.parquet --out m.bin --calibration-share 1")
        else {
            panic!("train");
        };
        assert_eq!(
            train.options().unwrap_err().to_string(),
            "--calibration-share must be above 0 and below 1, got 1"
        );
        let RouterCommand::Score(score) = command(
            "routeval router score --router m.bin --results r.parquet --out o.parquet --into large_ok",
        ) else {
            panic!("score");
        };
        assert!(
            score
                .options()
                .unwrap_err()
                .to_string()
                .starts_with("--into: \"large_ok\" is a column of the graded-results table")
        );
    }
}
