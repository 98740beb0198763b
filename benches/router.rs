//! Training the built-in router on RouteLLM's 14,042 MMLU prompts, read from
//! `$ROUTEVAL_DATA/routellm/mmlu`: one fit on every row, and the five-fold
//! cross-fit (five more fits) that `routeval router train` does.
//!
//! `ROUTEVAL_DATA=../shared/data cargo bench --bench router`

use std::path::PathBuf;
use std::time::Instant;

use routeval::import::{ImportedRow, Prices, routellm_mmlu};
use routeval::router::{LabelledPrompt, Router, Training, cross_fit, featurise};

fn main() {
    let Some(data) = std::env::var_os("ROUTEVAL_DATA") else {
        println!("skipped: set ROUTEVAL_DATA to the shared data directory");
        return;
    };
    let rows = routellm_mmlu(
        &PathBuf::from(data).join("routellm").join("mmlu"),
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "gpt-4-1106-preview",
        &Prices::Flat {
            small: 0.0,
            large: 0.0,
        },
    )
    .unwrap();
    let prompts: Vec<LabelledPrompt> = rows.iter().map(ImportedRow::labelled).collect();
    let start = Instant::now();
    let features: Vec<_> = prompts
        .iter()
        .map(|prompt| featurise(&prompt.prompt, &prompt.slice))
        .collect();
    let featurised = start.elapsed().as_secs_f64();
    let examples: Vec<_> = features
        .iter()
        .zip(&prompts)
        .map(|(features, prompt)| (features, prompt.small_failed))
        .collect();
    let start = Instant::now();
    let _ = Router::train(&examples, &Training::default());
    let one_fit = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let _ = cross_fit(&prompts, 5, &Training::default());
    let cross_fitted = start.elapsed().as_secs_f64();
    println!(
        "{} MMLU prompts: featurising {featurised:.2} s, one fit {one_fit:.2} s, five-fold cross-fit plus the full fit {cross_fitted:.2} s",
        prompts.len()
    );
}
