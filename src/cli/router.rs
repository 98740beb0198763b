//! `routeval router train` and `routeval router score`.

use std::io::Write;

use anyhow::bail;

use crate::evaluate::{ScoredOutcome, routing_quality};
use crate::exit_codes::Outcome;
use crate::import::{read_scores, score_of};
use crate::router::{
    Router, Training, cross_fit, featurise, labelled_prompts, stored_score, with_scores,
};
use crate::schema::{Column, ColumnNames, ReadOptions, read_graded, write_graded_parquet};

use super::args::{RouterCommand, RouterJoinArgs, RouterScoreArgs, RouterTrainArgs};

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
    }
}

/// Refuses an `--into` that would overwrite a column of the table other than
/// its score.
fn check_into(into: &str) -> anyhow::Result<()> {
    match Column::from_name(into) {
        Some(column) if column != Column::Score => bail!(
            "--into: \"{into}\" is a column of the graded-results table; name `score` or a new column"
        ),
        _ => Ok(()),
    }
}

fn train(args: RouterTrainArgs) -> anyhow::Result<Outcome> {
    check_into(&args.into)?;
    if args.folds < 2 {
        bail!("--folds must be at least 2, got {}", args.folds);
    }
    let table = read_graded(&args.results, &read_options(&args.slice_col))?;
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
    router.save(&args.out)?;
    if let Some(scored) = &args.scored_out {
        let scores: Vec<f64> = scores.iter().copied().map(stored_score).collect();
        write_graded_parquet(&with_scores(table, &scores, &args.into), scored)?;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "trained on {} prompts; model: {}",
        prompts.len(),
        args.out.display()
    );
    if let Some(quality) = quality {
        let _ = writeln!(
            stdout,
            "cross-fitted ({} folds) APGR {:.3}",
            args.folds, quality.apgr
        );
    }
    Ok(Outcome::Passed)
}

fn score(args: RouterScoreArgs) -> anyhow::Result<Outcome> {
    check_into(&args.into)?;
    let router = Router::load(&args.router)?;
    let table = read_graded(&args.results, &read_options(&args.slice_col))?;
    let prompts = labelled_prompts(&table, &args.prompt_col)?;
    let scores: Vec<f64> = prompts
        .iter()
        .map(|prompt| stored_score(router.score(&featurise(&prompt.prompt, &prompt.slice))))
        .collect();
    write_graded_parquet(&with_scores(table, &scores, &args.into), &args.out)?;
    let _ = writeln!(
        std::io::stdout(),
        "scored {} prompts: {}",
        prompts.len(),
        args.out.display()
    );
    Ok(Outcome::Passed)
}

/// An external router's scores, joined by id into the results.
fn join(args: RouterJoinArgs) -> anyhow::Result<Outcome> {
    check_into(&args.into)?;
    let table = read_graded(&args.results, &read_options(&args.slice_col))?;
    let by_id = read_scores(&args.scores, &args.scores_col)?;
    let mut scores = Vec::with_capacity(table.num_rows());
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            scores.push(score_of(&by_id, &args.scores, batch.id.value(index))?);
        }
    }
    let rows = scores.len();
    write_graded_parquet(&with_scores(table, &scores, &args.into), &args.out)?;
    let _ = writeln!(
        std::io::stdout(),
        "joined {rows} scores from {} into \"{}\": {}",
        args.scores.display(),
        args.into,
        args.out.display()
    );
    Ok(Outcome::Passed)
}
