//! The `llm_judge` check's calls: each judge prompt through the `[judge]`
//! endpoint (its limits, retries and the response cache, like any call),
//! and the judge's answer read strictly: `{"pass", "score", "reason"}`. An
//! answer that cannot be read, or a call that failed, is a failed check with
//! the reason, never a pass.

use std::collections::HashMap;

use futures_util::StreamExt;
use serde::Deserialize;

use super::rubric::{Verdict, json_of};
use super::run::{JudgeKey, JudgeRequest, Judgements};
use crate::run::{
    Cache, CachedCall, CallOutcome, CallRequest, Caller, ChatEndpoint, GenerationConfig, cache_key,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Judgement {
    pass: bool,
    score: f64,
    reason: String,
}

/// The verdict a judge's answer states.
pub fn judgement_verdict(text: &str) -> Result<Verdict, String> {
    let judgement: Judgement = serde_json::from_str(json_of(text)).map_err(|error| {
        format!("the judge's answer is not {{\"pass\", \"score\", \"reason\"}}: {error}")
    })?;
    if !(0.0..=1.0).contains(&judgement.score) {
        return Err(format!(
            "the judge's score {} is not in [0, 1]",
            judgement.score
        ));
    }
    Ok(Verdict {
        pass: judgement.pass,
        score: judgement.score,
        detail: format!(
            "llm_judge: {} ({:.2}): {}",
            if judgement.pass { "pass" } else { "fail" },
            judgement.score,
            judgement.reason
        ),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PairwiseJudgement {
    winner: String,
    reason: String,
}

/// A pairwise judge's answer, `{"winner": "A" | "B" | "tie", "reason"}`,
/// as whether the graded answer (A when `graded_first`, else B) was not
/// worse than the other.
pub fn pairwise_judgement(text: &str, graded_first: bool) -> Result<Verdict, String> {
    let judgement: PairwiseJudgement = serde_json::from_str(json_of(text)).map_err(|error| {
        format!("the judge's answer is not {{\"winner\", \"reason\"}}: {error}")
    })?;
    let graded = if graded_first { "A" } else { "B" };
    let other = if graded_first { "B" } else { "A" };
    let winner = judgement.winner.trim();
    let pass = match winner {
        "tie" | "TIE" | "Tie" => true,
        won if won == graded => true,
        lost if lost == other => false,
        unknown => return Err(format!("the judge's winner {unknown:?} is not A, B or tie")),
    };
    Ok(Verdict {
        pass,
        score: if pass { 1.0 } else { 0.0 },
        detail: format!("pairwise: {winner}: {}", judgement.reason),
    })
}

/// A judge's answer read as the check at `at` asks for it.
fn verdict_for_check(at: &str, text: &str) -> Result<Verdict, String> {
    use super::rubric::{PAIRWISE_FIRST, PAIRWISE_SECOND};
    if at.ends_with(PAIRWISE_FIRST) {
        pairwise_judgement(text, true)
    } else if at.ends_with(PAIRWISE_SECOND) {
        pairwise_judgement(text, false)
    } else {
        judgement_verdict(text)
    }
}

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

/// Makes one judge call per distinct judge prompt (two tiers that gave the
/// same answer to the same question are judged once, whatever the timing),
/// at most the endpoint's `max_concurrency` at once.
pub async fn judge_all<E: ChatEndpoint>(
    caller: &Caller<E>,
    cache: Option<&Cache>,
    generation: &GenerationConfig,
    requests: Vec<JudgeRequest>,
) -> Judging {
    let config = &caller.config;
    let mut judging = Judging {
        checks: requests.len() as u64,
        ..Judging::default()
    };
    let mut distinct: Vec<(String, CallRequest, Vec<JudgeKey>)> = Vec::new();
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
                    let usage = completion.usage.unwrap_or(crate::run::Usage {
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
    while let Some((checks, answer, cached, cost)) = answers.next().await {
        judging.calls += 1;
        judging.cached += u64::from(cached);
        judging.cost_usd += cost;
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
    judging
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judgements_are_read_strictly() {
        let verdict =
            judgement_verdict(r#"{"pass": true, "score": 0.9, "reason": "right"}"#).unwrap();
        assert!(verdict.pass);
        assert_eq!(verdict.score, 0.9);
        assert!(verdict.detail.contains("right"));
        let fenced = "```json\n{\"pass\": false, \"score\": 0.1, \"reason\": \"wrong\"}\n```";
        assert!(!judgement_verdict(fenced).unwrap().pass);
        for unreadable in [
            "PASS",
            r#"{"pass": "yes", "score": 0.9, "reason": "r"}"#,
            r#"{"pass": true, "score": 1.5, "reason": "r"}"#,
            r#"{"pass": true, "score": 0.9}"#,
            r#"{"pass": true, "score": 0.9, "reason": "r", "confidence": 1}"#,
        ] {
            assert!(judgement_verdict(unreadable).is_err(), "{unreadable}");
        }
    }
}
