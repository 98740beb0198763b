//! `routeval router train` and `routeval router score`.

use std::path::Path;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::atomic::{Named, Output, check_outputs, commit_all};
use crate::evaluate::{ScoredOutcome, routing_quality};
use crate::exit_codes::Outcome;
use crate::import::{read_scores, score_of};
use crate::router::{
    ROUTER_OUTPUT, Router, Training, cross_fit, featurise, labelled_prompts, stored_score,
    with_scores,
};
use crate::schema::{
    Column, ColumnNames, GRADED_OUTPUT, GradedTable, ReadOptions, read_graded,
    stage_graded_parquet, tiers_in_metadata, write_graded_parquet,
};

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

fn read_options(slice_col: &str) -> ReadOptions {
    ReadOptions {
        names: ColumnNames::new("score", slice_col),
        carry_extra: true,
        details: true,
        score_optional: true,
        carry_read_only: false,
    }
}

/// The graded results at `path`; a file naming its tiers in its metadata
/// is read with them, and keeps them when written back.
fn read_results(path: &Path, slice_col: &str) -> anyhow::Result<GradedTable> {
    let tiers = tiers_in_metadata(path)?;
    let mut options = read_options(slice_col);
    if let Some(tiers) = &tiers {
        options.names = tiers.column_names(options.names);
    }
    let mut table = read_graded(path, &options)?;
    table.tiers = tiers;
    Ok(table)
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
    let table = read_results(&args.results, &args.slice_col)?;
    let prompts = labelled_prompts(&table, &args.prompt_col)?;
    let training = Training {
        seed: args.seed,
        ..Training::default()
    };
    let (scores, router) = cross_fit(&prompts, args.folds, &training);
    let mut outcomes = Vec::with_capacity(prompts.len());
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            outcomes.push((batch.small_ok.value(index), batch.large_ok.value(index)));
        }
    }
    let quality = routing_quality(
        &scores
            .iter()
            .zip(&outcomes)
            .map(|(&score, &(small_ok, large_ok))| ScoredOutcome {
                score: f64::from(score),
                small_ok,
                large_ok,
            })
            .collect::<Vec<_>>(),
    );
    // Both outputs or neither: a scored table whose model was not written
    // (or the other way round) would not match.
    let mut staged = vec![router.stage(&args.out)?];
    if let Some(scored) = &args.scored_out {
        let scores: Vec<f64> = scores.iter().copied().map(stored_score).collect();
        staged.push(
            stage_graded_parquet(&with_scores(table, &scores, &args.into), scored)
                .with_context(|| format!("{}: cannot write (--scored-out)", scored.display()))?,
        );
    }
    commit_all(staged)?;
    println(&format!(
        "trained on {} prompts; model: {}",
        prompts.len(),
        args.out.display()
    ))?;
    if let Some(quality) = quality {
        println(&format!(
            "cross-fitted ({} folds) APGR {:.3}",
            args.folds, quality.apgr
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
    let router = Router::load(&args.router)?;
    let table = read_results(&args.results, &args.slice_col)?;
    let prompts = labelled_prompts(&table, &args.prompt_col)?;
    let scores: Vec<f64> = prompts
        .iter()
        .map(|prompt| stored_score(router.score(&featurise(&prompt.prompt, &prompt.slice))))
        .collect();
    write_graded_parquet(&with_scores(table, &scores, &args.into), &args.out)?;
    println(&format!(
        "scored {} prompts: {}",
        prompts.len(),
        args.out.display()
    ))?;
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
    let table = read_results(&args.results, &args.slice_col)?;
    let by_id = read_scores(&args.scores, &args.scores_col)?;
    let mut scores = Vec::with_capacity(table.num_rows());
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            scores.push(score_of(&by_id, &args.scores, batch.id.value(index))?);
        }
    }
    let rows = scores.len();
    write_graded_parquet(&with_scores(table, &scores, &args.into), &args.out)?;
    println(&format!(
        "joined {rows} scores from {} into \"{}\": {}",
        args.scores.display(),
        args.into,
        args.out.display()
    ))?;
    Ok(Outcome::Passed)
}
