//! The endpoints but the decision API: `POST /v1/chat/completions` (decide,
//! call the route, pass its bytes through, or a cascade's stages in turn),
//! `GET /v1/models`, `GET /metrics`, `GET /healthz`, `GET /readyz`; and
//! what every request shares ([`App`]) and how a refusal is answered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::policy::Plan;
use crate::records::Status;

use super::admission::{Admission, Full, Slot};
use super::answer::Answer;
use super::cascade::verify;
use super::decision::{Decided, admit, routes_of};
use super::deployed::Deployed;
use super::forward::{
    CallFailed, Called, Ending, Finishing, Source, Timeouts, call, first_chunk, is_sse,
    pass_through, without_url,
};
use super::journal::{Journal, ServedRecord};
use super::keys::Keys;
use super::metrics::Metrics;

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
    pub admission: Admission,
    pub timeouts: Timeouts,
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

/// The request's record before it is answered.
pub(super) fn begin(app: &App, deployed: &Deployed) -> ServedRecord {
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
        config_version: deployed.config.version,
        config_sha256: deployed.sha256.clone(),
    }
}

/// Writes a request that was refused before any route was called.
pub(super) fn refuse(
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

/// A body too large (413) or unreadable, as an OpenAI-style error, recorded.
pub(super) fn unreadable_body(app: &App, rejection: &BytesRejection) -> Response {
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

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (decided, mut record, started) = match admit(&app, &headers, body) {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    record.score = decided.score;
    let total = match app.admission.request() {
        Ok(slot) => slot,
        Err(full) => return overloaded(&app, record, started, full),
    };
    let mut total = Some(total);
    let (stages, cascade) = match &decided.plan {
        Plan::Cascade { stages, .. } => (stages.clone(), true),
        plan => (vec![routes_of(plan)[decided.tier].to_owned()], false),
    };
    let mut spent = 0.0;
    for (stage, route) in stages.iter().enumerate() {
        let tier = if cascade { stage } else { decided.tier };
        record.route = route.clone();
        record.reason = decided.plan.reason(&decided.deployed.config.table, tier);
        let call = StageCall {
            app: &app,
            decided: &decided,
            route,
            stage,
            last: stage + 1 == stages.len(),
            started,
        };
        match call.answer(record, &mut spent, &mut total).await {
            Stage::Answered(response) => return response,
            Stage::Escalated(kept) => record = *kept,
        }
    }
    unreachable!("the last stage always answers")
}

/// One route's turn at a request: the only one, or a cascade's stage.
struct StageCall<'a> {
    app: &'a Arc<App>,
    decided: &'a Decided,
    route: &'a str,
    stage: usize,
    last: bool,
    started: Instant,
}

/// How a stage ended: the client's response, or (a cascade stage whose
/// answer the verifier rejected) the record, for the next stage.
enum Stage {
    Answered(Response),
    Escalated(Box<ServedRecord>),
}

impl StageCall<'_> {
    fn headers(&self) -> Vec<(&'static str, String)> {
        let config = &self.decided.deployed.config;
        let tier = config.table.route(self.route).map_or_else(
            || self.stage.to_string(),
            |found| found.tier.name().to_owned(),
        );
        vec![
            ("x-routeval-route", self.route.to_owned()),
            ("x-routeval-tier", tier),
            ("x-routeval-config-version", config.version.to_string()),
        ]
    }

    /// A call that gave no response: unreachable (502), or no first byte
    /// in time (504, recorded as a timeout).
    fn call_failed(&self, mut record: ServedRecord, failed: CallFailed) -> Stage {
        match failed {
            CallFailed::Unreachable(problem) => {
                self.failed(record, "upstream-unreachable", &problem)
            }
            CallFailed::TimedOut => {
                record.status = Status::Timeout.name();
                Stage::Answered(refuse(
                    self.app,
                    record,
                    "timeout:first-token",
                    self.started,
                    error(
                        StatusCode::GATEWAY_TIMEOUT,
                        "timeout",
                        None,
                        &format!(
                            "route {:?} gave no first token within --first-token-timeout-ms ({} ms)",
                            self.route,
                            self.app.timeouts.first_token.as_millis()
                        ),
                    ),
                ))
            }
        }
    }

    fn failed(&self, record: ServedRecord, reason: &str, message: &str) -> Stage {
        Stage::Answered(refuse(
            self.app,
            record,
            reason,
            self.started,
            error(StatusCode::BAD_GATEWAY, "upstream_error", None, message),
        ))
    }

    /// Calls the route; passes its answer on, or (a cascade stage before the
    /// last) reads it whole, asks the verifier, and releases it or escalates.
    /// The request's slot (`total`) and the route's go with the answer,
    /// given back when its last byte has gone.
    async fn answer(
        &self,
        mut record: ServedRecord,
        spent: &mut f64,
        total: &mut Option<Slot>,
    ) -> Stage {
        let route_slot = match self.app.admission.route(self.route) {
            Ok(slot) => slot,
            Err(full) => {
                return Stage::Answered(overloaded(self.app, record, self.started, full));
            }
        };
        let deployed = &self.decided.deployed;
        let upstream = deployed
            .upstreams
            .get(self.route)
            .expect("every route has an upstream")
            .clone();
        let timeouts = self.app.timeouts;
        let first_token = tokio::time::Instant::now() + timeouts.first_token;
        let total_deadline = tokio::time::Instant::from_std(self.started) + timeouts.total;
        let called = match call(self.app, &upstream, &self.decided.request, first_token).await {
            Ok(called) => called,
            Err(failed) => return self.call_failed(record, failed),
        };
        let sse = is_sse(called.content_type.as_ref());
        let answered = called.status.is_success();
        record.status = Status::from_http(called.status.as_u16()).name();
        let mut finishing = Finishing {
            app: self.app.clone(),
            record: None,
            started: self.started,
            answer: Answer::default(),
            sse,
            body: Vec::new(),
            upstream: upstream.clone(),
            spent_before: *spent,
            first_byte: None,
            ending: Ending::default(),
            slots: Vec::new(),
        };
        let Called {
            status,
            content_type,
            response,
        } = called;
        if self.last || !answered {
            // The client's status waits for the first byte: a route that
            // gives none in time is a 504, not a 200 that never starts.
            let source = match first_chunk(response, first_token.min(total_deadline)).await {
                Ok(source) => source,
                Err(failed) => return self.call_failed(record, failed),
            };
            finishing.record = Some(record);
            finishing.slots.extend(total.take());
            finishing.slots.push(route_slot);
            return Stage::Answered(pass_through(
                finishing,
                status,
                content_type,
                self.headers(),
                source,
            ));
        }
        // A cascade stage before the last: its answer is read whole and
        // verified before the client sees any of it.
        let bytes = match tokio::time::timeout_at(total_deadline, response.bytes()).await {
            Ok(Ok(bytes)) => bytes.to_vec(),
            Ok(Err(problem)) => {
                return self.failed(record, "upstream-cut", &without_url(&problem));
            }
            Err(_) => return self.call_failed(record, CallFailed::TimedOut),
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
        let Plan::Cascade { verifier, .. } = &self.decided.plan else {
            unreachable!("only a cascade has stages before the last")
        };
        let verdict = verify(
            self.app,
            deployed,
            verifier,
            &self.decided.request,
            &answer.text,
            total_deadline,
        )
        .await;
        let (score, verifier_cost) = match verdict {
            Ok(verdict) => verdict,
            Err(problem) => {
                record.score = None;
                return self.failed(record, "verifier-failed", &problem);
            }
        };
        *spent += own + verifier_cost;
        record.score = Some(score);
        if self.decided.plan.escalates_from(self.stage, score) {
            return Stage::Escalated(Box::new(record));
        }
        finishing.spent_before = *spent - own;
        finishing.record = Some(record);
        finishing.slots.extend(total.take());
        finishing.slots.push(route_slot);
        Stage::Answered(pass_through(
            finishing,
            status,
            content_type,
            self.headers(),
            Source::Buffered(bytes),
        ))
    }
}

/// A 429 with `Retry-After` for a request beyond an admission bound,
/// recorded as rate limited with the bound that refused it.
fn overloaded(app: &App, mut record: ServedRecord, started: Instant, full: Full) -> Response {
    record.status = Status::RateLimited.name();
    let which = match full {
        Full::Total => "serve has --max-in-flight requests in flight",
        Full::Route => "the route has --max-in-flight-per-route requests in flight",
    };
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        None,
        &format!("{which}; retry after a second"),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    refuse(app, record, full.reason(), started, response)
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
        app.admission.in_flight(),
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
