//! `routeval router`: the built-in learned router trained on graded results
//! (its model, [`crate::router_model`], written with cross-fitted scores),
//! prompts scored with a trained model, and an external router's scores
//! joined into the results by id. Each writes the graded-results table with
//! the scores in a column of the caller's choosing.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::atomic::{Staged, commit_all};
use crate::policy::{ScoredOutcome, routing_quality};
use crate::router_model::{
    Router, Training, cross_fit, featurise, labelled_prompts, stored_score, with_scores,
};
use crate::schema::{
    ColumnNames, GradedTable, ReadOptions, read_graded, read_scores, score_of,
    stage_graded_parquet, tiers_in_metadata, write_graded_parquet,
};

/// Training, already checked: `folds` in 2..=100, `into` a column the
/// table may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainOptions {
    pub results: PathBuf,
    /// Where the model trained on every row goes.
    pub out: PathBuf,
    /// Where the results with out-of-fold scores go, if anywhere.
    pub scored_out: Option<PathBuf>,
    pub into: String,
    pub folds: usize,
    pub seed: u64,
    pub prompt_col: String,
    pub slice_col: String,
}

/// What training did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trained {
    pub prompts: usize,
    /// The cross-fitted scores' APGR, where the tiers differ at all.
    pub apgr: Option<f64>,
}

/// Fits the router, cross-fits the scores, and writes the model (and the
/// scored results) together: both or neither.
pub fn train(options: &TrainOptions) -> anyhow::Result<Trained> {
    let table = read_results(&options.results, &options.slice_col)?;
    let prompts = labelled_prompts(&table, &options.prompt_col)?;
    let training = Training {
        seed: options.seed,
        ..Training::default()
    };
    let (scores, router) = cross_fit(&prompts, options.folds, &training);
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
    let mut staged: Vec<Staged> = vec![router.stage(&options.out)?];
    if let Some(scored) = &options.scored_out {
        let scores: Vec<f64> = scores.iter().copied().map(stored_score).collect();
        staged.push(
            stage_graded_parquet(&with_scores(table, &scores, &options.into), scored)
                .with_context(|| format!("{}: cannot write (--scored-out)", scored.display()))?,
        );
    }
    commit_all(staged)?;
    Ok(Trained {
        prompts: prompts.len(),
        apgr: quality.map(|quality| quality.apgr),
    })
}

/// Scoring with a trained model, already checked: `into` a column the
/// table may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreOptions {
    pub router: PathBuf,
    pub results: PathBuf,
    pub out: PathBuf,
    pub into: String,
    pub prompt_col: String,
    pub slice_col: String,
}

/// Scores every prompt with the model at `options.router`; returns how many.
pub fn score(options: &ScoreOptions) -> anyhow::Result<usize> {
    let router = Router::load(&options.router)?;
    let table = read_results(&options.results, &options.slice_col)?;
    let prompts = labelled_prompts(&table, &options.prompt_col)?;
    let scores: Vec<f64> = prompts
        .iter()
        .map(|prompt| stored_score(router.score(&featurise(&prompt.prompt, &prompt.slice))))
        .collect();
    write_graded_parquet(&with_scores(table, &scores, &options.into), &options.out)?;
    Ok(prompts.len())
}

/// An external router's scores joined by id, already checked: `into` a
/// column the table may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinOptions {
    pub results: PathBuf,
    pub scores: PathBuf,
    pub scores_col: String,
    pub into: String,
    pub out: PathBuf,
    pub slice_col: String,
}

/// Joins a score to every row by its id; returns how many rows.
pub fn join(options: &JoinOptions) -> anyhow::Result<usize> {
    let table = read_results(&options.results, &options.slice_col)?;
    let by_id = read_scores(&options.scores, &options.scores_col)?;
    let mut scores = Vec::with_capacity(table.num_rows());
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            scores.push(score_of(&by_id, &options.scores, batch.id.value(index))?);
        }
    }
    let rows = scores.len();
    write_graded_parquet(&with_scores(table, &scores, &options.into), &options.out)?;
    Ok(rows)
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
