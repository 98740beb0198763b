//! `routeval run` and `routeval merge`.

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use anyhow::bail;
use clap::Args;

use crate::client::{EndpointConfig, OpenAiEndpoint, http_client, preflight};
use crate::clock::{Clock, SystemClock, format_rfc3339};
use crate::events::{Event, Level, Reporter};
use crate::exit_codes::Outcome;
use crate::rubric::PromptTemplate;
use crate::run::{
    Endpoints, RunConfig, RunSettings, RunSummary, Shard, execute, merge_runs, prepare,
};
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

/// The key of an endpoint, from the variable its config names.
pub(super) fn api_key(
    config: &RunConfig,
    section: &str,
    endpoint: &EndpointConfig,
) -> anyhow::Result<Option<String>> {
    let Some(variable) = &endpoint.api_key_env else {
        return Ok(None);
    };
    match std::env::var(variable) {
        Ok(value) if !value.trim().is_empty() => Ok(Some(value)),
        _ => bail!(
            "{}: {section}: the environment variable {variable} (api_key_env) is not set",
            config.path.display()
        ),
    }
}

pub fn run(args: RunArgs, reporter: Arc<dyn Reporter>) -> anyhow::Result<Outcome> {
    // The handlers first: a SIGTERM or Ctrl-C while the dataset is read or
    // the endpoints are checked stops the run as one during the calls does
    // (exit 2, nothing lost), not with the signal's default death.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let stop_signals = {
        use tokio::signal::unix::{SignalKind, signal};
        let _entered = runtime.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    let config = RunConfig::load(&args.config)?;
    let shard = args
        .shard
        .as_deref()
        .map(Shard::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let tier_keys = config
        .tiers
        .iter()
        .map(|tier| api_key(&config, &tier.section(), &tier.endpoint))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let verifier = match &config.verifier {
        Some(verifier) => {
            let key = api_key(&config, "[verifier]", verifier)?;
            let name = verifier.template.as_deref().expect("checked on load");
            Some((verifier, key, PromptTemplate::load(&args.rubrics, name)?))
        }
        None => None,
    };
    let mut stage_verifiers = Vec::new();
    for (stage, verifier) in &config.stage_verifiers {
        let section = format!("[verifiers.{stage}]");
        let key = api_key(&config, &section, verifier)?;
        let name = verifier.template.as_deref().expect("checked on load");
        let template = PromptTemplate::load(&args.rubrics, name)?;
        stage_verifiers.push((stage.clone(), section, verifier, key, template));
    }
    let settings = RunSettings {
        dataset: args.dataset,
        rubrics: args.rubrics,
        out: args.out,
        shard,
        cache_dir: args.cache.directory(),
        retry_errors: args.retry_errors,
        reporter: reporter.clone(),
        flush_every: Duration::from_secs(2),
    };
    let clock = SystemClock;
    let prepared = prepare(&config, &settings, &format_rfc3339(clock.now()))?;
    if prepared.recovered.rows > 0 || prepared.recovered.torn > 0 {
        reporter.report(message(
            Level::Note,
            format!(
                "resuming: {} calls recovered from the journal of an interrupted run ({} cut short by the interruption will be sent again)",
                prepared.recovered.rows, prepared.recovered.torn
            ),
        ));
    }
    for (path, why) in prepared.quarantined() {
        reporter.report(message(
            Level::Warning,
            format!(
                "{}: unreadable ({why}); moved aside, its calls will be sent again",
                path.display()
            ),
        ));
    }
    let (mut terminated, mut interrupted) = stop_signals;
    let summary = runtime.block_on(async {
        let http = http_client(config.widest_concurrency())?;
        let mut checks: Vec<(String, &EndpointConfig, Option<&str>)> = config
            .tiers
            .iter()
            .zip(&tier_keys)
            .map(|(tier, key)| (tier.section(), &tier.endpoint, key.as_deref()))
            .collect();
        if let Some((endpoint, key, _)) = &verifier {
            checks.push(("[verifier]".to_owned(), endpoint, key.as_deref()));
        }
        for (_, section, endpoint, key, _) in &stage_verifiers {
            checks.push((section.clone(), endpoint, key.as_deref()));
        }
        let checked = async {
            for (section, endpoint, key) in checks {
                preflight(&http, endpoint, key).await.map_err(|problem| {
                    anyhow::anyhow!("{}: {section}: {problem}", config.path.display())
                })?;
            }
            anyhow::Ok(())
        };
        tokio::select! {
            checked = checked => checked?,
            _ = terminated.recv() => bail!("interrupted before the first call; nothing was sent"),
            _ = interrupted.recv() => bail!("interrupted before the first call; nothing was sent"),
        }
        let endpoints = Endpoints {
            tiers: config
                .tiers
                .iter()
                .zip(&tier_keys)
                .map(|(tier, key)| OpenAiEndpoint::new(http.clone(), &tier.endpoint, key.clone()))
                .collect(),
            verifier: verifier.as_ref().map(|(endpoint, key, template)| {
                (
                    OpenAiEndpoint::new(http.clone(), endpoint, key.clone()),
                    template.clone(),
                )
            }),
            stage_verifiers: stage_verifiers
                .iter()
                .map(|(stage, _, endpoint, key, template)| {
                    (
                        stage.clone(),
                        (
                            OpenAiEndpoint::new(http.clone(), endpoint, key.clone()),
                            template.clone(),
                        ),
                    )
                })
                .collect(),
        };
        execute(&config, endpoints, &settings, prepared, || {
            format_rfc3339(clock.now())
        })
        .await
    })?;
    // Dropping the runtime would wait for requests abandoned by an interrupt.
    runtime.shutdown_background();
    print_summary(
        &summary,
        &settings.out.join(RESPONSES_FILE),
        reporter.as_ref(),
    )
}

fn message(level: Level, text: String) -> Event {
    Event::Message {
        stage: "run",
        level,
        text,
    }
}

/// Prints the run's table; a run with failed calls is a failed check (exit
/// 1), so that CI notices before grading a table with holes.
fn print_summary(
    summary: &RunSummary,
    responses: &std::path::Path,
    reporter: &dyn Reporter,
) -> anyhow::Result<Outcome> {
    let rows = summary.tiers.iter().map(|tier| {
        vec![
            tier.tier.name().to_owned(),
            tier.model.clone(),
            tier.calls.to_string(),
            tier.errors.to_string(),
            tier.cached.to_string(),
            tier.retries.to_string(),
            format!("{:.4}", tier.cost_usd),
        ]
    });
    let table = crate::terminal::table(
        vec![
            "tier", "model", "calls", "errors", "cached", "retries", "cost $",
        ],
        rows,
    );
    println(&table.to_string())?;
    println(&format!(
        "{} rows in {} ({:.1} s)",
        summary.rows,
        responses.display(),
        summary.elapsed.as_secs_f64()
    ))?;
    let errors: u64 = summary
        .manifest
        .tiers
        .values()
        .map(|tier| tier.errors)
        .sum();
    if errors > 0 {
        reporter.report(message(
            Level::Error,
            format!(
                "{errors} calls ended in an error (see error_kind in {}); run the same command with --retry-errors to send them again",
                responses.display()
            ),
        ));
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
