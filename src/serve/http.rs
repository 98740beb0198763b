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
use super::reply::error_with_code;
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
    error_with_code(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        Some("model"),
        Some("model_not_found"),
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
        open_connections: app.open_connections.count(),
        started_s: app.settings.started_ms as f64 / 1e3,
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Whether this replica can serve traffic: not ready only while it would
/// refuse every request (`--strict-expiry` past the config's expiry,
/// `--records-fail closed` while the records cannot be written). What
/// every replica shares (the signed config's expiry, the records volume)
/// would otherwise take the whole fleet out of its load balancer at once,
/// though each could answer; those are alarms, said in the body (and in
/// `/metrics` and the log) while the replica stays ready.
pub async fn readyz(State(app): State<Arc<App>>) -> Response {
    let deployed = app.current();
    let expired = deployed.expired(app.clock.as_ref()).then(|| {
        format!(
            "the signed config expired at {}",
            deployed.config.expires_at
        )
    });
    let unwritable = app
        .journal
        .health
        .problem()
        .map(|problem| format!("the records cannot be written: {problem}"));
    let refusing = match (&expired, &unwritable) {
        (Some(expired), _) if app.settings.strict_expiry => Some(format!(
            "{expired}, and --strict-expiry refuses every request"
        )),
        (_, Some(unwritable)) if app.settings.records_fail_closed => Some(format!(
            "{unwritable}; --records-fail closed refuses requests until they can"
        )),
        _ => None,
    };
    let id = format!(
        "{} version {}",
        deployed.config.config_id, deployed.config.version
    );
    if let Some(refusing) = refusing {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {id}: {refusing}\n"),
        )
            .into_response();
    }
    let mut said = format!("ready: {id}");
    if let Some(why) = app.refused_reload.lock().expect("unpoisoned").as_ref() {
        said.push_str(&format!("; refused a reload: {why}"));
    }
    for alarm in [expired, unwritable].into_iter().flatten() {
        said.push_str(&format!("; alarm: {alarm}"));
    }
    format!("{said}\n").into_response()
}
