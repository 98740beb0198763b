//! `routeval run` and `routeval merge`.

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use clap::Args;

use crate::events::{Level, Reporter};
use crate::exit_codes::Outcome;
use crate::run::{RunSettings, RunSummary, Shard, merge_runs, message, run_to_end};
use crate::schema::RESPONSES_FILE;

use super::print::println;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The endpoints, prices, limits and generation parameters.
    #[arg(long, value_name = "FILE", default_value = "routeval.toml")]
    pub config: PathBuf,

    /// Labelled prompts: JSON lines, CSV or Parquet.
    #[arg(long, value_name = "FILE")]
    pub dataset: PathBuf,

    /// Rubrics the dataset names, and the verifier's prompt templates (prompts/).
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// The run's directory; running again on it resumes.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Take a deterministic 1/N of the prompts: shard K of N.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,

    #[command(flatten)]
    pub cache: CacheArgs,

    /// On resume, send again the calls that ended in an error.
    #[arg(long)]
    pub retry_errors: bool,

    /// What a caller that sends failed calls again itself (the demo) says
    /// of them instead of the error; not a flag.
    #[arg(skip)]
    pub failed_calls_note: Option<String>,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The run directories of every shard.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// Where the merged run goes.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// The response cache of `run` and of the judge in `grade`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Where answers are cached across runs.
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".routeval/cache",
        env = "ROUTEVAL_CACHE_DIR"
    )]
    pub cache_dir: PathBuf,

    /// Send every request, reading and writing no cache.
    #[arg(long)]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The cache directory, or none with `--no-cache`.
    pub fn directory(&self) -> Option<PathBuf> {
        (!self.no_cache).then(|| self.cache_dir.clone())
    }
}

/// The run `args` ask for: its config file, and the settings it runs with.
pub fn request(
    args: RunArgs,
    reporter: Arc<dyn Reporter>,
) -> anyhow::Result<(PathBuf, RunSettings)> {
    let shard = args
        .shard
        .as_deref()
        .map(Shard::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let settings = RunSettings {
        dataset: args.dataset,
        rubrics: args.rubrics,
        out: args.out,
        shard,
        cache_dir: args.cache.directory(),
        retry_errors: args.retry_errors,
        reporter,
        flush_every: Duration::from_secs(2),
    };
    Ok((args.config, settings))
}

pub fn run(args: RunArgs, reporter: Arc<dyn Reporter>) -> anyhow::Result<Outcome> {
    let failed_calls_note = args.failed_calls_note.clone();
    let (config_path, settings) = request(args, reporter.clone())?;
    let summary = run_to_end(&config_path, &settings)?;
    print_summary(
        &summary,
        &settings.out.join(RESPONSES_FILE),
        reporter.as_ref(),
        failed_calls_note.as_deref(),
    )
}

/// Prints the run's table; a run with failed calls is a failed check (exit
/// 1), so that CI notices before grading a table with holes.
fn print_summary(
    summary: &RunSummary,
    responses: &std::path::Path,
    reporter: &dyn Reporter,
    failed_calls_note: Option<&str>,
) -> anyhow::Result<Outcome> {
    println(&summary.render(responses))?;
    let errors = summary.failed_calls();
    if errors > 0 {
        reporter.report(match failed_calls_note {
            Some(note) => message(
                Level::Note,
                format!(
                    "{errors} calls ended in an error ({}): {note}",
                    summary.failure_kinds()
                ),
            ),
            None => message(
                Level::Error,
                format!(
                    "{errors} calls ended in an error ({}; error_kind in {}); run the same command with --retry-errors to send them again",
                    summary.failure_kinds(),
                    responses.display()
                ),
            ),
        });
        return Ok(Outcome::CheckFailed);
    }
    Ok(Outcome::Passed)
}

pub fn merge(args: MergeArgs) -> anyhow::Result<Outcome> {
    let manifest = merge_runs(&args.runs, &args.out)?;
    let rows: u64 = manifest.tiers.values().map(|tier| tier.rows).sum();
    println(&format!(
        "merged {} shards: {} prompts, {rows} rows in {}",
        args.runs.len(),
        manifest.prompts,
        args.out.join(RESPONSES_FILE).display()
    ))?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::events::Silent;

    fn parse(argv: &str) -> anyhow::Result<(PathBuf, RunSettings)> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Run(args) = cli.command else {
            panic!("{argv} is a run command");
        };
        request(args, Arc::new(Silent))
    }

    #[test]
    fn flags_become_settings() {
        let (config, settings) =
            parse("routeval run --dataset d.jsonl --out runs/a --cache-dir c").unwrap();
        assert_eq!(config, PathBuf::from("routeval.toml"));
        assert_eq!(settings.dataset, PathBuf::from("d.jsonl"));
        assert_eq!(settings.rubrics, PathBuf::from("rubrics"));
        assert_eq!(settings.out, PathBuf::from("runs/a"));
        assert_eq!(settings.shard, None);
        assert_eq!(settings.cache_dir, Some(PathBuf::from("c")));
        assert!(!settings.retry_errors);

        let (config, settings) = parse(
            "routeval run --config mine.toml --dataset d.csv --rubrics r --out o --shard 2/3 --no-cache --retry-errors",
        )
        .unwrap();
        assert_eq!(config, PathBuf::from("mine.toml"));
        assert_eq!(settings.rubrics, PathBuf::from("r"));
        assert_eq!(settings.shard, Some(Shard { index: 2, count: 3 }));
        assert_eq!(settings.cache_dir, None);
        assert!(settings.retry_errors);
    }

    #[test]
    fn a_bad_shard_is_one_line_naming_the_flag() {
        for (shard, problem) in [
            ("3/2", "--shard K/N needs 1 <= K <= N, got \"3/2\""),
            ("0/2", "--shard K/N needs 1 <= K <= N, got \"0/2\""),
            ("half", "--shard must be K/N, got \"half\""),
        ] {
            let error = parse(&format!("routeval run --dataset d --out o --shard {shard}"))
                .err()
                .unwrap();
            assert_eq!(error.to_string(), problem);
        }
    }
}
