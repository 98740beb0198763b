//! A cascade's verifier, asked about a stage's answer before the client sees
//! any of it: the pinned template, the run's generation settings, and the
//! verdict read as the gate's score column was.

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use serde_json::json;

use crate::routes::VerdictScore;
use crate::rubric::{TokenChoice, verdict_score};

use super::answer::Answer;
use super::app::App;
use super::decision::Decided;
use super::decision::last_user_text;
use super::forward::{CallFailed, call, outgoing_headers, without_url};
use super::members::Members;

/// The verifier's reject score for `answer`, and what asking it cost.
pub(super) async fn verify(
    app: &App,
    decided: &Decided,
    route: &str,
    answer: &str,
    deadline: tokio::time::Instant,
) -> Result<(f64, f64), String> {
    let (deployed, request) = (&decided.deployed, &decided.request);
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
    let span = decided.trace.child("verify", SpanKind::Client, || {
        vec![
            KeyValue::new("routeval.route", route.to_owned()),
            KeyValue::new("gen_ai.request.model", upstream.model.clone()),
        ]
    });
    let headers = outgoing_headers(&decided.request_id, &span);
    let body = Members::of_map(&body);
    let called = match call(app, route, upstream, &body, deadline, &headers, false).await {
        Ok(called) => called,
        Err(failed) => {
            let problem = match failed {
                CallFailed::Unreachable(problem) => problem,
                CallFailed::TimedOut => late(),
            };
            span.end(Vec::new, Some(problem.clone()));
            return Err(problem);
        }
    };
    let status = i64::from(called.status.as_u16());
    if !called.status.is_success() {
        let problem = format!("the verifier answered {}", called.status);
        span.end(
            || vec![KeyValue::new("http.response.status_code", status)],
            Some(problem.clone()),
        );
        return Err(problem);
    }
    span.end(
        || vec![KeyValue::new("http.response.status_code", status)],
        None,
    );
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
