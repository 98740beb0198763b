//! The router on graded-results tables: prompts from a carried text column,
//! scores written back into the table's `score` column.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field};

use crate::schema::{Column, GradedTable, RowLocation};

use super::crossfit::LabelledPrompt;
use super::model::Outcome;

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("{path}: missing column \"{column}\" with the prompts (--prompt-col)")]
    Missing { path: String, column: String },
    #[error("{path}: {location}, column \"{column}\": missing prompt")]
    Null {
        path: String,
        location: RowLocation,
        column: String,
    },
}

/// The table's rows as labelled prompts.
pub fn labelled_prompts(
    table: &GradedTable,
    prompt_column: &str,
) -> Result<Vec<LabelledPrompt>, PromptError> {
    let path = table.path.display().to_string();
    let mut prompts = Vec::with_capacity(table.num_rows());
    for batch in &table.batches {
        let column = batch
            .extra
            .iter()
            .find(|(field, _)| field.name() == prompt_column)
            .map(|(_, array)| array)
            .ok_or_else(|| PromptError::Missing {
                path: path.clone(),
                column: prompt_column.to_owned(),
            })?;
        let text: StringArray = match column.data_type() {
            DataType::Utf8 => column.as_string::<i32>().clone(),
            _ => cast(column, &DataType::Utf8)
                .map_err(|_| PromptError::Missing {
                    path: path.clone(),
                    column: prompt_column.to_owned(),
                })?
                .as_string::<i32>()
                .clone(),
        };
        for index in 0..batch.num_rows() {
            if text.is_null(index) {
                return Err(PromptError::Null {
                    path: path.clone(),
                    location: batch.location(index),
                    column: prompt_column.to_owned(),
                });
            }
            prompts.push(LabelledPrompt {
                id: batch.id.value(index).to_owned(),
                slice: batch.slice.value(index).to_owned(),
                prompt: text.value(index).to_owned(),
                outcome: Outcome {
                    small_ok: batch.small_ok.value(index),
                    large_ok: batch.large_ok.value(index),
                },
            });
        }
    }
    Ok(prompts)
}

/// The table with `scores` (in row order) in its column `column`: the
/// table's `score`, or a carried column, added or replaced.
pub fn with_scores(mut table: GradedTable, scores: &[f64], column: &str) -> GradedTable {
    assert_eq!(scores.len(), table.num_rows(), "one score per row");
    let mut offset = 0;
    for batch in &mut table.batches {
        let rows = batch.num_rows();
        let values = Float64Array::from_iter_values(scores[offset..offset + rows].iter().copied());
        offset += rows;
        if column == Column::Score.name() {
            batch.score = values;
            continue;
        }
        let array: ArrayRef = Arc::new(values);
        match batch
            .extra
            .iter_mut()
            .find(|(field, _)| field.name() == column)
        {
            Some((field, carried)) => {
                *field = Arc::new(Field::new(column, DataType::Float64, false));
                *carried = array;
            }
            None => batch.extra.push((
                Arc::new(Field::new(column, DataType::Float64, false)),
                array,
            )),
        }
    }
    table
}
