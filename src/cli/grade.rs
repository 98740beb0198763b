//! `routeval grade`.

use std::io::Write;

use anyhow::bail;

use crate::exit_codes::Outcome;
use crate::grade::{Grading, JudgeRequest, Judging, ScoreSource, judge_all, load_rubrics};
use crate::run::{Cache, Caller, OpenAiEndpoint, RunConfig, http_client, preflight};
use crate::schema::write_graded_parquet;

use super::args::GradeArgs;
use super::run::api_key;

pub fn run(args: GradeArgs) -> anyhow::Result<Outcome> {
    let rubrics = load_rubrics(&args.rubrics)?;
    let grading = Grading::read(&args.run, args.dataset.as_deref(), &rubrics)?;
    let requests = grading.judge_requests(&rubrics);
    let judging = if requests.is_empty() {
        Judging::default()
    } else {
        judge(&grading, requests, &args)?
    };
    let graded = grading.finish(&rubrics, &judging.verdicts, &args.out);
    write_graded_parquet(&graded.table, &args.out)?;
    let rows = graded
        .slices
        .iter()
        .map(|(slice, (prompts, small, large))| {
            let share = |count: &u64| format!("{:.3}", *count as f64 / *prompts as f64);
            vec![
                slice.clone(),
                prompts.to_string(),
                share(small),
                share(large),
            ]
        });
    let table = crate::calibrate::table(vec!["slice", "prompts", "small ok", "large ok"], rows);
    let source = match graded.score_source {
        ScoreSource::Verifier => "the verifier's reject probability",
        ScoreSource::SelfConsistency => "self-consistency of the small tier's samples",
        ScoreSource::None => "none (0); `routeval router train --scored-out` fills it",
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{table}");
    let _ = writeln!(out, "score: {source}");
    if judging.calls > 0 {
        let _ = writeln!(
            out,
            "judge: {} checks, {} calls ({} cached), ${:.4}",
            judging.checks, judging.calls, judging.cached, judging.cost_usd
        );
    }
    let _ = writeln!(out, "wrote {}", args.out.display());
    if judging.errors > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {} judged checks failed because the judge failed or answered unreadably (see the detail column)",
            judging.errors
        );
    }
    Ok(Outcome::Passed)
}

/// Calls the run config's `[judge]` for every `llm_judge` check.
fn judge(
    grading: &Grading,
    requests: Vec<JudgeRequest>,
    args: &GradeArgs,
) -> anyhow::Result<Judging> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| grading.config.clone());
    let config = RunConfig::load(&path)?;
    if config.sha256() != grading.config_sha256 {
        bail!(
            "{}: the config changed since the run (sha256 differs from manifest.json)",
            path.display()
        );
    }
    let Some(endpoint) = &config.judge else {
        bail!(
            "{}: the rubrics use llm_judge, but the config has no [judge]",
            path.display()
        );
    };
    let key = api_key(&config, "[judge]", endpoint)?;
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
        Ok(judge_all(&caller, cache.as_ref(), &config.run, requests).await)
    })
}
