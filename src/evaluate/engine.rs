//! `routeval evaluate` as a whole: the results' scores against a random
//! router and the oracle, as a versioned document, and its table.

use std::path::PathBuf;

use anyhow::bail;

use crate::policy::{ScoredOutcome, oracle_scores, random_scores, routing_quality};
use crate::schema::{
    ColumnNames, EVALUATION_SCHEMA_VERSION, EvaluationDocument, InputFile, ReadOptions,
    read_graded, tiers_in_metadata,
};

/// What to evaluate: the graded results, their score and slice columns,
/// and the seed of the random router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluateOptions {
    pub results: PathBuf,
    pub seed: u64,
    pub score_col: String,
    pub slice_col: String,
}

/// APGR and CPT of the file's scores, a random router's and the oracle's.
pub fn evaluate(options: &EvaluateOptions) -> anyhow::Result<EvaluationDocument> {
    // A router ranks requests between the cheapest and the strongest tier:
    // of a file with more tiers, those two are measured.
    let names = ColumnNames::new(options.score_col.clone(), options.slice_col.clone());
    let names = match tiers_in_metadata(&options.results)? {
        Some(tiers) => tiers.column_names(names),
        None => names,
    };
    let read = ReadOptions::of(names);
    let table = read_graded(&options.results, &read)?;
    let mut outcomes = Vec::with_capacity(table.num_rows());
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            outcomes.push(ScoredOutcome {
                score: batch.score.value(index),
                small_ok: batch.small_ok.value(index),
                large_ok: batch.large_ok.value(index),
            });
        }
    }
    let Some(router) = routing_quality(&outcomes) else {
        bail!(
            "{}: both tiers are acceptable on the same number of prompts, so there is no gap to recover",
            options.results.display()
        );
    };
    Ok(EvaluationDocument {
        schema_version: EVALUATION_SCHEMA_VERSION,
        results: InputFile::of_file(&options.results, outcomes.len() as u64)?,
        router,
        random: routing_quality(&random_scores(&outcomes, options.seed)).expect("the same gap"),
        oracle: routing_quality(&oracle_scores(&outcomes)).expect("the same gap"),
    })
}

/// The three routers as a table.
pub fn render(document: &EvaluationDocument) -> String {
    let share = |value: Option<f64>| {
        value.map_or_else(|| "-".to_owned(), |value| format!("{:.1}%", value * 100.0))
    };
    let rows = [
        ("scores in the file", &document.router),
        ("random", &document.random),
        ("oracle", &document.oracle),
    ]
    .into_iter()
    .map(|(name, quality)| {
        vec![
            name.to_owned(),
            format!("{:.3}", quality.apgr),
            share(quality.cpt50),
            share(quality.cpt80),
        ]
    });
    let table = crate::terminal::table(["router", "APGR", "CPT(50%)", "CPT(80%)"], rows);
    format!("{table}\n")
}
