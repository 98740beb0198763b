//! The endpoints: `POST /v1/chat/completions` (decide, call the route,
//! pass its bytes through), `POST /v1/route` (the decision alone),
//! `GET /v1/models`, `GET /metrics`, `GET /healthz`, `GET /readyz`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::client::estimate_tokens;
use crate::clock::Clock;
use crate::policy::{Plan, Refusal, applicable, plan};
use crate::records::Status;
use crate::router_model::{featurise, stored_score};
use crate::routes::{Scorer, SliceSource, VerdictScore};
use crate::rubric::{TokenChoice, verdict_score};

use super::answer::Answer;
use super::deployed::{Deployed, Upstream};
use super::journal::{Journal, ServedRecord};
use super::keys::{Identity, Keys};
use super::metrics::Metrics;

/// The schema of `POST /v1/route`'s answer.
pub const ROUTE_DECISION_SCHEMA_VERSION: u32 = 1;

/// What every request shares.
pub struct App {
    pub deployed: RwLock<Arc<Deployed>>,
    pub keys: Keys,
    pub trust_slice_header: bool,
    pub strict_expiry: bool,
    pub clock: Arc<dyn Clock + Send + Sync>,
    pub http: reqwest::Client,
    pub journal: Journal,
    pub metrics: Metrics,
    pub requests: AtomicU64,
    /// Distinguishes this process's request ids from another's.
    pub started_ms: i64,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

impl App {
    pub fn current(&self) -> Arc<Deployed> {
        self.deployed.read().expect("unpoisoned").clone()
    }

    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// An OpenAI-style error body.
pub fn error(status: StatusCode, kind: &str, param: Option<&str>, message: &str) -> Response {
    let body =
        json!({"error": {"message": message, "type": kind, "param": param, "code": Value::Null}});
    (status, axum::Json(body)).into_response()
}

/// A request refused before any route is called: the response, and the
/// reason its record gives.
struct Refused {
    response: Response,
    reason: &'static str,
}

fn refused(response: Response, reason: &'static str) -> Box<Refused> {
    Box::new(Refused { response, reason })
}

/// A request that passed authentication and parsing, and its decision.
struct Decided {
    request: serde_json::Map<String, Value>,
    deployed: Arc<Deployed>,
    slice: String,
    plan: Plan,
    /// Predictive: the score and the tier it chose.
    score: Option<f64>,
    tier: usize,
}

/// The request's record before it is answered.
fn begin(app: &App, deployed: &Deployed) -> ServedRecord {
    let number = app.requests.fetch_add(1, Ordering::Relaxed);
    ServedRecord {
        id: format!("serve-{}-{number}", app.started_ms),
        timestamp: app.now_ms(),
        slice: "-".to_owned(),
        logical_model: deployed.config.table.logical_model.clone(),
        route: "-".to_owned(),
        model: None,
        reason: String::new(),
        score: None,
        status: Status::Error.name(),
        input_tokens: None,
        cached_input_tokens: None,
        output_tokens: None,
        ttft_ms: None,
        total_ms: None,
        finish_reason: None,
        cost_usd: None,
        prompt: None,
        messages: None,
    }
}

/// Writes a request that was refused before any route was called.
fn refuse(
    app: &App,
    mut record: ServedRecord,
    reason: &str,
    started: Instant,
    response: Response,
) -> Response {
    record.reason = reason.to_owned();
    record.total_ms = Some(started.elapsed().as_secs_f64() * 1e3);
    app.metrics
        .request(&record.route, reason, record.status, None);
    app.journal.write(record);
    response
}

/// The last user message's text: what the router scores and a verifier is
/// asked about.
fn last_user_text(request: &Value) -> String {
    let Some(message) = request["messages"].as_array().and_then(|messages| {
        messages
            .iter()
            .rev()
            .find(|message| message["role"] == "user")
    }) else {
        return String::new();
    };
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Authenticates, parses and decides; a refusal is the response to send,
/// with the reason the record gives.
fn decide(
    app: &App,
    headers: &HeaderMap,
    body: &[u8],
    record: &mut ServedRecord,
) -> Result<Decided, Box<Refused>> {
    let deployed = app.current();
    let identity: Identity = app
        .keys
        .authenticate(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok()),
        )
        .cloned()
        .ok_or_else(|| {
            refused(
                error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    None,
                    "a valid API key is required (Authorization: Bearer KEY)",
                ),
                "unauthorized",
            )
        })?;
    if app.strict_expiry && deployed.expired(app.clock.as_ref()) {
        return Err(refused(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                None,
                &format!(
                    "the signed route config expired at {}; --strict-expiry serves nothing past it",
                    deployed.config.expires_at
                ),
            ),
            "expired",
        ));
    }
    let bad = |param: &str, message: String| {
        refused(
            error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some(param),
                &message,
            ),
            "bad-request",
        )
    };
    let request: serde_json::Map<String, Value> = serde_json::from_slice(body)
        .map_err(|problem| bad("body", format!("the body is not a JSON object: {problem}")))?;
    let logical = &deployed.config.table.logical_model;
    match request.get("model") {
        Some(Value::String(model)) if model == logical => {}
        Some(Value::String(model)) => {
            return Err(refused(
                error(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    Some("model"),
                    &format!(
                        "the model {model:?} does not exist here; this endpoint serves {logical:?}"
                    ),
                ),
                "unknown-model",
            ));
        }
        _ => return Err(bad("model", "model is required (a string)".to_owned())),
    }
    match request.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => {}
        _ => {
            return Err(bad(
                "messages",
                "messages is required (a non-empty array)".to_owned(),
            ));
        }
    }
    let claimed = match &deployed.serving.slice {
        SliceSource::Header(name) => headers
            .get(name.as_str())
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        SliceSource::Metadata(key) => request
            .get("metadata")
            .and_then(|metadata| metadata.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned),
        SliceSource::User => request
            .get("user")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    // The key decides the slice; a claim counts only where serve sits behind
    // a gateway that sets it.
    let slice = identity
        .slice
        .clone()
        .or(if app.trust_slice_header {
            claimed
        } else {
            None
        })
        .unwrap_or_else(|| identity.tenant.clone());
    record.slice = slice.clone();
    let value = Value::Object(request.clone());
    record.prompt = Some(last_user_text(&value));
    record.messages = request.get("messages").map(Value::to_string);
    let table = &deployed.config.table;
    let keys: Vec<&str> = if slice == identity.tenant {
        vec![&slice]
    } else {
        vec![&slice, &identity.tenant]
    };
    let constraints = applicable(table, &deployed.serving.constraints, &keys);
    let planned =
        plan(table, &slice, deployed.serving.unknown_slice, &constraints).map_err(|refusal| {
            let reason = match refusal {
                Refusal::UnknownSlice(_) => "unknown-slice",
                Refusal::NoAllowedRoute { .. } => "constrained",
            };
            refused(
                error(
                    StatusCode::FORBIDDEN,
                    "permission_error",
                    None,
                    &refusal.to_string(),
                ),
                reason,
            )
        })?;
    let (score, tier) = match &planned {
        Plan::Predictive { .. } => {
            let score = match &deployed.serving.scorer {
                Some(Scorer::Builtin { .. }) => {
                    let router = deployed.router.as_ref().expect("loaded with the config");
                    stored_score(router.score(&featurise(&last_user_text(&value), &slice)))
                }
                Some(Scorer::External(external)) => headers
                    .get(external.header.as_str())
                    .and_then(|value| value.to_str().ok())
                    .and_then(|text| text.trim().parse::<f64>().ok())
                    .filter(|score| score.is_finite())
                    .ok_or_else(|| {
                        bad(
                            &external.header,
                            format!(
                                "the header {} must carry {} {}'s score, a number",
                                external.header, external.name, external.version
                            ),
                        )
                    })?,
                None => unreachable!("a predictive config pins its scorer"),
            };
            (Some(score), planned.tier_for_score(score))
        }
        _ => (None, 0),
    };
    Ok(Decided {
        request,
        deployed,
        slice,
        plan: planned,
        score,
        tier,
    })
}

