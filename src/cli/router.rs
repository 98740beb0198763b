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

    /// The model trained on every row, for scoring new prompts.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Also write the results with out-of-fold scores in --into (Parquet).
    #[arg(long, value_name = "FILE")]
    pub scored_out: Option<PathBuf>,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score (a cascade's verifier score) beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: String,

    /// Folds for cross-fitting: each row is scored by a model that never saw it.
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

fn train(args: RouterTrainArgs) -> anyhow::Result<Outcome> {
    check_into(&args.into)?;
    check_folds(args.folds)?;
    let mut outputs = vec![Output::new(&args.out, "--out", &ROUTER_OUTPUT)];
    if let Some(scored) = &args.scored_out {
        outputs.push(Output::new(scored, "--scored-out", &GRADED_OUTPUT));
    }
    check_outputs(&outputs, &[Named::new(&args.results, "--results")])?;
    let trained = crate::router::train(&TrainOptions {
        results: args.results,
        out: args.out.clone(),
        scored_out: args.scored_out,
        into: args.into,
        folds: args.folds,
        seed: args.seed,
        prompt_col: args.prompt_col,
        slice_col: args.slice_col,
    })?;
    println(&format!(
        "trained on {} prompts; model: {}",
        trained.prompts,
        args.out.display()
    ))?;
    if let Some(apgr) = trained.apgr {
        println(&format!(
            "cross-fitted ({} folds) APGR {apgr:.3}",
            args.folds
        ))?;
    }
    Ok(Outcome::Passed)
}

fn score(args: RouterScoreArgs) -> anyhow::Result<Outcome> {
    check_into(&args.into)?;
    check_outputs(
        &[Output::new(&args.out, "--out", &GRADED_OUTPUT)],
        &[
            Named::new(&args.router, "--router"),
            Named::new(&args.results, "--results"),
        ],
    )?;
    let prompts = crate::router::score(&ScoreOptions {
        router: args.router,
        results: args.results,
        out: args.out.clone(),
        into: args.into,
        prompt_col: args.prompt_col,
        slice_col: args.slice_col,
    })?;
    println(&format!("scored {prompts} prompts: {}", args.out.display()))?;
    Ok(Outcome::Passed)
}

/// An external router's scores, joined by id into the results.
fn join(args: RouterJoinArgs) -> anyhow::Result<Outcome> {
    check_into(&args.into)?;
    check_outputs(
        &[Output::new(&args.out, "--out", &GRADED_OUTPUT)],
        &[
            Named::new(&args.results, "--results"),
            Named::new(&args.scores, "--scores"),
        ],
    )?;
    let rows = crate::router::join(&JoinOptions {
        results: args.results,
        scores: args.scores.clone(),
        scores_col: args.scores_col,
        into: args.into.clone(),
        out: args.out.clone(),
        slice_col: args.slice_col,
    })?;
    println(&format!(
        "joined {rows} scores from {} into \"{}\": {}",
        args.scores.display(),
        args.into,
        args.out.display()
    ))?;
    Ok(Outcome::Passed)
}
