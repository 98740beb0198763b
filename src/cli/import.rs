//! `routeval import`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::atomic::{Named, Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::rubric::Rubric;

use crate::import::{
    ImportedRow, Prices, ScoreSource, build_table, mt_bench, routellm_gsm8k, routellm_mmlu,
};
use crate::schema::{
    Column, ColumnNames, GRADED_OUTPUT, GradedTable, ReadOptions, read_graded, write_graded_parquet,
};

use super::print::println;

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// RouteLLM's MMLU responses: one mmlu_<subject>.csv per subject, the subject as slice.
    RoutellmMmlu {
        /// The directory of mmlu_<subject>.csv files.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        #[command(flatten)]
        common: ImportArgs,
    },
    /// RouteLLM's GSM8K responses, regraded with a rubric against GSM8K's reference answers.
    RoutellmGsm8k {
        /// gsm8k_responses.csv.
        #[arg(long, value_name = "FILE")]
        responses: PathBuf,
        /// GSM8K's test.jsonl, in the same order.
        #[arg(long, value_name = "FILE")]
        questions: PathBuf,
        /// The rubric file that grades the answers.
        #[arg(long, value_name = "FILE", default_value = "rubrics/gsm8k.toml")]
        rubric: PathBuf,
        #[command(flatten)]
        common: ImportArgs,
    },
    /// MT-Bench single-answer judgments; the question's category is the slice.
    MtBench {
        /// judgements.jsonl.
        #[arg(long, value_name = "FILE")]
        judgments: PathBuf,
        /// question.jsonl.
        #[arg(long, value_name = "FILE")]
        questions: PathBuf,
        /// A judge score at or above this is an acceptable answer.
        #[arg(long, value_name = "SCORE", default_value_t = 8.0)]
        pass_score: f64,
        #[command(flatten)]
        common: ImportArgs,
    },
    /// Any CSV, JSON-lines or Parquet table, its columns mapped to the graded-results columns.
    Generic {
        /// The table to convert.
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
        /// Column mapping, e.g. score=p_hard,small_ok=mixtral_correct (graded column = file column).
        #[arg(long, value_name = "MAP", default_value = "")]
        map: String,
        /// The graded results (Parquet).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// What every benchmark import needs: where to write, the models, prices
/// and scores.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The graded results (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// The weak model's name in the source files.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "mistralai/Mixtral-8x7B-Instruct-v0.1"
    )]
    pub small_model: String,

    /// The strong model's name in the source files.
    #[arg(long, value_name = "NAME", default_value = "gpt-4-1106-preview")]
    pub large_model: String,

    /// USD per call of the small tier.
    #[arg(
        long,
        value_name = "USD",
        requires = "cost_large",
        conflicts_with = "prices"
    )]
    pub cost_small: Option<f64>,

    /// USD per call of the large tier.
    #[arg(long, value_name = "USD", requires = "cost_small")]
    pub cost_large: Option<f64>,

    /// A price file: [models."NAME"] per_call = USD.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,

    /// Take scores from this file's column (joined by id) instead of the built-in router.
    #[arg(long, value_name = "FILE")]
    pub scores: Option<PathBuf>,

    /// The column of --scores.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "score",
        requires = "scores"
    )]
    pub scores_col: String,

    /// Folds for the built-in router's cross-fitted scores.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub folds: usize,
}

fn prices(args: &ImportArgs) -> anyhow::Result<Prices> {
    match (&args.prices, args.cost_small, args.cost_large) {
        (Some(path), _, _) => Prices::load(path),
        (None, Some(small), Some(large)) => {
            for (flag, cost) in [("--cost-small", small), ("--cost-large", large)] {
                if !(cost.is_finite() && cost >= 0.0) {
                    bail!("{flag} must be a non-negative number of USD, got {cost}");
                }
            }
            Ok(Prices::Flat { small, large })
        }
        _ => bail!("give the prices: --cost-small and --cost-large, or --prices FILE"),
    }
}

fn scores(args: &ImportArgs) -> anyhow::Result<ScoreSource> {
    super::router::check_folds(args.folds)?;
    Ok(match &args.scores {
        Some(path) => ScoreSource::Join {
            path: path.clone(),
            column: args.scores_col.clone(),
        },
        None => ScoreSource::Router { folds: args.folds },
    })
}

