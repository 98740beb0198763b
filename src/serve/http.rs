//! The handlers, each at the bottom of its stack ([`super::stack`]):
//! `POST /v1/chat/completions` (the decided request's turn at its routes),
//! `POST /v1/route` (the decision alone), `GET /v1/models` and
//! `/v1/models/{id}`, `GET /metrics`, `GET /healthz` and `GET /readyz`. Handlers only decide and proxy:
//! the request id, the key, admission, the body and the decision are the
//! layers'.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::app::App;
use super::connections::Hangup;
use super::decision::decision_answer;
use super::deployed::Deployed;
use super::metrics::{BudgetGauges, Gauges, RecordsGauges};
use super::pending::take;
use super::reply::error;
use super::turn::run;

/// `POST /v1/chat/completions`: the decided request passed to its route
/// (or a cascade's stages in turn), its answer passed back byte for byte.
pub async fn chat(State(app): State<Arc<App>>, request: Request) -> Response {
    let pending = take(&request);
    let hangup = request.extensions().get::<Hangup>().cloned();
    let decided = pending
        .decided
        .expect("the decision layer decided the request");
    run(
        &app,
        &decided,
        pending.record,
        pending.started,
        pending.held,
        hangup,
    )
    .await
}

/// `POST /v1/route`: the decision, with no call made.
pub async fn decision(request: Request) -> Response {
    let mut pending = take(&request);
    // A decision alone is the gateway's to record, with its call; only a
    // refusal is serve's.
    pending.record.ledger.close();
    let decided = pending
        .decided
        .expect("the decision layer decided the request");
    axum::Json(decision_answer(&decided)).into_response()
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
        reload_refused: app.refused_reload.lock().expect("unpoisoned").is_some(),
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
        // A refused reload leaves this replica able to serve (on the running
        // version), so it stays ready, and says what it refused.
        let refused = app
            .refused_reload
            .lock()
            .expect("unpoisoned")
            .as_ref()
            .map_or_else(String::new, |why| format!("; refused a reload: {why}"));
        format!(
            "ready: {} version {}{refused}\n",
            deployed.config.config_id, deployed.config.version
        )
        .into_response()
    }
}
