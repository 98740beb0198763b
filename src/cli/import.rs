//! `routeval import`.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};

use crate::exit_codes::Outcome;
use crate::import::{Benchmark, ImportOptions, PriceSource, ScoreSource, import};
use crate::router_model::Folds;
use crate::schema::ColumnNames;
use crate::units::NonNegative;

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
        #[arg(long, value_name = "MAP", default_value = "", value_parser = ColumnNames::from_map)]
        map: ColumnNames,
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
    pub cost_small: Option<NonNegative>,

    /// USD per call of the large tier.
    #[arg(long, value_name = "USD", requires = "cost_small")]
    pub cost_large: Option<NonNegative>,

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
    #[arg(long, value_name = "K", default_value = "5")]
    pub folds: Folds,
}

/// The import `command` asks for, its flags checked.
pub fn options(command: ImportCommand) -> anyhow::Result<ImportOptions> {
    let (benchmark, common) = match command {
        ImportCommand::Generic { input, map, out } => {
            return Ok(ImportOptions::Generic {
                input,
                names: map,
                out,
            });
        }
        ImportCommand::RoutellmMmlu { dir, common } => (Benchmark::RoutellmMmlu { dir }, common),
        ImportCommand::RoutellmGsm8k {
            responses,
            questions,
            rubric,
            common,
        } => (
            Benchmark::RoutellmGsm8k {
                responses,
                questions,
                rubric,
            },
            common,
        ),
        ImportCommand::MtBench {
            judgments,
            questions,
            pass_score,
            common,
        } => (
            Benchmark::MtBench {
                judgments,
                questions,
                pass_score,
            },
            common,
        ),
    };
    Ok(ImportOptions::Benchmark {
        benchmark,
        prices: prices(&common)?,
        scores: scores(&common)?,
        small_model: common.small_model,
        large_model: common.large_model,
        out: common.out,
    })
}

fn prices(args: &ImportArgs) -> anyhow::Result<PriceSource> {
    match (&args.prices, args.cost_small, args.cost_large) {
        (Some(path), _, _) => Ok(PriceSource::File(path.clone())),
        (None, Some(small), Some(large)) => Ok(PriceSource::Flat { small, large }),
        _ => bail!("give the prices: --cost-small and --cost-large, or --prices FILE"),
    }
}

fn scores(args: &ImportArgs) -> anyhow::Result<ScoreSource> {
    Ok(match &args.scores {
        Some(path) => ScoreSource::Join {
            path: path.clone(),
            column: args.scores_col.clone(),
        },
        None => ScoreSource::Router { folds: args.folds },
    })
}

/// `score=p,small_ok=weak` as graded column → file column.
pub fn run(command: ImportCommand) -> anyhow::Result<Outcome> {
    let options = options(command)?;
    let rows = import(&options)?;
    println(&format!(
        "imported {rows} rows: {}",
        options.out().display()
    ))?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<ImportOptions> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Import(command) = cli.command else {
            panic!("{argv} is an import command");
        };
        options(command)
    }

    #[test]
    fn flags_become_options() {
        assert_eq!(
            parse("routeval import routellm-mmlu --dir m --cost-small 0.001 --cost-large 0.01 --out o.parquet").unwrap(),
            ImportOptions::Benchmark {
                benchmark: Benchmark::RoutellmMmlu { dir: "m".into() },
                small_model: "mistralai/Mixtral-8x7B-Instruct-v0.1".into(),
                large_model: "gpt-4-1106-preview".into(),
                prices: PriceSource::Flat {
                    small: NonNegative::new(0.001).unwrap(),
                    large: NonNegative::new(0.01).unwrap()
                },
                scores: ScoreSource::Router {
                    folds: "5".parse().unwrap(),
                },
                out: "o.parquet".into(),
            }
        );
        assert_eq!(
            parse("routeval import mt-bench --judgments j --questions q --pass-score 7 --prices p.toml --scores s.csv --scores-col gain --small-model a --large-model b --out o.parquet").unwrap(),
            ImportOptions::Benchmark {
                benchmark: Benchmark::MtBench {
                    judgments: "j".into(),
                    questions: "q".into(),
                    pass_score: 7.0
                },
                small_model: "a".into(),
                large_model: "b".into(),
                prices: PriceSource::File("p.toml".into()),
                scores: ScoreSource::Join {
                    path: "s.csv".into(),
                    column: "gain".into()
                },
                out: "o.parquet".into(),
            }
        );
        let ImportOptions::Generic { names, .. } =
            parse("routeval import generic --input t.csv --map score=p,slice=s,small_ok=weak --out o.parquet").unwrap()
        else {
            panic!("a generic import")
        };
        assert_eq!((names.score.as_str(), names.slice.as_str()), ("p", "s"));
        assert_eq!(
            names.mapped,
            [(crate::schema::Column::SmallOk, "weak".to_owned())]
        );
    }

    #[test]
    fn a_bad_flag_is_one_line_naming_it() {
        for (argv, problem) in [
            (
                "routeval import routellm-mmlu --dir m --out o",
                "give the prices: --cost-small and --cost-large, or --prices FILE",
            ),
            (
                "routeval import routellm-mmlu --dir m --cost-small=-1 --cost-large 1 --out o",
                "error: invalid value '-1' for '--cost-small <USD>': -1: expected a number of at least 0",
            ),
            (
                "routeval import routellm-mmlu --dir m --prices p --folds 1 --out o",
                "error: invalid value '1' for '--folds <K>': 1: folds are from 2 to 100",
            ),
            (
                "routeval import generic --input t --map score --out o",
                "error: invalid value 'score' for '--map <MAP>': \"score\" is not graded_column=file_column",
            ),
            (
                "routeval import generic --input t --map nonsense=x --out o",
                "error: invalid value 'nonsense=x' for '--map <MAP>': \"nonsense\" is not a graded-results column",
            ),
        ] {
            let seen = parse(argv).unwrap_err().to_string();
            assert!(seen.starts_with(problem), "{argv}: {seen}");
        }
    }
}