fn routes_of(plan: &Plan) -> Vec<&str> {
    match plan {
        Plan::Route { route, .. } => vec![route],
        Plan::Predictive { tiers, .. } => tiers.iter().map(String::as_str).collect(),
        Plan::Cascade { stages, .. } => stages.iter().map(String::as_str).collect(),
    }
}

/// A body too large (413) or unreadable, as an OpenAI-style error, recorded.
fn unreadable_body(app: &App, rejection: &BytesRejection) -> Response {
    let deployed = app.current();
    let record = begin(app, &deployed);
    let status = rejection.status();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "the request body is larger than --max-body-bytes".to_owned()
    } else {
        rejection.body_text()
    };
    refuse(
        app,
        record,
        "bad-request",
        Instant::now(),
        error(status, "invalid_request_error", Some("body"), &message),
    )
}

/// The estimated tokens of a conversation's contents, as `run` estimates a
/// prompt whose endpoint reported no usage.
fn content_tokens(messages: &str) -> u64 {
    serde_json::from_str::<Vec<Value>>(messages)
        .unwrap_or_default()
        .iter()
        .filter_map(|message| message["content"].as_str())
        .map(estimate_tokens)
        .sum()
}

/// `POST /v1/route`: the decision, with no call made.
pub async fn route(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable_body(&app, &rejection),
    };
    let deployed = app.current();
    let mut record = begin(&app, &deployed);
    let started = Instant::now();
    let decided = match decide(&app, &headers, &body, &mut record) {
        Ok(decided) => decided,
        Err(refusal) => {
            return refuse(&app, record, refusal.reason, started, refusal.response);
        }
    };
    let routes = routes_of(&decided.plan);
    let (route, reason) = match &decided.plan {
        Plan::Cascade { .. } => (routes[0], "cascade-start".to_owned()),
        plan => (
            routes[decided.tier],
            plan.reason(&decided.deployed.config.table, decided.tier),
        ),
    };
    let thresholds = match &decided.plan {
        Plan::Predictive { thresholds, .. } | Plan::Cascade { thresholds, .. } => {
            thresholds.clone()
        }
        Plan::Route { .. } => Vec::new(),
    };
    let config = &decided.deployed.config;
    let tier_name = config
        .table
        .route(route)
        .map(|found| found.tier.name().to_owned());
    axum::Json(json!({
        "schema_version": ROUTE_DECISION_SCHEMA_VERSION,
        "logical_model": config.table.logical_model,
        "slice": decided.slice,
        "policy": config.table.policy.kind(),
        "route": route,
        "model": decided.deployed.upstreams.get(route).map(|upstream| upstream.model.clone()),
        "tier": tier_name,
        "routes": routes,
        "score": decided.score,
        "thresholds": thresholds.iter().map(|threshold| crate::schema::Threshold(*threshold)).collect::<Vec<_>>(),
        "verifier": match &decided.plan { Plan::Cascade { verifier, .. } => Some(verifier.clone()), _ => None },
        "reason": reason,
        "config_id": config.config_id,
        "config_version": config.version,
        "config_sha256": decided.deployed.sha256,
    }))
    .into_response()
}

