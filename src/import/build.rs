//! Imported rows to a graded-results table, with scores.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::bail;
use arrow::array::{BooleanArray, Float64Array, StringArray};
use arrow::datatypes::{DataType, Field};

use crate::router_model::{Folds, LabelledPrompt, Outcome, Training, cross_fit, stored_score};
use crate::schema::{GradedBatch, GradedTable, Present, read_scores, score_of};

/// One imported prompt and both tiers' outcomes.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedRow {
    pub id: String,
    pub slice: String,
    pub prompt: String,
    pub small_ok: bool,
    pub large_ok: bool,
    pub cost_small: f64,
    pub cost_large: f64,
}

impl ImportedRow {
    /// The row as the router learns from it.
    pub fn labelled(&self) -> LabelledPrompt {
        LabelledPrompt {
            id: self.id.clone(),
            slice: self.slice.clone(),
            prompt: self.prompt.clone(),
            outcome: Outcome {
                small_ok: self.small_ok,
                large_ok: self.large_ok,
            },
        }
    }
}

/// Where the imported table's scores come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ScoreSource {
    /// The built-in router, cross-fitted over the imported prompts.
    Router { folds: Folds },
    /// A column of another graded-results or plain table, joined by `id`.
    Join { path: PathBuf, column: String },
}

fn joined_scores(rows: &[ImportedRow], path: &Path, column: &str) -> anyhow::Result<Vec<f64>> {
    let scores = read_scores(path, column)?;
    rows.iter()
        .map(|row| score_of(&scores, path, &row.id))
        .collect()
}

/// The table, scored, with the prompt carried as `prompt` and the models
/// recorded as `small_model` and `large_model`.
pub fn build_table(
    rows: Vec<ImportedRow>,
    small_model: &str,
    large_model: &str,
    scores: &ScoreSource,
    out: &Path,
) -> anyhow::Result<GradedTable> {
    if rows.is_empty() {
        bail!("the import found no rows");
    }
    let scores: Vec<f64> = match scores {
        ScoreSource::Router { folds } => {
            let prompts: Vec<LabelledPrompt> = rows.iter().map(ImportedRow::labelled).collect();
            cross_fit(&prompts, folds.get(), &Training::default())
                .0
                .into_iter()
                .map(stored_score)
                .collect()
        }
        ScoreSource::Join { path, column } => joined_scores(&rows, path, column)?,
    };
    let n = rows.len();
    let text = |value: &str| StringArray::from(vec![value; n]);
    let batch = GradedBatch {
        first_row: 0,
        lines: None,
        id: StringArray::from_iter_values(rows.iter().map(|row| row.id.as_str())),
        slice: StringArray::from_iter_values(rows.iter().map(|row| row.slice.as_str())),
        score: Float64Array::from(scores),
        small_ok: BooleanArray::from(rows.iter().map(|row| row.small_ok).collect::<Vec<_>>()),
        large_ok: BooleanArray::from(rows.iter().map(|row| row.large_ok).collect::<Vec<_>>()),
        cost_small: Float64Array::from_iter_values(rows.iter().map(|row| row.cost_small)),
        cost_large: Float64Array::from_iter_values(rows.iter().map(|row| row.cost_large)),
        cost_verifier: Float64Array::from(vec![0.0; n]),
        cost_router: Float64Array::from(vec![0.0; n]),
        latencies: Default::default(),
        models: [Some(text(small_model)), Some(text(large_model)), None],
        audited: Default::default(),
        extra: vec![(
            Arc::new(Field::new("prompt", DataType::Utf8, false)),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|row| row.prompt.as_str()),
            )),
        )],
    };
    Ok(GradedTable {
        path: out.to_owned(),
        batches: vec![batch],
        present: Present {
            latencies: [false; 6],
            audited: [false; 2],
            models: [true, true, false],
        },
        tiers: None,
    })
}
