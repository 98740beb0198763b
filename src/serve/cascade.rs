//! A cascade's verifier, asked about a stage's answer before the client sees
//! any of it: the pinned template, the run's generation settings, and the
//! verdict read as the gate's score column was.

use serde_json::{Value, json};

use crate::routes::VerdictScore;
use crate::rubric::{TokenChoice, verdict_score};

use super::answer::Answer;
use super::decision::last_user_text;
use super::deployed::Deployed;
use super::forward::{CallFailed, call, without_url};
use super::http::App;

/// The verifier's reject score for `answer`, and what asking it cost.
pub(super) async fn verify(
    app: &App,
    deployed: &Deployed,
    route: &str,
    request: &serde_json::Map<String, Value>,
    answer: &str,
    deadline: tokio::time::Instant,
    request_id: &str,
) -> Result<(f64, f64), String> {
    let verifier = deployed
        .verifier
        .as_ref()
        .ok_or("the config pins no verifier")?;
    let upstream = deployed
        .upstreams
        .get(route)
        .ok_or("the verifier has no route")?;
    let question = last_user_text(request);
    let messages = verifier
        .template
        .render(&[("{question}", &question), ("{answer}", answer)]);
    let mut body = serde_json::Map::new();
    body.insert(
        "messages".to_owned(),
        serde_json::to_value(&messages).expect("messages serialise"),
    );
    body.insert("temperature".to_owned(), json!(0.0));
    body.insert("max_tokens".to_owned(), json!(verifier.max_tokens));
    if let Some(seed) = request.get("seed") {
        body.insert("seed".to_owned(), seed.clone());
    }
    if verifier.score == VerdictScore::Logprobs {
        body.insert("logprobs".to_owned(), json!(true));
        body.insert("top_logprobs".to_owned(), json!(5));
    }
    let late = || "the verifier did not answer within --total-timeout-ms".to_owned();
    let called = call(app, route, upstream, &body, deadline, request_id, false)
        .await
        .map_err(|failed| match failed {
            CallFailed::Unreachable(problem) => problem,
            CallFailed::TimedOut => late(),
        })?;
    if !called.status.is_success() {
        return Err(format!("the verifier answered {}", called.status));
    }
    let bytes =
        called.response.bytes().await.map_err(|problem| {
            format!("the verifier's answer was cut: {}", without_url(&problem))
        })?;
    let verdict = Answer::of_json(&bytes);
    let alternatives: Option<Vec<TokenChoice>> = verdict.logprobs.as_ref().map(|choices| {
        choices
            .iter()
            .map(|(token, logprob)| TokenChoice {
                token: token.clone(),
                logprob: *logprob,
            })
            .collect()
    });
    let score = verdict_score(&verdict.text, alternatives.as_deref())
        .map_err(|problem| format!("the verifier's verdict: {problem}"))?;
    let cost = upstream.cost(
        verdict.input_tokens.unwrap_or(0),
        verdict.cached_input_tokens.unwrap_or(0),
        verdict.output_tokens.unwrap_or(0),
    );
    Ok((score, cost))
}
