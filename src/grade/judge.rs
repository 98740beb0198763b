//! The `llm_judge` check's calls: each judge prompt through the `[judge]`
//! endpoint (its limits, retries and the response cache, like any call),
//! and the judge's answer read strictly: `{"pass", "score", "reason"}`. An
//! answer that cannot be read, or a call that failed, is a failed check with
//! the reason, never a pass.

use std::collections::HashMap;

use futures_util::StreamExt;

use super::responses::{JudgeKey, JudgeRequest, Judgements};
use crate::client::{
    Cache, CachedCall, CallOutcome, CallRequest, Caller, ChatEndpoint, EndpointConfig,
    GenerationConfig, cache_key,
};
use crate::events::{Event, Reporter};
use crate::rubric::Verdict;
use crate::rubric::verdict_for_check;

/// What judging cost and how it went.
#[derive(Debug, Default)]
pub struct Judging {
    pub verdicts: Judgements,
    /// Checks judged; identical judge prompts share one call.
    pub checks: u64,
    pub calls: u64,
    pub cached: u64,
    /// Checks whose judge call failed or answered unreadably: failed.
    pub errors: u64,
    pub cost_usd: f64,
}

impl Judging {
    /// The judge's lane so far, of `total` calls, `failed_calls` failed.
    fn progress(&self, total: u64, failed_calls: u64) -> Event {
        Event::Progress {
            stage: "grade",
            lane: "judge".to_owned(),
            done: self.calls,
            total,
            errors: failed_calls,
            last_error: None,
            retries: 0,
            cached: self.cached,
            cost_usd: self.cost_usd,
        }
    }
}

/// A judge call to make, by its cache key, and the checks its answer
/// decides.
type DistinctCall = (String, CallRequest, Vec<JudgeKey>);

/// One call per distinct judge prompt, with every check it decides.
fn distinct_calls(
    requests: Vec<JudgeRequest>,
    generation: &GenerationConfig,
    config: &EndpointConfig,
) -> Vec<DistinctCall> {
    let mut distinct: Vec<DistinctCall> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for request in requests {
        let call = CallRequest {
            messages: request.messages,
            temperature: 0.0,
            max_tokens: generation.max_tokens,
            seed: generation.seed,
            logprobs: false,
        };
        let key = cache_key(&config.base_url, &config.model, &call, 0);
        match position.get(&key) {
            Some(&at) => distinct[at].2.push(request.key),
            None => {
                position.insert(key.clone(), distinct.len());
                distinct.push((key, call, vec![request.key]));
            }
        }
    }
    distinct
}

/// Makes one judge call per distinct judge prompt (two tiers that gave the
/// same answer to the same question are judged once, whatever the timing),
/// at most the endpoint's `max_concurrency` at once.
pub async fn judge_all<E: ChatEndpoint>(
    caller: &Caller<E>,
    cache: Option<&Cache>,
    generation: &GenerationConfig,
    requests: Vec<JudgeRequest>,
    reporter: &dyn Reporter,
) -> Judging {
    let config = &caller.config;
    let mut judging = Judging {
        checks: requests.len() as u64,
        ..Judging::default()
    };
    let distinct = distinct_calls(requests, generation, config);
    let total = distinct.len() as u64;
    reporter.report(Event::Planned {
        stage: "grade",
        lane: "judge".to_owned(),
        total,
    });
    let mut answers = futures_util::stream::iter(distinct)
        .map(|(key, call, checks)| async move {
            if let Some(hit) = cache.and_then(|cache| cache.get(&key)) {
                let cost =
                    config.cost(hit.input_tokens, hit.cached_input_tokens, hit.output_tokens);
                return (checks, Ok(hit.text), true, cost);
            }
            let CallOutcome { result, .. } = caller.send(&call, &key).await;
            match result {
                Ok(completion) => {
                    let usage = completion.usage.unwrap_or(crate::client::Usage {
                        input: 0,
                        cached_input: 0,
                        output: 0,
                    });
                    if let Some(cache) = cache {
                        cache.put(
                            &key,
                            &CachedCall {
                                model_version: completion.model_version.clone(),
                                text: completion.text.clone(),
                                finish_reason: completion.finish_reason.clone(),
                                input_tokens: usage.input,
                                cached_input_tokens: usage.cached_input,
                                output_tokens: usage.output,
                                usage_estimated: completion.usage.is_none(),
                                ttft_ms: completion.ttft.as_secs_f64() * 1e3,
                                total_ms: completion.total.as_secs_f64() * 1e3,
                                verdict_logprobs: None,
                            },
                        );
                    }
                    let cost = config.cost(usage.input, usage.cached_input, usage.output);
                    (checks, Ok(completion.text), false, cost)
                }
                Err((error, why)) => (
                    checks,
                    Err(format!("the judge failed: {} ({why})", error.message())),
                    false,
                    0.0,
                ),
            }
        })
        .buffer_unordered(config.max_concurrency);
    let mut failed_calls = 0;
    while let Some((checks, answer, cached, cost)) = answers.next().await {
        judging.calls += 1;
        judging.cached += u64::from(cached);
        judging.cost_usd += cost;
        failed_calls += u64::from(answer.is_err());
        reporter.report(judging.progress(total, failed_calls));
        for check in checks {
            let verdict = answer
                .clone()
                .and_then(|text| verdict_for_check(&check.2, &text))
                .unwrap_or_else(|problem| {
                    judging.errors += 1;
                    Verdict {
                        pass: false,
                        score: 0.0,
                        detail: format!("llm_judge: {problem}"),
                    }
                });
            judging.verdicts.insert(check, verdict);
        }
    }
    reporter.report(Event::Finished {
        stage: "grade",
        lane: "judge".to_owned(),
    });
    judging
}
