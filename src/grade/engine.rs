//! Grades a run: its answers by the rubrics, the judge called for the
//! `llm_judge` checks, the graded-results table written.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::judge::{Judging, judge_all};
use super::responses::{GradedRun, Grading, JudgeRequest};
use crate::atomic::{Named, Output, check_outputs};
use crate::client::{Cache, Caller, OpenAiEndpoint, RunConfig, api_key, http_client, preflight};
use crate::events::Reporter;
use crate::rubric::load_rubrics;
use crate::schema::{GRADED_OUTPUT, MANIFEST_FILE, RESPONSES_FILE, write_graded_parquet};

/// What `routeval grade` grades, and where the table goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GradeOptions {
    /// A run directory from `routeval run`.
    pub run: PathBuf,
    pub rubrics: PathBuf,
    /// The run's dataset, if it moved since the run.
    pub dataset: Option<PathBuf>,
    /// The run's config, if it moved since the run.
    pub config: Option<PathBuf>,
    /// The judge's answer cache; none to send every call.
    pub cache_dir: Option<PathBuf>,
    /// Drop the prompts whose call to a tier failed instead of refusing.
    pub allow_missing: bool,
    pub out: PathBuf,
}

/// A graded run, and how judging it went.
#[derive(Debug)]
pub struct Graded {
    pub run: GradedRun,
    pub judging: Judging,
}

/// Grades the run of `options`, calling the run config's `[judge]` when a
/// rubric has `llm_judge` checks, and writes the table to `options.out`.
pub fn grade(options: &GradeOptions, reporter: &dyn Reporter) -> anyhow::Result<Graded> {
    let responses = options.run.join(RESPONSES_FILE);
    let manifest = options.run.join(MANIFEST_FILE);
    let mut inputs = vec![
        Named::new(&options.run, "--run"),
        Named::new(&responses, "--run"),
        Named::new(&manifest, "--run"),
    ];
    inputs.extend(
        options
            .dataset
            .iter()
            .map(|path| Named::new(path, "--dataset")),
    );
    inputs.extend(
        options
            .config
            .iter()
            .map(|path| Named::new(path, "--config")),
    );
    check_outputs(
        &[Output::new(&options.out, "--out", &GRADED_OUTPUT)],
        &inputs,
    )?;
    // The run (and dataset) the user named are refused before the rubrics,
    // which default to a directory only a checkout or the demo has.
    for named in [Some(&options.run), options.dataset.as_ref()]
        .into_iter()
        .flatten()
    {
        crate::schema::InputError::check_present(named)?;
    }
    let rubrics = load_rubrics(&options.rubrics)?;
    let grading = Grading::read(
        &options.run,
        options.dataset.as_deref(),
        &rubrics,
        options.allow_missing,
    )?;
    let config = match &options.config {
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
        judge(&config, requests, options.cache_dir.as_deref(), reporter)?
    };
    let run = grading.finish(&rubrics, &judging.verdicts, &options.out);
    write_graded_parquet(&run.table, &options.out)?;
    Ok(Graded { run, judging })
}

/// The run's config at `path`, which must be the one the run was made with.
fn run_config(grading: &Grading, path: &Path) -> anyhow::Result<RunConfig> {
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
    cache_dir: Option<&Path>,
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
    let cache = cache_dir.map(Cache::open).transpose()?;
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
