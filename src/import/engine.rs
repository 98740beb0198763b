//! One import, as typed options: which source, with which models, prices
//! and scores, into which table; checked, read, scored and written whole.

use std::path::{Path, PathBuf};

use crate::atomic::{Named, Output, check_outputs};
use crate::rubric::Rubric;
use crate::schema::{ColumnNames, GRADED_OUTPUT, ReadOptions, read_graded, write_graded_parquet};
use crate::units::NonNegative;

use super::{
    ImportedRow, Prices, ScoreSource, build_table, mt_bench, routellm_gsm8k, routellm_mmlu,
};

/// A public benchmark's recorded outcomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Benchmark {
    /// RouteLLM's MMLU: a directory of `mmlu_<subject>.csv`.
    RoutellmMmlu { dir: PathBuf },
    /// RouteLLM's GSM8K responses and GSM8K's questions, regraded by `rubric`.
    RoutellmGsm8k {
        responses: PathBuf,
        questions: PathBuf,
        rubric: PathBuf,
    },
    /// MT-Bench judgments: a score at or above `pass_score` is acceptable.
    MtBench {
        judgments: PathBuf,
        questions: PathBuf,
        pass_score: f64,
    },
}

/// Where a benchmark's prices come from.
#[derive(Debug, Clone, PartialEq)]
pub enum PriceSource {
    /// USD per call of each tier.
    Flat {
        small: NonNegative,
        large: NonNegative,
    },
    /// A price file: `[models."NAME"] per_call = USD`.
    File(PathBuf),
}

/// What `routeval import` converts, and where the table goes.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportOptions {
    Benchmark {
        benchmark: Benchmark,
        small_model: String,
        large_model: String,
        prices: PriceSource,
        scores: ScoreSource,
        out: PathBuf,
    },
    /// Any table, its columns named by `names`.
    Generic {
        input: PathBuf,
        names: ColumnNames,
        out: PathBuf,
    },
}

impl ImportOptions {
    pub fn out(&self) -> &Path {
        match self {
            ImportOptions::Benchmark { out, .. } | ImportOptions::Generic { out, .. } => out,
        }
    }

    /// The files the import reads, each with its flag.
    fn inputs(&self) -> Vec<Named<'_>> {
        let ImportOptions::Benchmark {
            benchmark,
            prices,
            scores,
            ..
        } = self
        else {
            let ImportOptions::Generic { input, .. } = self else {
                unreachable!("two kinds of import")
            };
            return vec![Named::new(input, "--input")];
        };
        let mut inputs = match benchmark {
            Benchmark::RoutellmMmlu { dir } => vec![Named::new(dir, "--dir")],
            Benchmark::RoutellmGsm8k {
                responses,
                questions,
                rubric,
            } => vec![
                Named::new(responses, "--responses"),
                Named::new(questions, "--questions"),
                Named::new(rubric, "--rubric"),
            ],
            Benchmark::MtBench {
                judgments,
                questions,
                ..
            } => vec![
                Named::new(judgments, "--judgments"),
                Named::new(questions, "--questions"),
            ],
        };
        if let PriceSource::File(path) = prices {
            inputs.push(Named::new(path, "--prices"));
        }
        if let ScoreSource::Join { path, .. } = scores {
            inputs.push(Named::new(path, "--scores"));
        }
        inputs
    }
}

/// Imports as `options` say and writes the graded-results table; returns
/// its rows.
pub fn import(options: &ImportOptions) -> anyhow::Result<usize> {
    check_outputs(
        &[Output::new(options.out(), "--out", &GRADED_OUTPUT)],
        &options.inputs(),
    )?;
    let table = match options {
        ImportOptions::Generic { input, names, .. } => {
            let read = ReadOptions {
                names: names.clone(),
                carry_extra: true,
                details: true,
                score_optional: true,
                carry_read_only: false,
            };
            read_graded(input, &read)?
        }
        ImportOptions::Benchmark {
            benchmark,
            small_model,
            large_model,
            prices,
            scores,
            out,
        } => {
            let prices = match prices {
                PriceSource::Flat { small, large } => Prices::Flat {
                    small: small.get(),
                    large: large.get(),
                },
                PriceSource::File(path) => Prices::load(path)?,
            };
            let rows = rows(benchmark, small_model, large_model, &prices)?;
            build_table(rows, small_model, large_model, scores, out)?
        }
    };
    write_graded_parquet(&table, options.out())?;
    Ok(table.num_rows())
}

fn rows(
    benchmark: &Benchmark,
    small_model: &str,
    large_model: &str,
    prices: &Prices,
) -> anyhow::Result<Vec<ImportedRow>> {
    match benchmark {
        Benchmark::RoutellmMmlu { dir } => routellm_mmlu(dir, small_model, large_model, prices),
        Benchmark::RoutellmGsm8k {
            responses,
            questions,
            rubric,
        } => routellm_gsm8k(
            responses,
            questions,
            &Rubric::load(rubric)?,
            small_model,
            large_model,
            prices,
        ),
        Benchmark::MtBench {
            judgments,
            questions,
            pass_score,
        } => mt_bench(
            judgments,
            questions,
            small_model,
            large_model,
            *pass_score,
            prices,
        ),
    }
}
