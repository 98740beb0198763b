//! The endpoints but the decision API: `POST /v1/chat/completions` (decide,
//! call the route, pass its bytes through, or a cascade's stages in turn),
//! `GET /v1/models` and `/v1/models/{id}`, `GET /metrics`, `GET /healthz`,
//! `GET /readyz`, and an OpenAI-style 404 for everything else; the request
//! id every response carries; what every request shares ([`App`]) and how a
//! refusal is answered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::policy::Plan;
use crate::records::{Reason, Refusal, Status};

use super::admission::{Admission, Full};
use super::decision::{admit, routes_of};
use super::deployed::Deployed;
use super::forward::{Timeouts, message_tokens};
use super::journal::{Journal, ServedRecord};
use super::keys::Keys;
use super::log::{Level, Log};
use super::metrics::{BudgetGauges, Gauges, Metrics, RecordsGauges};
use super::resilience::Resilience;
use super::stage::{Stage, StageCall};

/// What every request shares.
pub struct App {
    pub deployed: RwLock<Arc<Deployed>>,
    /// The `--shadow` candidate, decided for every request and never served.
    pub shadow: Option<Arc<Deployed>>,
    /// The clients' keys, replaced whole when the file reloads.
    pub keys: RwLock<Arc<Keys>>,
    pub trust_slice_header: bool,
    pub strict_expiry: bool,
    pub clock: Arc<dyn Clock + Send + Sync>,
    pub http: reqwest::Client,
    pub journal: Journal,
    /// `--max-body-bytes`.
    pub max_body_bytes: usize,
    /// `--records-fail closed`: no request is answered while the records
    /// cannot be written.
    pub records_fail_closed: bool,
    /// How many refusals for want of a valid key are journaled.
    pub unauthorized: RecordRate,
    pub metrics: Metrics,
    pub admission: Admission,
    pub timeouts: Timeouts,
    pub resilience: Resilience,
    pub requests: AtomicU64,
    /// Distinguishes this process's request ids from another's.
    pub started_ms: i64,
    /// What a record keeps of the conversation.
    pub records_prompts: super::RecordsPrompts,
    pub log: Arc<Log>,
    /// `--otlp-endpoint`: where traces go, if anywhere.
    pub tracing: Option<super::trace::Tracing>,
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

    pub fn keys(&self) -> Arc<Keys> {
        self.keys.read().expect("unpoisoned").clone()
    }

    /// A request's end: counted in `/metrics`, logged (with
    /// `--log-requests`, or when its answer broke) and journaled; its number
    /// in the journal's order.
    pub(super) fn finish(&self, record: ServedRecord) -> Option<u64> {
        self.observe(&record);
        self.journal(record)
    }

    /// An attempt beside a request (a route abandoned for the fallback, a
    /// hedge's cancelled call): counted by route, reason and status, and
    /// journaled.
    pub(super) fn finish_attempt(&self, record: ServedRecord) {
        self.metrics.attempt(&record);
        self.journal(record);
    }

    fn journal(&self, mut record: ServedRecord) -> Option<u64> {
        self.records_prompts.apply(&mut record);
        self.journal.write(record)
    }

    fn observe(&self, record: &ServedRecord) {
        record.trace.finish(record);
        self.metrics.request(record, record.tenant.as_deref());
        let broken = matches!(
            record.finish_reason.as_deref(),
            Some("upstream_cut" | "upstream_malformed" | "stall" | "total_deadline")
        );
        if broken {
            self.log
                .event(
                    Level::Warn,
                    "answer_broken",
                    format!(
                        "route {:?} gave its first byte, then its answer ended in {}; the client got an error, never another model's text",
                        record.route,
                        record.finish_reason.as_deref().unwrap_or_default()
                    ),
                )
                .field("request_id", record.id.clone())
                .field("route", record.route.clone())
                .field("finish_reason", record.finish_reason.clone())
                .field("ttft_ms", record.ttft_ms)
                .field("total_ms", record.total_ms)
                .emit();
        }
        if self.log.logs_requests() {
            self.log
                .event(
                    Level::Info,
                    "request",
                    format!(
                        "{} by {} ({})",
                        record.status.name(),
                        record.route,
                        record
                            .reason
                            .as_ref()
                            .map(Reason::to_string)
                            .unwrap_or_default()
                    ),
                )
                .field("request_id", record.id.clone())
                .field("slice", record.slice.clone())
                .field("tenant", record.tenant.clone())
                .field("route", record.route.clone())
                .field("model", record.model.clone())
                .field("reason", record.reason.as_ref().map(Reason::to_string))
                .field("status", record.status.name())
                .field("score", record.score)
                .field("ttft_ms", record.ttft_ms)
                .field("total_ms", record.total_ms)
                .field("input_tokens", record.input_tokens)
                .field("cached_input_tokens", record.cached_input_tokens)
                .field("output_tokens", record.output_tokens)
                .field("cost_usd", record.cost_usd)
                .field("finish_reason", record.finish_reason.clone())
                .field("config_version", record.config_version)
                .emit();
        }
    }