/// `score=p,small_ok=weak` as graded column → file column.
fn parse_map(map: &str) -> anyhow::Result<ColumnNames> {
    let mut names = ColumnNames {
        from_map: true,
        ..ColumnNames::default()
    };
    for pair in map
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
    {
        let (target, source) = pair
            .split_once('=')
            .with_context(|| format!("--map: {pair:?} is not graded_column=file_column"))?;
        let column = Column::from_name(target.trim())
            .with_context(|| format!("--map: {target:?} is not a graded-results column"))?;
        let source = source.trim().to_owned();
        match column {
            Column::Score => names.score = source,
            Column::Slice => names.slice = source,
            other => names.mapped.push((other, source)),
        }
    }
    Ok(names)
}

/// The imported rows as a scored table, and where it goes.
fn scored(rows: Vec<ImportedRow>, common: ImportArgs) -> anyhow::Result<(GradedTable, PathBuf)> {
    let table = build_table(
        rows,
        &common.small_model,
        &common.large_model,
        &scores(&common)?,
        &common.out,
    )?;
    Ok((table, common.out))
}

/// The files an import reads, each with its flag.
fn inputs(command: &ImportCommand) -> Vec<Named<'_>> {
    let mut inputs = Vec::new();
    let common = match command {
        ImportCommand::Generic { input, .. } => {
            inputs.push(Named::new(input, "--input"));
            None
        }
        ImportCommand::RoutellmMmlu { dir, common } => {
            inputs.push(Named::new(dir, "--dir"));
            Some(common)
        }
        ImportCommand::RoutellmGsm8k {
            responses,
            questions,
            rubric,
            common,
        } => {
            inputs.push(Named::new(responses, "--responses"));
            inputs.push(Named::new(questions, "--questions"));
            inputs.push(Named::new(rubric, "--rubric"));
            Some(common)
        }
        ImportCommand::MtBench {
            judgments,
            questions,
            common,
            ..
        } => {
            inputs.push(Named::new(judgments, "--judgments"));
            inputs.push(Named::new(questions, "--questions"));
            Some(common)
        }
    };
    if let Some(common) = common {
        if let Some(prices) = &common.prices {
            inputs.push(Named::new(prices, "--prices"));
        }
        if let Some(scores) = &common.scores {
            inputs.push(Named::new(scores, "--scores"));
        }
    }
    inputs
}

fn out(command: &ImportCommand) -> &Path {
    match command {
        ImportCommand::Generic { out, .. } => out,
        ImportCommand::RoutellmMmlu { common, .. }
        | ImportCommand::RoutellmGsm8k { common, .. }
        | ImportCommand::MtBench { common, .. } => &common.out,
    }
}

pub fn run(command: ImportCommand) -> anyhow::Result<Outcome> {
    check_outputs(
        &[Output::new(out(&command), "--out", &GRADED_OUTPUT)],
        &inputs(&command),
    )?;
    let (table, out) = match command {
        ImportCommand::Generic { input, map, out } => {
            let options = ReadOptions {
                names: parse_map(&map)?,
                carry_extra: true,
                details: true,
                score_optional: true,
                carry_read_only: false,
            };
            (read_graded(&input, &options)?, out)
        }
        ImportCommand::RoutellmMmlu { dir, common } => {
            let rows = routellm_mmlu(
                &dir,
                &common.small_model,
                &common.large_model,
                &prices(&common)?,
            )?;
            scored(rows, common)?
        }
        ImportCommand::RoutellmGsm8k {
            responses,
            questions,
            rubric,
            common,
        } => {
            let rubric = Rubric::load(&rubric)?;
            let rows = routellm_gsm8k(
                &responses,
                &questions,
                &rubric,
                &common.small_model,
                &common.large_model,
                &prices(&common)?,
            )?;
            scored(rows, common)?
        }
        ImportCommand::MtBench {
            judgments,
            questions,
            pass_score,
            common,
        } => {
            let rows = mt_bench(
                &judgments,
                &questions,
                &common.small_model,
                &common.large_model,
                pass_score,
                &prices(&common)?,
            )?;
            scored(rows, common)?
        }
    };
    write_graded_parquet(&table, &out)?;
    println(&format!(
        "imported {} rows: {}",
        table.num_rows(),
        out.display()
    ))?;
    Ok(Outcome::Passed)
}
