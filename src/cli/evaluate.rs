//! `routeval evaluate`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::evaluate::{
    RoutingQuality, ScoredOutcome, oracle_scores, random_scores, routing_quality,
};
use crate::exit_codes::Outcome;
use crate::schema::InputFile;
use crate::schema::{ColumnNames, ReadOptions, read_graded, tiers_in_metadata};

use super::print::print;

#[derive(Debug, Args)]
pub struct EvaluateArgs {
    /// Graded results with router scores.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Print the metrics as JSON.
    #[arg(long)]
    pub json: bool,

    /// Seed of the random router.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The file's name for the score column.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

pub const EVALUATION_SCHEMA_VERSION: u32 = 1;

/// `routeval evaluate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationDocument {
    pub schema_version: u32,
    pub results: InputFile,
    pub router: RoutingQuality,
    pub random: RoutingQuality,
    pub oracle: RoutingQuality,
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<Outcome> {
    // A router ranks requests between the cheapest and the strongest tier:
    // of a file with more tiers, those two are measured.
    let names = ColumnNames::new(args.score_col.clone(), args.slice_col.clone());
    let names = match tiers_in_metadata(&args.results)? {
        Some(tiers) => tiers.column_names(names),
        None => names,
    };
    let read = ReadOptions {
        names,
        carry_extra: false,
        details: false,
        score_optional: false,
        carry_read_only: false,
    };
    let table = read_graded(&args.results, &read)?;
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
            args.results.display()
        );
    };
    let bytes = std::fs::read(&args.results)
        .with_context(|| format!("{}: cannot read", args.results.display()))?;
    let document = EvaluationDocument {
        schema_version: EVALUATION_SCHEMA_VERSION,
        results: InputFile {
            path: args.results.display().to_string(),
            sha256: sha256_hex(&bytes),
            rows: outcomes.len() as u64,
        },
        router,
        random: routing_quality(&random_scores(&outcomes, args.seed)).expect("the same gap"),
        oracle: routing_quality(&oracle_scores(&outcomes)).expect("the same gap"),
    };
    let printed = if args.json {
        serde_json::to_string_pretty(&document).context("cannot encode the evaluation")? + "\n"
    } else {
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
    };
    print(&printed)?;
    Ok(Outcome::Passed)
}