    pub(super) fn now_ms(&self) -> i64 {
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

/// The header that names a request, in both directions and upstream.
pub const REQUEST_ID: &str = "x-request-id";

/// The longest request id a client may give; a longer one, or one with
/// anything but letters, digits and `-_.:`, is replaced by serve's own.
const MAX_REQUEST_ID: usize = 128;

/// A request's id: the one its client sent in `x-request-id` where it is
/// a plain token, else serve's own, unique in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

fn client_request_id(headers: &HeaderMap) -> Option<String> {
    let id = headers.get(REQUEST_ID)?.to_str().ok()?.trim();
    let plain = !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte));
    plain.then(|| id.to_owned())
}

/// The layer that names every request: its id goes into the request (for
/// the record and the upstream call) and onto the response, whatever
/// answered it.
pub async fn request_id(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let id = client_request_id(request.headers()).unwrap_or_else(|| {
        let number = app.requests.fetch_add(1, Ordering::Relaxed);
        format!("serve-{}-{number}", app.started_ms)
    });
    let value = HeaderValue::from_str(&id).expect("a request id is a plain token");
    request.extensions_mut().insert(RequestId(id));
    let mut response = next.run(request).await;
    response.headers_mut().insert(REQUEST_ID, value);
    response
}

/// The id [`request_id`] gave a request.
pub(super) fn id_of(request: &Request) -> String {
    request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.0.clone())
        .expect("every request passes the request-id layer")
}

/// At most so many records a second; the rest counted as dropped.
#[derive(Debug)]
pub struct RecordRate {
    per_second: u32,
    /// The second being counted, and how many it has journaled.
    window: std::sync::Mutex<(i64, u32)>,
    pub dropped: AtomicU64,
}

