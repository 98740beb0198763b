//! The endpoints but the decision API: `POST /v1/chat/completions` (decide,
//! call the route, pass its bytes through, or a cascade's stages in turn),
//! `GET /v1/models` and `/v1/models/{id}`, `GET /metrics`, `GET /healthz`,
//! `GET /readyz`, and an OpenAI-style 404 for everything else. Handlers
//! only decide and proxy: the request id, the key and the records of
//! refusals are the layers' ([`super::layers`], [`super::reply`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::policy::Plan;
use crate::records::{Reason, Refusal};

use super::app::App;
use super::decision::{admit, routes_of};
use super::deployed::Deployed;
use super::forward::message_tokens;
use super::keys::Identity;
use super::metrics::{BudgetGauges, Gauges, RecordsGauges};
use super::reply::{begin, error, overloaded, refuse};
use super::served::ServedRecord;
use super::turn::{Turn, TurnEnd};

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
        let record = unread(&app, &request);
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
    // Taken before the body is read, so requests beyond the bound cost
    // serve their headers only, whatever they upload.
    let total = match app.admission.request() {
        Ok(slot) => slot,
        Err(full) => {
            let record = unread(&app, &request);
            return overloaded(&app, record, Instant::now(), full);
        }
    };
    let (decided, mut record, started) = match admit(&app, request).await {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    record.score = decided.score;
    record.propensity = Some(decided.propensity);
    record.draw = Some(decided.draw);
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
    record.decided_route = Some(stages[0].clone().into());
    let mut spent = 0.0;
    for (stage, route) in stages.iter().enumerate() {
        let tier = if cascade { stage } else { decided.tier };
        record.route = route.clone().into();
        record.reason = Some(decided.plan.reason(&decided.deployed.config.table, tier));
        let call = Turn {
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
            TurnEnd::Answered(response) => return response,
            TurnEnd::Escalated(kept) => record = *kept,
        }
    }
    unreachable!("the last stage always answers")
}

/// The record of a request refused before its body was read: what its
/// key says of it (the tenant, and the key's slice where it has one).
fn unread(app: &App, request: &Request) -> ServedRecord {
    let mut record = begin(app, &app.current(), request);
    if let Some(identity) = request.extensions().get::<Identity>() {
        record.tenant = Some(identity.tenant.clone());
        if let Some(slice) = &identity.slice {
            record.slice = slice.clone().into();
        }
    }
    record
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