/// One upstream call's response, before its body is read.
struct Called {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    response: reqwest::Response,
}

/// Where the client's body comes from: the upstream's, as it arrives, or a
/// cascade stage's answer read whole and verified.
enum Source {
    Stream(reqwest::Response),
    Buffered(Vec<u8>),
}

async fn call(
    app: &App,
    upstream: &Upstream,
    body: &serde_json::Map<String, Value>,
) -> Result<Called, String> {
    let mut body = body.clone();
    body.insert("model".to_owned(), Value::String(upstream.model.clone()));
    let mut request = app
        .http
        .post(&upstream.chat_url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).expect("JSON serialises"));
    if let Some(key) = &upstream.api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|problem| {
        format!(
            "the upstream at {} did not answer: {}",
            upstream.chat_url,
            without_url(&problem)
        )
    })?;
    Ok(Called {
        status: StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
        content_type: response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| HeaderValue::from_bytes(value.as_bytes()).ok()),
        response,
    })
}

fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), "");
    }
    text
}

fn is_sse(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// The record finished when the answer's last byte has gone (or the
/// client went away), however the body ends.
struct Finishing {
    app: Arc<App>,
    record: Option<ServedRecord>,
    started: Instant,
    answer: Answer,
    sse: bool,
    body: Vec<u8>,
    upstream: Upstream,
    /// What earlier calls of a cascade cost.
    spent_before: f64,
    first_byte: Option<f64>,
    finished: bool,
}

impl Finishing {
    fn feed(&mut self, chunk: &[u8]) {
        if self.first_byte.is_none() {
            self.first_byte = Some(self.started.elapsed().as_secs_f64() * 1e3);
        }
        if self.sse {
            self.answer.feed_sse(chunk);
        } else {
            self.body.extend_from_slice(chunk);
        }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        if !self.sse {
            self.answer = Answer::of_json(&self.body);
        }
        let answer = &self.answer;
        record.total_ms = Some(self.started.elapsed().as_secs_f64() * 1e3);
        record.ttft_ms = self.first_byte;
        record.model = answer.model.clone().or(record.model.take());
        // A stream without usage is counted as the run counts it.
        let input = answer.input_tokens.or_else(|| {
            answer
                .model
                .is_some()
                .then(|| record.messages.as_deref().map_or(0, content_tokens))
        });
        let output = answer.output_tokens.or_else(|| {
            answer
                .model
                .is_some()
                .then(|| estimate_tokens(&answer.text))
        });
        record.input_tokens = input;
        record.cached_input_tokens = answer.cached_input_tokens.or(input.map(|_| 0));
        record.output_tokens = output;
        record.finish_reason = answer.finish_reason.clone();
        let own = input.zip(output).map(|(input, output)| {
            self.upstream
                .cost(input, answer.cached_input_tokens.unwrap_or(0), output)
        });
        record.cost_usd = own.map(|own| own + self.spent_before);
        if !self.finished {
            record.status = Status::Error.name();
            record.finish_reason = Some("client_disconnected".to_owned());
        }
        self.app
            .metrics
            .request(&record.route, &record.reason, record.status, record.ttft_ms);
        self.app.journal.write(record);
    }
}

/// The client's response: the upstream's status and bytes, streamed as they
/// arrive, with the decision in headers; the record is written at its end.
fn pass_through(
    mut finishing: Finishing,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    headers: Vec<(&'static str, String)>,
    source: Source,
) -> Response {
    let mut builder = Response::builder().status(status);
    if let Some(content_type) = &content_type {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            builder = builder.header(name, value);
        }
    }
    let body = match source {
        Source::Buffered(bytes) => {
            finishing.feed(&bytes);
            finishing.finished = true;
            drop(finishing);
            Body::from(bytes)
        }
        Source::Stream(response) => {
            let stream = response.bytes_stream();
            let body = futures_util::stream::unfold(
                (stream, finishing),
                |(mut stream, mut finishing)| async move {
                    match stream.next().await {
                        Some(Ok(chunk)) => {
                            finishing.feed(&chunk);
                            Some((Ok::<Bytes, std::io::Error>(chunk), (stream, finishing)))
                        }
                        Some(Err(problem)) => {
                            if let Some(record) = finishing.record.as_mut() {
                                record.finish_reason = Some("upstream_cut".to_owned());
                            }
                            Some((
                                Err(std::io::Error::other(without_url(&problem))),
                                (stream, finishing),
                            ))
                        }
                        None => {
                            finishing.finished = true;
                            drop(finishing);
                            None
                        }
                    }
                },
            );
            Body::from_stream(body)
        }
    };
    builder.body(body).expect("a valid response")
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable_body(&app, &rejection),
    };
    let started = Instant::now();
    let deployed = app.current();
    let mut record = begin(&app, &deployed);
    let decided = match decide(&app, &headers, &body, &mut record) {
        Ok(decided) => decided,
        Err(refusal) => {
            return refuse(&app, record, refusal.reason, started, refusal.response);
        }
    };
    let request = &decided.request;
    record.score = decided.score;
    let deployed = decided.deployed.clone();
    let table = &deployed.config.table;
    let decision_headers = |route: &str, tier: usize| {
        vec![
            ("x-routeval-route", route.to_owned()),
            (
                "x-routeval-tier",
                table
                    .route(route)
                    .map_or_else(|| tier.to_string(), |found| found.tier.name().to_owned()),
            ),
            (
                "x-routeval-config-version",
                deployed.config.version.to_string(),
            ),
        ]
    };
    let (stages, verifier): (Vec<String>, Option<String>) = match &decided.plan {
        Plan::Cascade {
            stages, verifier, ..
        } => (stages.clone(), Some(verifier.clone())),
        plan => (vec![routes_of(plan)[decided.tier].to_owned()], None),
    };
    let mut spent = 0.0;
    for (stage, route) in stages.iter().enumerate() {
        let upstream = deployed
            .upstreams
            .get(route)
            .expect("every route has an upstream")
            .clone();
        record.route = route.clone();
        record.reason = decided.plan.reason(
            table,
            if verifier.is_some() {
                stage
            } else {
                decided.tier
            },
        );
        let called = match call(&app, &upstream, request).await {
            Ok(called) => called,
            Err(problem) => {
                record.reason = format!("{}:upstream-unreachable", record.reason);
                return refuse(
                    &app,
                    record,
                    "upstream-unreachable",
                    started,
                    error(StatusCode::BAD_GATEWAY, "upstream_error", None, &problem),
                );
            }
        };
        let sse = is_sse(called.content_type.as_ref());
        if !called.status.is_success() {
            record.status = Status::from_http(called.status.as_u16()).name();
        } else {
            record.status = Status::Ok.name();
        }
        let last = stage + 1 == stages.len();
        let finishing = Finishing {
            app: app.clone(),
            record: None,
            started,
            answer: Answer::default(),
            sse,
            body: Vec::new(),
            upstream: upstream.clone(),
            spent_before: spent,
            first_byte: None,
            finished: false,
        };
        if last || !called.status.is_success() {
            let mut finishing = finishing;
            finishing.record = Some(record);
            let Called {
                status,
                content_type,
                response,
            } = called;
            return pass_through(
                finishing,
                status,
                content_type,
                decision_headers(route, stage),
                Source::Stream(response),
            );
        }
        // A cascade stage before the last: its answer is read whole and
        // verified before the client sees any of it.
        let Called {
            status,
            content_type,
            response,
        } = called;
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes.to_vec(),
            Err(problem) => {
                return refuse(
                    &app,
                    record,
                    "upstream-cut",
                    started,
                    error(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        None,
                        &without_url(&problem),
                    ),
                );
            }
        };
        let answer = if sse {
            let mut answer = Answer::default();
            answer.feed_sse(&bytes);
            answer
        } else {
            Answer::of_json(&bytes)
        };
        let own = upstream.cost(
            answer.input_tokens.unwrap_or(0),
            answer.cached_input_tokens.unwrap_or(0),
            answer.output_tokens.unwrap_or(0),
        );
        let verifier_route = verifier.as_deref().expect("a cascade");
        let (score, verifier_cost) =
            match verify(&app, &deployed, verifier_route, request, &answer.text).await {
                Ok(verdict) => verdict,
                Err(problem) => {
                    record.score = None;
                    return refuse(
                        &app,
                        record,
                        "verifier-failed",
                        started,
                        error(StatusCode::BAD_GATEWAY, "upstream_error", None, &problem),
                    );
                }
            };
        spent += own + verifier_cost;
        record.score = Some(score);
        if !decided.plan.escalates_from(stage, score) {
            let mut finishing = finishing;
            finishing.spent_before = spent - own;
            finishing.record = Some(record);
            return pass_through(
                finishing,
                status,
                content_type,
                decision_headers(route, stage),
                Source::Buffered(bytes),
            );
        }
    }
    unreachable!("the last stage always answers")
}

