//! The command line's root: every command and where its flags are (each
//! command's clap struct stands in its own file, beside its conversion
//! into the stage's typed options; but `demo`'s, which runs the command
//! line itself and so stands above it).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::calibrate::CalibrateArgs;
use super::drift::DriftArgs;
use super::evaluate::EvaluateArgs;
use super::gate::{GateArgs, KeygenArgs, VerifyArgs};
use super::grade::GradeArgs;
use super::import::ImportCommand;
use super::records::RecordsCommand;
use super::replay::ReplayCommand;
use super::report::ReportArgs;
use super::reporter::OutputArgs;
use super::router::RouterCommand;
use super::run::{MergeArgs, RunArgs};
use super::sample::SampleArgs;
use super::serve::ServeArgs;
use super::serve_sim::ServeSimArgs;
use super::shell::{CompletionsArgs, ManArgs};
use super::simulate::SimulateArgs;

/// Calibrate, gate and monitor the thresholds of LLM tier routers and
/// cascades from labelled data.
#[derive(Debug, Parser)]
#[command(name = "routeval", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub output: OutputArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The whole pipeline on the embedded simulated endpoint, no key and no
    /// network: run, grade, train the router, calibrate, gate, sign, verify, report.
    Demo(DemoArgs),
    /// Send labelled prompts to the small tier, the large tier and the
    /// verifier, and record every answer (resumable, cached, rate-limited).
    Run(RunArgs),
    /// Combine the outputs of `run --shard K/N` into one run's output.
    Merge(MergeArgs),
    /// Grade a run's answers with each prompt's rubric into the graded-results table.
    Grade(GradeArgs),
    /// Pick, per slice, the cheapest threshold whose quality meets the target.
    Calibrate(CalibrateArgs),
    /// Score candidate route tables on the same graded results and emit the
    /// cheapest that passes every rule as a signed route config.
    Gate(GateArgs),
    /// Create a minisign key pair for signing route configs.
    Keygen(KeygenArgs),
    /// Check a signed route config before deploying it.
    Verify(VerifyArgs),
    /// Re-evaluate fresh graded traffic at a deployed config's thresholds.
    Drift(DriftArgs),
    /// Write the HTML report and Markdown summary a reviewer reads.
    Report(ReportArgs),
    /// Turn public benchmark outcomes into graded results.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Train the built-in router, or score prompts with it.
    #[command(subcommand)]
    Router(RouterCommand),
    /// How well the results' scores separate the prompts that need the large
    /// tier (APGR, CPT), against a random router and the oracle.
    Evaluate(EvaluateArgs),
    /// Serve a signed route config: an OpenAI-compatible endpoint that
    /// decides each request exactly as the gate certified it.
    Serve(ServeArgs),
    /// Serve an OpenAI-compatible simulated endpoint that answers a dataset's
    /// prompts, for demos and tests without keys or network.
    ServeSim(ServeSimArgs),
    /// Generate graded results from a documented generative model, and
    /// compare ways to serve them.
    Simulate(SimulateArgs),
    /// Replay recorded traffic through a simulated serving layer.
    #[command(subcommand)]
    Replay(ReplayCommand),
    /// The gateway's request records: import them from what is logged.
    #[command(subcommand)]
    Records(RecordsCommand),
    /// Draw the next labelling set from request records: per slice, across
    /// the score range, de-duplicated, secrets redacted.
    Sample(SampleArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or
    /// PowerShell (e.g. `routeval completions bash > ~/.local/share/bash-completion/completions/routeval`).
    Completions(CompletionsArgs),
    /// Print the manual page (roff) of routeval or of one command, e.g.
    /// `routeval man gate | man -l -`.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The demo data set: prompts.jsonl, routeval.toml, faults.toml, routes/.
    /// Without it, the demo's own (embedded in the binary, the repository's
    /// datasets/demo), written under --out/inputs.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// The rubrics and prompt templates; without them, the embedded ones
    /// (the repository's rubrics/), written under --out/inputs.
    #[arg(long, value_name = "DIR")]
    pub rubrics: Option<PathBuf>,

    /// Where the demo's run, tables, keys and configs go: a new or empty
    /// directory, or one an earlier demo made (which it clears)
    /// [default: runs/demo].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Where the report goes [default: `report` under --out when --out is
    /// given, else reports/demo].
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,

    /// The quality target of every slice.
    #[arg(long, value_name = "Q", default_value_t = 0.8)]
    pub target: f64,
}
