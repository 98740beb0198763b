//! A graded run's rows as the graded-results table: the two-tier columns
//! for the cheapest and the strongest tier, each middle tier's under its
//! name, and the tiers in the table's metadata when there are more than two.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, StringArray};
use arrow::datatypes::{DataType, Field};

use crate::schema::{GradedBatch, GradedTable, Present, Tiers};

/// One prompt, graded.
pub(super) struct GradedPrompt {
    pub(super) id: String,
    pub(super) slice: String,
    pub(super) prompt: String,
    /// Per non-final stage (the first from the verifier or self-consistency).
    pub(super) scores: Vec<Option<f64>>,
    /// Per tier.
    pub(super) ok: Vec<bool>,
    pub(super) costs: Vec<f64>,
    /// Per non-final stage.
    pub(super) verifier_costs: Vec<f64>,
    /// Per tier: total and first-token milliseconds.
    pub(super) latencies: Vec<(Option<f64>, Option<f64>)>,
    pub(super) verifier_ms: Option<f64>,
    pub(super) models: Vec<Option<String>>,
    pub(super) verifier_model: Option<String>,
    pub(super) detail: String,
}

type Carried = Vec<(Arc<Field>, ArrayRef)>;

fn reals(rows: &[GradedPrompt], value: impl Fn(&GradedPrompt) -> f64) -> Float64Array {
    Float64Array::from_iter_values(rows.iter().map(value))
}

fn optional(rows: &[GradedPrompt], value: impl Fn(&GradedPrompt) -> Option<f64>) -> Float64Array {
    Float64Array::from(rows.iter().map(value).collect::<Vec<_>>())
}

fn models(rows: &[GradedPrompt], value: impl Fn(&GradedPrompt) -> Option<String>) -> StringArray {
    StringArray::from(rows.iter().map(value).collect::<Vec<_>>())
}

fn flags(rows: &[GradedPrompt], tier: usize) -> BooleanArray {
    BooleanArray::from(rows.iter().map(|row| row.ok[tier]).collect::<Vec<_>>())
}

fn texts<'a>(rows: &'a [GradedPrompt], value: impl Fn(&'a GradedPrompt) -> &'a str) -> StringArray {
    StringArray::from_iter_values(rows.iter().map(value))
}

/// The columns of the tiers between the first and the last, under their
/// names, then the prompt and what each rubric said.
fn carried_columns(rows: &[GradedPrompt], tiers: &[String]) -> Carried {
    let mut extra: Carried = Vec::new();
    let mut carry = |name: String, data_type: DataType, nullable: bool, array: ArrayRef| {
        extra.push((Arc::new(Field::new(name, data_type, nullable)), array));
    };
    for (tier, name) in tiers.iter().enumerate().take(tiers.len() - 1).skip(1) {
        carry(
            format!("{name}_ok"),
            DataType::Boolean,
            false,
            Arc::new(flags(rows, tier)),
        );
        carry(
            format!("cost_{name}"),
            DataType::Float64,
            false,
            Arc::new(reals(rows, |row| row.costs[tier])),
        );
        carry(
            format!("{name}_ms"),
            DataType::Float64,
            true,
            Arc::new(optional(rows, |row| row.latencies[tier].0)),
        );
        carry(
            format!("{name}_ttft_ms"),
            DataType::Float64,
            true,
            Arc::new(optional(rows, |row| row.latencies[tier].1)),
        );
        carry(
            format!("{name}_model"),
            DataType::Utf8,
            true,
            Arc::new(models(rows, |row| row.models[tier].clone())),
        );
        if rows.iter().any(|row| row.scores[tier].is_some()) {
            carry(
                format!("score_{name}"),
                DataType::Float64,
                false,
                Arc::new(reals(rows, |row| row.scores[tier].unwrap_or(1.0))),
            );
            carry(
                format!("cost_verifier_{name}"),
                DataType::Float64,
                false,
                Arc::new(reals(rows, |row| row.verifier_costs[tier])),
            );
        }
    }
    carry(
        "prompt".to_owned(),
        DataType::Utf8,
        false,
        Arc::new(texts(rows, |row| row.prompt.as_str())),
    );
    carry(
        "detail".to_owned(),
        DataType::Utf8,
        false,
        Arc::new(texts(rows, |row| row.detail.as_str())),
    );
    extra
}

/// The graded-results table of `rows` over `tiers`, to be written at `out`.
pub(super) fn to_table(rows: &[GradedPrompt], tiers: &[String], out: &Path) -> GradedTable {
    let has_verifier = rows.iter().any(|row| row.verifier_model.is_some());
    let last = tiers.len() - 1;
    let batch = GradedBatch {
        first_row: 0,
        lines: None,
        id: texts(rows, |row| row.id.as_str()),
        slice: texts(rows, |row| row.slice.as_str()),
        score: rows.iter().map(|row| row.scores[0]).collect(),
        small_ok: flags(rows, 0),
        large_ok: flags(rows, last),
        cost_small: reals(rows, |row| row.costs[0]),
        cost_large: reals(rows, |row| row.costs[last]),
        cost_verifier: reals(rows, |row| row.verifier_costs[0]),
        cost_router: Float64Array::from(vec![0.0; rows.len()]),
        latencies: [
            Some(optional(rows, |row| row.latencies[0].0)),
            Some(optional(rows, |row| row.latencies[0].1)),
            Some(optional(rows, |row| row.latencies[last].0)),
            Some(optional(rows, |row| row.latencies[last].1)),
            has_verifier.then(|| optional(rows, |row| row.verifier_ms)),
            None,
        ],
        models: [
            Some(models(rows, |row| row.models[0].clone())),
            Some(models(rows, |row| row.models[last].clone())),
            has_verifier.then(|| models(rows, |row| row.verifier_model.clone())),
        ],
        audited: Default::default(),
        extra: carried_columns(rows, tiers),
    };
    let two_tier = tiers == ["small", "large"];
    GradedTable {
        path: out.to_owned(),
        batches: vec![batch],
        present: Present {
            latencies: [true, true, true, true, has_verifier, false],
            models: [true, true, has_verifier],
            audited: [false; 2],
        },
        tiers: (!two_tier).then(|| Tiers::parse(&tiers.join(",")).expect("a run's tiers")),
    }
}