/// The verifier's reject score for `answer`, and what asking it cost.
async fn verify(
    app: &App,
    deployed: &Deployed,
    route: &str,
    request: &serde_json::Map<String, Value>,
    answer: &str,
) -> Result<(f64, f64), String> {
    let verifier = deployed
        .verifier
        .as_ref()
        .ok_or("the config pins no verifier")?;
    let upstream = deployed
        .upstreams
        .get(route)
        .ok_or("the verifier has no route")?;
    let question = last_user_text(&Value::Object(request.clone()));
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
    let called = call(app, upstream, &body).await?;
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

/// `GET /v1/models`.
pub async fn models(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": deployed.config.table.logical_model,
            "object": "model",
            "created": deployed.config.created_at,
            "owned_by": "routeval",
        }],
    }))
    .into_response()
}

pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    let text = app.metrics.render(
        deployed.config.version,
        &deployed.config.config_id,
        deployed.expired(app.clock.as_ref()),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready while the served config is in date.
pub async fn readyz(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    if deployed.expired(app.clock.as_ref()) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the signed config {} version {} expired at {}\n",
                deployed.config.config_id, deployed.config.version, deployed.config.expires_at
            ),
        )
            .into_response()
    } else {
        format!(
            "ready: {} version {}\n",
            deployed.config.config_id, deployed.config.version
        )
        .into_response()
    }
}
