//! Every flag of every command, as clap derive structs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Calibrate, gate and monitor the thresholds of LLM tier routers and
/// cascades from labelled data.
#[derive(Debug, Parser)]
#[command(name = "routeval", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pick, per slice, the cheapest threshold whose quality meets the target.
    Calibrate(CalibrateArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// A router scores each prompt; escalated prompts go to the large tier only.
    Predictive,
    /// The small tier answers first; answers the verifier rejects are escalated.
    Cascade,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Graded results: Parquet, CSV or JSON lines (see docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Quality each slice must reach: the share of acceptable answers, in (0, 1].
    #[arg(long, value_name = "Q")]
    pub target: f64,

    /// How escalation works, which decides what each threshold costs.
    #[arg(long, value_enum, default_value_t = PolicyArg::Predictive)]
    pub policy: PolicyArg,

    /// Only choose thresholds whose quality is certified at this confidence,
    /// e.g. 0.95 (exact binomial tests, fixed-sequence).
    #[arg(long, value_name = "C")]
    pub confidence: Option<f64>,

    /// Hold out this fraction of each slice and report the chosen threshold's
    /// quality on it.
    #[arg(long, value_name = "F")]
    pub holdout: Option<f64>,

    /// Seed of the holdout split; the split depends only on ids and the seed.
    #[arg(long, value_name = "S", default_value_t = 0, requires = "holdout")]
    pub seed: u64,

    /// One threshold over all rows instead of one per slice.
    #[arg(long)]
    pub global: bool,

    /// Print the calibration document as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Most Pareto-frontier points per slice in the document (evenly spaced,
    /// both ends kept); 0 keeps them all.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub frontier_points: usize,

    /// Also write the calibration document to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// The file's name for the score column.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "score",
        env = "ROUTEVAL_SCORE_COL"
    )]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "slice",
        env = "ROUTEVAL_SLICE_COL"
    )]
    pub slice_col: String,
}