impl RecordRate {
    pub fn new(per_second: u32) -> RecordRate {
        RecordRate {
            per_second,
            window: std::sync::Mutex::new((i64::MIN, 0)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether a record made at `now_ms` may be journaled.
    fn take(&self, now_ms: i64) -> bool {
        let mut window = self.window.lock().expect("unpoisoned");
        let second = now_ms.div_euclid(1000);
        if window.0 != second {
            *window = (second, 0);
        }
        if window.1 < self.per_second {
            window.1 += 1;
            true
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// The request's record before it is answered, and its trace begun.
pub(super) fn begin(app: &App, deployed: &Deployed, request: &Request) -> ServedRecord {
    let name = match request.uri().path() {
        "/v1/route" => "POST /v1/route",
        _ => "POST /v1/chat/completions",
    };
    let mut record = ServedRecord::arrived(
        id_of(request),
        app.now_ms(),
        &deployed.config.table.logical_model,
    );
    record.config_version = Some(deployed.config.version);
    record.config_sha256 = Some(deployed.sha256.clone().into());
    record.trace = super::trace::RequestTrace::begin(app.tracing.as_ref(), request.headers(), name);
    record
}

/// Writes a request that was refused, for `reason`, before any answer
/// reached the client.
pub(super) fn refuse(
    app: &App,
    mut record: ServedRecord,
    reason: Reason,
    started: Instant,
    response: Response,
) -> Response {
    record.reason = Some(reason);
    refused_as_recorded(app, record, started, response)
}

/// Writes a request that was refused for the reason its record gives.
pub(super) fn refused_as_recorded(
    app: &App,
    mut record: ServedRecord,
    started: Instant,
    response: Response,
) -> Response {
    record.total_ms = Some(started.elapsed().as_secs_f64() * 1e3);
    app.observe(&record);
    let unauthorized = record.reason == Some(Reason::Refused(Refusal::Unauthorized));
    if !unauthorized || app.unauthorized.take(record.timestamp_ms) {
        app.journal(record);
    }
    response
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(app): State<Arc<App>>, request: Request) -> Response {
    // Answered on a task of its own: a client that leaves stops waiting,
    // not the request, whose record is then finished (at the latest with
    // the route's first byte) as the client's leaving.
    tokio::spawn(answer_chat(app, request))
        .await
        .unwrap_or_else(|_| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                None,
                "serve failed while answering the request",
            )
        })
}

async fn answer_chat(app: Arc<App>, request: Request) -> Response {
    if app.records_fail_closed && app.journal.health.problem().is_some() {
        let deployed = app.current();
        let record = begin(&app, &deployed, &request);
        let response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            None,
            "serve cannot write its records now, and --records-fail closed refuses requests until it can",
        );
        return refuse(
            &app,
            record,
            Reason::Refused(Refusal::RecordsFailing),
            Instant::now(),
            response,
        );
    }
    let (decided, mut record, started) = match admit(&app, request).await {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    record.score = decided.score;
    let total = match app.admission.request() {
        Ok(slot) => slot,
        Err(full) => return overloaded(&app, record, started, full),
    };
    let (prompt_tokens, most) = requested_tokens(&decided.request);
    let tokens = prompt_tokens + most;
    let mut held = vec![total];
    if let Some(limit) = decided.deployed.serving.tenant_limit(&decided.tenant) {
        match app
            .admission
            .tenant(&decided.tenant, limit, record.timestamp_ms as f64, tokens)
        {
            Ok(slot) => held.extend(slot),
            Err(full) => return overloaded(&app, record, started, full),
        }
    }
    app.resilience.request(record.timestamp_ms as f64);
    let (stages, cascade) = match &decided.plan {
        Plan::Cascade { stages, .. } => (stages.clone(), true),
        plan => (vec![routes_of(plan)[decided.tier].to_owned()], false),
    };
    let mut spent = 0.0;
    for (stage, route) in stages.iter().enumerate() {
        let tier = if cascade { stage } else { decided.tier };
        record.route = route.clone().into();
        record.reason = Some(decided.plan.reason(&decided.deployed.config.table, tier));
        let call = StageCall {
            app: &app,
            decided: &decided,
            route,
            stage,
            last: stage + 1 == stages.len(),
            started,
            tokens,
            prompt_tokens,
            arrival_ms: record.timestamp_ms as f64,
        };
        match call.answer(record, &mut spent, &mut held).await {
            Stage::Answered(response) => return response,
            Stage::Escalated(kept) => record = *kept,
        }
    }
    unreachable!("the last stage always answers")
}

/// A 429 with `Retry-After` for a request beyond an admission bound,
/// recorded as rate limited with the bound that refused it.
pub(super) fn overloaded(
    app: &App,
    mut record: ServedRecord,
    started: Instant,
    full: Full,
) -> Response {
    record.status = Status::RateLimited;
    let which = match full {
        Full::Total => "serve has --max-in-flight requests in flight",
        Full::Route => "the route has --max-in-flight-per-route requests in flight",
        Full::Tenant => "the tenant has its max_in_flight requests in flight",
        Full::TenantTokens => "the tenant has reserved its tpm tokens this minute",
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

/// The request's conversation's estimated tokens, and the most it asks to
/// be generated: what a call reserves against a `tpm` is their sum.
fn requested_tokens(request: &serde_json::Map<String, Value>) -> (u64, u64) {
    let prompt = request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |messages| message_tokens(messages));
    let most = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|key| request.get(*key).and_then(Value::as_u64))
        .unwrap_or(0);
    (prompt, most)
}

/// The logical model as the OpenAI API lists a model.
fn model_object(deployed: &Deployed) -> Value {
    json!({
        "id": deployed.config.table.logical_model,
        "object": "model",
        "created": crate::clock::parse_rfc3339(&deployed.config.created_at).unwrap_or(0),
        "owned_by": "routeval",
    })
}

/// `GET /v1/models`.
pub async fn models(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    axum::Json(json!({"object": "list", "data": [model_object(&deployed)]})).into_response()
}

/// `GET /v1/models/{id}`: the logical model, or a 404 naming it.
pub async fn model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    let deployed = app.current();
    let logical = &deployed.config.table.logical_model;
    if &id == logical {
        return axum::Json(model_object(&deployed)).into_response();
    }
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        Some("model"),
        &format!("the model {id:?} does not exist here; this endpoint serves {logical:?}"),
    )
}

/// Every path serve does not serve: an OpenAI-style 404 that says what it
/// does serve, so an SDK raises `NotFoundError` with a message a person
/// can act on.
pub async fn not_served(request: Request) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        None,
        &format!(
            "{} {} is not served here; routeval serve answers POST /v1/chat/completions, POST /v1/route, GET /v1/models and GET /v1/models/{{id}}",
            request.method(),
            request.uri().path()
        ),
    )
}

pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    let health = &app.journal.health;
    let now_ms = app.now_ms() as f64;
    let (allowed, used) = app.resilience.budget_at(now_ms);
    let counts = &app.resilience.budget_counts;
    let load =
        |values: &[AtomicU64; 2]| values.each_ref().map(|value| value.load(Ordering::Relaxed));
    let text = app.metrics.render(&Gauges {
        config_version: deployed.config.version,
        config_id: &deployed.config.config_id,
        expired: deployed.expired(app.clock.as_ref()),
        expires_at_s: crate::clock::parse_rfc3339(&deployed.config.expires_at),
        in_flight: app.admission.in_flight(),
        breakers: &app.resilience.breakers(now_ms),
        records: RecordsGauges {
            writable: health.problem().is_none(),
            pending: health.pending(),
            write_errors: health.write_errors.load(Ordering::Relaxed),
            dropped: health.dropped.load(Ordering::Relaxed),
            unrecorded_refusals: app.unauthorized.dropped.load(Ordering::Relaxed),
        },
        budget: BudgetGauges {
            allowed,
            used,
            taken: load(&counts.taken),
            refused: load(&counts.refused),
        },
        log_lines_dropped: app.log.dropped.load(Ordering::Relaxed),
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready while the served config is in date and the records can be
/// written.
pub async fn readyz(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    if let Some(problem) = app.journal.health.problem() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the records cannot be written: {problem}\n"),
        )
            .into_response();
    }
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
