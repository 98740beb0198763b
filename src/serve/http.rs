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

use super::admission::{Admission, Full};
use super::decision::{admit, routes_of};
use super::deployed::Deployed;
use super::forward::{Timeouts, message_tokens};
use super::journal::{Journal, ServedRecord};
use super::keys::Keys;
use super::metrics::Metrics;
use super::resilience::Resilience;
use super::stage::{Stage, StageCall};

/// What every request shares.
pub struct App {
    pub deployed: RwLock<Arc<Deployed>>,
    /// The `--shadow` candidate, decided for every request and never served.
    pub shadow: Option<Arc<Deployed>>,
    pub keys: Keys,
    pub trust_slice_header: bool,
    pub strict_expiry: bool,
    pub clock: Arc<dyn Clock + Send + Sync>,
    pub http: reqwest::Client,
    pub journal: Journal,
    pub metrics: Metrics,
    pub admission: Admission,
    pub timeouts: Timeouts,
    pub resilience: Resilience,
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
        shadow_route: None,
        shadow_reason: None,
        shadow_score: None,
        shadow_config_version: None,
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
    let (prompt_tokens, most) = requested_tokens(&decided.request);
    let tokens = prompt_tokens + most;
    let mut held = vec![total];
    if let Some(limit) = decided.deployed.serving.tenant_limit(&decided.tenant) {
        match app
            .admission
            .tenant(&decided.tenant, limit, record.timestamp as f64, tokens)
        {
            Ok(slot) => held.extend(slot),
            Err(full) => return overloaded(&app, record, started, full),
        }
    }
    app.resilience.request(record.timestamp as f64);
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
            tokens,
            prompt_tokens,
            arrival_ms: record.timestamp as f64,
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
    record.status = Status::RateLimited.name();
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
        &app.resilience.breakers(app.now_ms() as f64),
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
