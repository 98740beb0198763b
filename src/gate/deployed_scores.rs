//! What a predictive candidate's certificate rests on: its score column must
//! be the pinned router's own scores, row for row, of prompts that router
//! was not fitted on. Learn-then-Test holds for a fixed scorer on rows it
//! never saw; cross-fitted scores, another model's, or the deployed model's
//! scores of its own training prompts certify a scorer serve does not run.

use std::path::Path;

use crate::router_model::{Router, featurise, labelled_prompts, stored_score};
use crate::schema::{ReadOptions, read_graded};

#[derive(Debug, thiserror::Error)]
pub enum DeployedScoreError {
    #[error(
        "--router {router}: a router file from before routeval kept the prompts it was fitted on, so no certificate can rest on its scores; train it again with `routeval router train`"
    )]
    NoTrainingSet { router: String },
    #[error(
        "{results}: {location} (id {id:?}): its prompt is one --router {router} was fitted on; certify on the calibration part `router train --scored-out` writes"
    )]
    Trained {
        results: String,
        location: String,
        id: String,
        router: String,
    },
    #[error(
        "{results}: {location} (id {id:?}), column {column:?}: score {found} is not --router {router}'s {expected} for its prompt; the thresholds would be certified on another scorer (cross-fitted or another model's scores): score with `router train --scored-out` or `router score`"
    )]
    NotDeployed {
        results: String,
        location: String,
        id: String,
        column: String,
        router: String,
        found: f64,
        expected: f64,
    },
}

/// Checks every row of `results`' column `column` against `router` (read
/// from `router_path`), and returns how many rows it checked.
pub fn check_deployed_scores(
    results: &Path,
    read: &ReadOptions,
    prompt_column: &str,
    column: &str,
    router: &Router,
    router_path: &Path,
) -> anyhow::Result<usize> {
    let Some(trained_on) = &router.trained_on else {
        return Err(DeployedScoreError::NoTrainingSet {
            router: router_path.display().to_string(),
        }
        .into());
    };
    // The score column may be the table's `score` or one carried beside it
    // (a cascade's verifier score keeps `score`), so read the columns as the
    // file names them and pick it out.
    let mut read = read.clone();
    read.carry_extra = true;
    read.details = false;
    read.score_optional = true;
    let table = read_graded(results, &read)?;
    let prompts = labelled_prompts(&table, prompt_column)?;
    let mut row = 0;
    for batch in &table.batches {
        let scores = if column == read.names.score {
            batch.score.clone()
        } else {
            let carried = batch
                .extra
                .iter()
                .find(|(field, _)| field.name() == column)
                .map(|(_, array)| array)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: no score column {column:?} (the candidate's policy score)",
                        results.display()
                    )
                })?;
            arrow::compute::cast(carried, &arrow::datatypes::DataType::Float64)?
                .as_any()
                .downcast_ref::<arrow::array::Float64Array>()
                .expect("cast to Float64")
                .clone()
        };
        for index in 0..batch.num_rows() {
            let prompt = &prompts[row];
            row += 1;
            let location = || batch.location(index).to_string();
            if trained_on.contains(&prompt.prompt) {
                return Err(DeployedScoreError::Trained {
                    results: results.display().to_string(),
                    location: location(),
                    id: prompt.id.clone(),
                    router: router_path.display().to_string(),
                }
                .into());
            }
            let expected = stored_score(router.score(&featurise(&prompt.prompt, &prompt.slice)));
            let found = if arrow::array::Array::is_null(&scores, index) {
                f64::NAN
            } else {
                scores.value(index)
            };
            if found != expected {
                return Err(DeployedScoreError::NotDeployed {
                    results: results.display().to_string(),
                    location: location(),
                    id: prompt.id.clone(),
                    column: column.to_owned(),
                    router: router_path.display().to_string(),
                    found,
                    expected,
                }
                .into());
            }
        }
    }
    Ok(row)
}
