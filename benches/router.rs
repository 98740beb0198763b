//! The built-in router on RouteLLM's data, read from `$ROUTEVAL_DATA/routellm`:
//! the time to train on the 14,042 MMLU prompts (one fit on every row, and
//! the five-fold cross-fit plus the full fit that `routeval router train`
//! does), and the cross-fitted APGR on MMLU, GSM8K and MT-Bench of the
//! router (the gain of escalating) against its peer that ranks by the small
//! tier's failure alone.
//!
//! `ROUTEVAL_DATA=../shared/data cargo bench --bench router`

use std::path::{Path, PathBuf};
use std::time::Instant;

use routeval::import::{ImportedRow, Prices, mt_bench, routellm_gsm8k, routellm_mmlu};
use routeval::policy::{ScoredOutcome, routing_quality};
use routeval::router_model::{
    LabelledPrompt, Router, Training, cross_fit, featurise, small_failure_only, split_fit,
};

const SMALL: &str = "mistralai/Mixtral-8x7B-Instruct-v0.1";
const LARGE: &str = "gpt-4-1106-preview";

fn main() {
    let Some(data) = std::env::var_os("ROUTEVAL_DATA") else {
        println!("skipped: set ROUTEVAL_DATA to the shared data directory");
        return;
    };
    let routellm = PathBuf::from(data).join("routellm");
    let free = Prices::Flat {
        small: 0.0,
        large: 0.0,
    };
    let mmlu = routellm_mmlu(&routellm.join("mmlu"), SMALL, LARGE, &free).unwrap();
    training_time(&mmlu);

    let rubrics =
        routeval::rubric::load_rubrics(&Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics"))
            .unwrap();
    let gsm8k = routellm_gsm8k(
        &routellm.join("gsm8k/gsm8k_responses.csv"),
        &routellm.join("gsm8k/test.jsonl"),
        &rubrics["gsm8k"],
        SMALL,
        LARGE,
        &free,
    )
    .unwrap();
    let mt_bench_at = |pass_score: f64| {
        mt_bench(
            &routellm.join("mt_bench/judgements.jsonl"),
            &routellm.join("mt_bench/question.jsonl"),
            SMALL,
            LARGE,
            pass_score,
            &free,
        )
        .unwrap()
    };
    println!("cross-fitted APGR (5 folds): the router | ranking by the small tier's failure alone");
    for (name, rows) in [
        ("MMLU", mmlu),
        ("GSM8K", gsm8k),
        ("MT-Bench, pass at 8", mt_bench_at(8.0)),
    ] {
        routing_quality_of(name, &rows);
    }
}

fn training_time(rows: &[ImportedRow]) {
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
        .map(|(features, prompt)| (features, prompt.outcome))
        .collect();
    let start = Instant::now();
    let _ = Router::train(&examples, &Training::default());
    let one_fit = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let _ = cross_fit(&prompts, 5, &Training::default());
    let cross_fitted = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let _ = split_fit(&prompts, 0.5, 5, &Training::default());
    let split = start.elapsed().as_secs_f64();
    println!(
        "{} MMLU prompts: featurising {featurised:.2} s, one fit {one_fit:.2} s, five-fold cross-fit plus the full fit {cross_fitted:.2} s, `router train` (fit on half, score the other half, cross-fit the half) {split:.2} s",
        prompts.len()
    );
}

fn routing_quality_of(name: &str, rows: &[ImportedRow]) {
    let prompts: Vec<LabelledPrompt> = rows.iter().map(ImportedRow::labelled).collect();
    let apgr = |training_prompts: &[LabelledPrompt]| {
        let (scores, _) = cross_fit(training_prompts, 5, &Training::default());
        let outcomes: Vec<ScoredOutcome> = prompts
            .iter()
            .zip(&scores)
            .map(|(prompt, &score)| ScoredOutcome {
                score: f64::from(score),
                small_ok: prompt.outcome.small_ok,
                large_ok: prompt.outcome.large_ok,
            })
            .collect();
        routing_quality(&outcomes).expect("both tiers differ").apgr
    };
    let small_only = small_failure_only(&prompts);
    println!(
        "  {name} ({} prompts): {:.3} | {:.3}",
        prompts.len(),
        apgr(&prompts),
        apgr(&small_only)
    );
}
