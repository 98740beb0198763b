//! `routeval router`: the built-in learned router trained on graded results
//! (its model, [`crate::router_model`], fitted on a training part and
//! written with its own scores of the calibration part),
//! prompts scored with a trained model, and an external router's scores
//! joined into the results by id. Each writes the graded-results table with
//! the scores in a column of the caller's choosing.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::atomic::{Staged, commit_all};
use crate::policy::{ScoredOutcome, routing_quality};
use crate::router_model::{
    Folds, Router, Training, featurise, labelled_prompts, split_fit, stored_score, with_scores,
};
use crate::schema::{
    ColumnNames, GradedTable, ReadOptions, ScoreColumn, read_graded, read_scores, score_of,
    stage_graded_parquet, tiers_in_metadata, write_graded_parquet,
};
use crate::units::Fraction;

/// Training: each bounded value checked when it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainOptions {
    pub results: PathBuf,
    /// Where the model trained on every row goes.
    pub out: PathBuf,
    /// Where the results with out-of-fold scores go, if anywhere.
    pub scored_out: Option<PathBuf>,
    pub into: ScoreColumn,
    /// The share of prompts kept out of training.
    pub calibration_share: Fraction,
    pub folds: Folds,
    pub seed: u64,
    pub prompt_col: String,
    pub slice_col: String,
}

/// What training did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trained {
    /// Rows of the training part.
    pub training: usize,
    /// Rows of the calibration part.
    pub calibration: usize,
    /// The deployed model's APGR on the calibration part, where the tiers
    /// differ at all.
    pub apgr: Option<f64>,
    /// The cross-fitted APGR on the training part, likewise.
    pub cross_fitted_apgr: Option<f64>,
}

/// Fits the router on the training part, scores the calibration part with
/// it, and writes the model (and the scored calibration part) together:
/// both or neither.
pub fn train(options: &TrainOptions) -> anyhow::Result<Trained> {
    let table = read_results(&options.results, &options.slice_col)?;
    let prompts = labelled_prompts(&table, &options.prompt_col)?;
    let training = Training {
        seed: options.seed,
        ..Training::default()
    };
    let split = split_fit(
        &prompts,
        options.calibration_share.get(),
        options.folds.get(),
        &training,
    );
    if split.training.is_empty() || split.calibration.is_empty() {
        anyhow::bail!(
            "{}: --calibration-share {} leaves {} of {} prompts to train on and {} to calibrate on; both parts need prompts",
            options.results.display(),
            options.calibration_share,
            split.training.len(),
            prompts.len(),
            split.calibration.len()
        );
    }
    let apgr_of = |indices: &[usize], scores: &[f32]| {
        routing_quality(
            &indices
                .iter()
                .zip(scores)
                .map(|(&index, &score)| ScoredOutcome {
                    score: f64::from(score),
                    small_ok: prompts[index].outcome.small_ok,
                    large_ok: prompts[index].outcome.large_ok,
                })
                .collect::<Vec<_>>(),
        )
        .map(|quality| quality.apgr)
    };
    let trained = Trained {
        training: split.training.len(),
        calibration: split.calibration.len(),
        apgr: apgr_of(&split.calibration, &split.calibration_scores),
        cross_fitted_apgr: split
            .cross_fitted
            .as_ref()
            .and_then(|scores| apgr_of(&split.training, scores)),
    };
    // Both outputs or neither: a scored table whose model was not written
    // (or the other way round) would not match.
    let mut staged: Vec<Staged> = vec![split.router.stage(&options.out)?];
    if let Some(scored) = &options.scored_out {
        let mut keep = vec![false; prompts.len()];
        for &index in &split.calibration {
            keep[index] = true;
        }
        let scores: Vec<f64> = split
            .calibration_scores
            .iter()
            .copied()
            .map(stored_score)
            .collect();
        let calibration_part = with_scores(table.with_rows(&keep), &scores, options.into.as_str());
        staged.push(
            stage_graded_parquet(&calibration_part, scored)
                .with_context(|| format!("{}: cannot write (--scored-out)", scored.display()))?,
        );
    }
    commit_all(staged)?;
    Ok(trained)
}

/// Scoring with a trained model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreOptions {
    pub router: PathBuf,
    pub results: PathBuf,
    pub out: PathBuf,
    pub into: ScoreColumn,
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
    write_graded_parquet(
        &with_scores(table, &scores, options.into.as_str()),
        &options.out,
    )?;
    Ok(prompts.len())
}

/// An external router's scores joined by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinOptions {
    pub results: PathBuf,
    pub scores: PathBuf,
    pub scores_col: String,
    pub into: ScoreColumn,
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
    write_graded_parquet(
        &with_scores(table, &scores, options.into.as_str()),
        &options.out,
    )?;
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
