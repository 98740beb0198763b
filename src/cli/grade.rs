//! `routeval grade`.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;

use crate::atomic::{Named, Output, check_outputs};
use crate::client::{Cache, Caller, OpenAiEndpoint, http_client, preflight};
use crate::events::{Event, Level, Reporter};
use crate::exit_codes::Outcome;
use crate::grade::{Grading, JudgeRequest, Judging, ScoreSource, judge_all};
use crate::rubric::load_rubrics;
use crate::run::RunConfig;
use crate::schema::{GRADED_OUTPUT, write_graded_parquet};
use crate::schema::{MANIFEST_FILE, RESPONSES_FILE};

use super::print::println;
use super::run::{CacheArgs, api_key};

#[derive(Debug, Args)]
pub struct GradeArgs {
    /// A run directory from `routeval run`.
    #[arg(long, value_name = "DIR")]
    pub run: PathBuf,

    /// The rubrics the dataset names.
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// The run's dataset, if it moved since the run (its digest must match).
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,

    /// The run's config, if it moved since the run (its digest must match);
    /// its `[judge]` answers `llm_judge` checks.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The judge's answers are cached like a run's.
    #[command(flatten)]
    pub cache: CacheArgs,

    /// Grade without the prompts whose small or large call failed (counted
    /// in the output) instead of refusing the run.
    #[arg(long)]
    pub allow_missing: bool,

    /// The graded-results table (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(args: GradeArgs, reporter: &dyn Reporter) -> anyhow::Result<Outcome> {
    let (responses, manifest) = (args.run.join(RESPONSES_FILE), args.run.join(MANIFEST_FILE));
    let mut inputs = vec![
        Named::new(&args.run, "--run"),
        Named::new(&responses, "--run"),
        Named::new(&manifest, "--run"),
    ];
    inputs.extend(
        args.dataset
            .iter()
            .map(|path| Named::new(path, "--dataset")),
    );
    inputs.extend(args.config.iter().map(|path| Named::new(path, "--config")));
    check_outputs(&[Output::new(&args.out, "--out", &GRADED_OUTPUT)], &inputs)?;
    let rubrics = load_rubrics(&args.rubrics)?;
    let grading = Grading::read(
        &args.run,
        args.dataset.as_deref(),
        &rubrics,
        args.allow_missing,
    )?;
    let config = match &args.config {
        Some(path) => Some(run_config(&grading, path)?),
        None => None,
    };
    let requests = grading.judge_requests(&rubrics);
    let judging = if requests.is_empty() {
        Judging::default()
    } else {
        let config = match config {
            Some(config) => config,
            None => run_config(&grading, &grading.config)?,
        };
        judge(&config, requests, &args, reporter)?
    };
    let graded = grading.finish(&rubrics, &judging.verdicts, &args.out);
    write_graded_parquet(&graded.table, &args.out)?;
    let source = match graded.score_source {
        ScoreSource::Verifier => "the verifier's reject probability",
        ScoreSource::SelfConsistency => "self-consistency of the small tier's samples",
        ScoreSource::None => {
            "none (null): the run had no verifier and one sample; `routeval router train --scored-out` fills it"
        }
    };
    println(&graded.slice_table())?;
    println(&format!("score: {source}"))?;
    if judging.calls > 0 {
        println(&format!(
            "judge: {} checks, {} calls ({} cached), ${:.4}",
            judging.checks, judging.calls, judging.cached, judging.cost_usd
        ))?;
    }
    if graded.pairwise_disagreements > 0 {
        println(&format!(
            "pairwise: {} comparisons whose two orders disagreed (the judge's position bias) counted as ties",
            graded.pairwise_disagreements
        ))?;
    }
    if graded.dropped > 0 {
        println(&format!(
            "dropped {} prompts whose call to a tier failed (--allow-missing)",
            graded.dropped
        ))?;
    }
    println(&format!("wrote {}", args.out.display()))?;
    if judging.errors > 0 {
        reporter.report(Event::Message {
            stage: "grade",
            level: Level::Warning,
            text: format!(
                "{} judged checks failed because the judge failed or answered unreadably (see the detail column)",
                judging.errors
            ),
        });
    }
    Ok(Outcome::Passed)
}

/// The run's config at `path`, which must be the one the run was made with.
fn run_config(grading: &Grading, path: &std::path::Path) -> anyhow::Result<RunConfig> {
    let config = RunConfig::load(path)?;
    if config.sha256() != grading.config_sha256 {
        bail!(
            "{}: the config changed since the run (sha256 differs from manifest.json)",
            path.display()
        );
    }
    Ok(config)
}

/// Calls the run config's `[judge]` for every `llm_judge` check.
fn judge(
    config: &RunConfig,
    requests: Vec<JudgeRequest>,
    args: &GradeArgs,
    reporter: &dyn Reporter,
) -> anyhow::Result<Judging> {
    let path = &config.path;
    let Some(endpoint) = &config.judge else {
        bail!(
            "{}: the rubrics use llm_judge, but the config has no [judge]",
            path.display()
        );
    };
    let key = api_key(config, "[judge]", endpoint)?;
    let cache = args
        .cache
        .directory()
        .map(|directory| Cache::open(&directory))
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let http = http_client(endpoint.max_concurrency)?;
        preflight(&http, endpoint, key.as_deref())
            .await
            .map_err(|problem| anyhow::anyhow!("{}: [judge]: {problem}", path.display()))?;
        let caller = Caller::new(
            OpenAiEndpoint::new(http, endpoint, key.clone()),
            endpoint,
            config.run.retry_budget,
        );
        Ok(judge_all(&caller, cache.as_ref(), &config.run, requests, reporter).await)
    })
}
