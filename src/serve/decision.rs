//! What a request asks for and what the signed table decides for it: the
//! key's identity, the parsed body, the slice, the plan and the score; and
//! the answer of `POST /v1/route`, the decision alone.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use opentelemetry::KeyValue;
use serde_json::{Value, json};

use crate::policy::{Plan, Refusal, applicable, draw, plan};
use crate::records::{self, Draw, Reason};
use crate::router_model::{featurise, stored_score};
use crate::routes::{ResolvedTable, Scorer, SliceSource};

use super::app::App;
use super::deployed::Deployed;
use super::draws::Draws;
use super::keys::Identity;
use super::members::Members;
use super::reply::{error, error_with_code};
use super::served::ServedRecord;
use super::witness::{Event, see};

/// The schema of `POST /v1/route`'s answer: version 2 added `propensity`
/// and `draw`.
pub const ROUTE_DECISION_SCHEMA_VERSION: u32 = 2;

/// A request refused before any route is called: the response, and the
/// reason its record gives.
pub(super) struct Refused {
    pub response: Response,
    pub reason: Reason,
}

pub(super) fn refused(response: Response, reason: Reason) -> Box<Refused> {
    Box::new(Refused { response, reason })
}

/// A request that passed authentication and parsing, and its decision.
pub(super) struct Decided {
    pub request: serde_json::Map<String, Value>,
    /// The body's members as sent: what a route is sent, `model` replaced.
    pub sent: Members,
    pub deployed: Arc<Deployed>,
    pub slice: String,
    pub plan: Plan,
    /// Predictive: the score and the tier it chose.
    pub score: Option<f64>,
    pub tier: usize,
    /// The probability the config gives that tier, and whether an
    /// exploration draw chose it.
    pub propensity: f64,
    pub draw: Draw,
    /// The routes the request's tenant may use: its fallbacks are these.
    pub allowed: Vec<String>,
    /// The tenant of the request's key.
    pub tenant: String,
    /// The request's id, which its record has and its upstream calls carry.
    pub request_id: String,
    /// The request's trace, for the spans of its calls.
    pub trace: super::trace::RequestTrace,
}

/// The last user message's text: what the router scores and a verifier is
/// asked about.
pub(super) fn last_user_text(request: &serde_json::Map<String, Value>) -> String {
    let Some(message) = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|messages| {
            messages
                .iter()
                .rev()
                .find(|message| message["role"] == "user")
        })
    else {
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

/// Parses and decides for an authenticated client; a refusal is the
/// response to send, with the reason the record gives.
pub(super) fn decide(
    app: &App,
    deployed: Arc<Deployed>,
    headers: &HeaderMap,
    identity: &Identity,
    body: &[u8],
    record: &mut ServedRecord,
) -> Result<Decided, Box<Refused>> {
    if app.settings.strict_expiry && deployed.expired(app.clock.as_ref()) {
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
            Reason::Refused(records::Refusal::Expired),
        ));
    }
    let request = parse(&deployed, body)?;
    let sent = serde_json::from_slice(body).unwrap_or_default();
    let slice = slice_for(app, headers, &deployed.serving.slice, &request, identity);
    let read = Event::Read {
        slice: &slice,
        tenant: &identity.tenant,
        messages: request.get("messages").map(ToString::to_string),
    };
    see(app, record, read);
    let prompt = last_user_text(&request);
    let chosen = choose(
        &deployed,
        headers,
        &slice,
        &identity.tenant,
        &prompt,
        Some(&app.draws),
    )?;
    if let Some(shadow) = &app.shadow {
        let shadowed = shadow_of(app, shadow, headers, &request, identity, &prompt);
        see(app, record, shadowed);
    }
    see(app, record, Event::Prompt(prompt));
    Ok(Decided {
        request,
        sent,
        deployed: deployed.clone(),
        slice,
        plan: chosen.plan,
        score: chosen.score,
        tier: chosen.tier,
        propensity: chosen.propensity,
        draw: chosen.draw,
        allowed: chosen.allowed,
        tenant: identity.tenant.clone(),
        request_id: record.id.to_string(),
        trace: record.trace.clone(),
    })
}

/// What a config decides for a request: its plan, the score and the tier
/// it chose with that tier's probability, and the routes the tenant may
/// use.
struct Chosen {
    plan: Plan,
    score: Option<f64>,
    tier: usize,
    propensity: f64,
    draw: Draw,
    allowed: Vec<String>,
}

/// What `deployed` decides for a request of `slice` from `tenant`, asking
/// `prompt`: constraints first, then the plan, then (predictive) the score
/// and, where the config explores and `draws` are given, the draw.
fn choose(
    deployed: &Deployed,
    headers: &HeaderMap,
    slice: &str,
    tenant: &str,
    prompt: &str,
    draws: Option<&Draws>,
) -> Result<Chosen, Box<Refused>> {
    let table = &deployed.config.table;
    let keys: Vec<&str> = if slice == tenant {
        vec![slice]
    } else {
        vec![slice, tenant]
    };
    let constraints = applicable(table, &deployed.serving.constraints, &keys);
    let plan =
        plan(table, slice, deployed.serving.unknown_slice, &constraints).map_err(|refusal| {
            let reason = match refusal {
                Refusal::UnknownSlice(_) => Reason::UnknownSlice,
                Refusal::NoAllowedRoute { .. } => Reason::Refused(records::Refusal::Constrained),
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
    let (score, tier) = match &plan {
        Plan::Predictive { .. } => {
            let score = score_for(deployed, headers, prompt, slice)?;
            (Some(score), plan.tier_for_score(score))
        }
        _ => (None, 0),
    };
    let drawn = match (&plan, &deployed.serving.explore, draws) {
        (Plan::Predictive { tiers, .. }, Some(explore), Some(draws)) => draw(
            explore.share_for(slice),
            tiers.len(),
            tier,
            draws.unit(),
            draws.unit(),
        ),
        _ => crate::policy::Drawn {
            tier,
            explored: false,
            propensity: 1.0,
        },
    };
    let allowed = table
        .routes
        .iter()
        .filter(|route| crate::policy::allowed(table, &constraints, &route.name))
        .map(|route| route.name.clone())
        .collect();
    Ok(Chosen {
        plan,
        score,
        tier: drawn.tier,
        propensity: drawn.propensity,
        draw: if drawn.explored {
            Draw::Explore
        } else {
            Draw::Policy
        },
        allowed,
    })
}

/// The route and reason a decision gives: a cascade's is where it starts.
fn route_and_reason<'a>(plan: &'a Plan, table: &ResolvedTable, tier: usize) -> (&'a str, Reason) {
    let routes = routes_of(plan);
    match plan {
        Plan::Cascade { .. } => (routes[0], Reason::CascadeStart),
        plan => (routes[tier], plan.reason(table, tier)),
    }
}

/// What the `--shadow` candidate would have decided: its route, reason
/// and score (a predictive candidate's costs no call; a cascade's is where
/// it would start, its verifier not asked), or the reason it would have
/// refused the request.
fn shadow_of<'a>(
    app: &App,
    shadow: &Deployed,
    headers: &HeaderMap,
    request: &serde_json::Map<String, Value>,
    identity: &Identity,
    prompt: &str,
) -> Event<'a> {
    let slice = slice_for(app, headers, &shadow.serving.slice, request, identity);
    let version = shadow.config.version;
    match choose(shadow, headers, &slice, &identity.tenant, prompt, None) {
        Ok(chosen) => {
            let (route, reason) = route_and_reason(&chosen.plan, &shadow.config.table, chosen.tier);
            Event::Shadowed {
                version,
                route: Some(route.to_owned()),
                reason,
                score: chosen.score,
            }
        }
        Err(refusal) => Event::Shadowed {
            version,
            route: None,
            reason: refusal.reason,
            score: None,
        },
    }
}

fn bad_request(param: &str, message: String) -> Box<Refused> {
    refused(
        error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some(param),
            &message,
        ),
        Reason::Refused(records::Refusal::BadRequest),
    )
}

/// The body as a chat request for the logical model, or a 400 or 404
/// naming the field.
fn parse(deployed: &Deployed, body: &[u8]) -> Result<serde_json::Map<String, Value>, Box<Refused>> {
    let request: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|problem| {
            bad_request("body", format!("the body is not a JSON object: {problem}"))
        })?;
    let logical = &deployed.config.table.logical_model;
    match request.get("model") {
        Some(Value::String(model)) if model == logical => {}
        Some(Value::String(model)) => {
            return Err(refused(
                error_with_code(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    Some("model"),
                    Some("model_not_found"),
                    &format!(
                        "the model {model:?} does not exist here; this endpoint serves {logical:?}"
                    ),
                ),
                Reason::Refused(records::Refusal::UnknownModel),
            ));
        }
        _ => {
            return Err(bad_request(
                "model",
                "model is required (a string)".to_owned(),
            ));
        }
    }
    match request.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => Ok(request),
        _ => Err(bad_request(
            "messages",
            "messages is required (a non-empty array)".to_owned(),
        )),
    }
}

/// The request's slice: its key's, else (where claims are trusted) the one
/// it claims, else its tenant's name.
fn slice_for(
    app: &App,
    headers: &HeaderMap,
    serving_slice: &SliceSource,
    request: &serde_json::Map<String, Value>,
    identity: &Identity,
) -> String {
    let claimed = match serving_slice {
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
    }
    .filter(|slice| !slice.trim().is_empty());
    // The key decides the slice; a claim counts only where serve sits behind
    // a gateway that sets it.
    identity
        .slice
        .clone()
        .or(if app.settings.trust_slice_header {
            claimed
        } else {
            None
        })
        .unwrap_or_else(|| identity.tenant.clone())
}

/// The predictive score: the pinned router's of the last user message, or
/// the external scorer's from its header.
fn score_for(
    deployed: &Deployed,
    headers: &HeaderMap,
    prompt: &str,
    slice: &str,
) -> Result<f64, Box<Refused>> {
    Ok(match &deployed.serving.scorer {
        Some(Scorer::Builtin { .. }) => {
            let router = deployed.router.as_ref().expect("loaded with the config");
            stored_score(router.score(&featurise(prompt, slice)))
        }
        Some(Scorer::External(external)) => headers
            .get(external.header.as_str())
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|score| score.is_finite())
            .ok_or_else(|| {
                bad_request(
                    &external.header,
                    format!(
                        "the header {} must carry {} {}'s score, a number",
                        external.header, external.name, external.version
                    ),
                )
            })?,
        None => unreachable!("a predictive config pins its scorer"),
    })
}

pub(super) fn routes_of(plan: &Plan) -> Vec<&str> {
    match plan {
        Plan::Route { route, .. } => vec![route],
        Plan::Predictive { tiers, .. } => tiers.iter().map(String::as_str).collect(),
        Plan::Cascade { stages, .. } => stages.iter().map(String::as_str).collect(),
    }
}

/// What the decision span says: the slice, the tenant, the policy, the
/// score and the routes planned.
pub(super) fn decision_attributes(decided: &Decided) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("routeval.slice", decided.slice.clone()),
        KeyValue::new("routeval.tenant", decided.tenant.clone()),
        KeyValue::new(
            "routeval.policy",
            decided.deployed.config.table.policy.kind(),
        ),
        KeyValue::new("routeval.tier", decided.tier as i64),
        KeyValue::new("routeval.routes", routes_of(&decided.plan).join(",")),
    ];
    if let Some(score) = decided.score {
        attributes.push(KeyValue::new("routeval.score", score));
    }
    attributes
}

/// What `POST /v1/route` answers: the decision, with no call made.
pub(super) fn decision_answer(decided: &Decided) -> Value {
    let routes = routes_of(&decided.plan);
    let (route, reason) =
        route_and_reason(&decided.plan, &decided.deployed.config.table, decided.tier);
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
    json!({
        "schema_version": ROUTE_DECISION_SCHEMA_VERSION,
        "logical_model": config.table.logical_model,
        "slice": decided.slice,
        "policy": config.table.policy.kind(),
        "route": route,
        "model": decided.deployed.upstreams.get(route).map(|upstream| upstream.model.clone()),
        "tier": tier_name,
        "routes": routes,
        "score": decided.score,
        "propensity": decided.propensity,
        "draw": decided.draw.name(),
        "thresholds": thresholds.iter().map(|threshold| crate::schema::Threshold(*threshold)).collect::<Vec<_>>(),
        "verifier": match &decided.plan { Plan::Cascade { verifier, .. } => Some(verifier.clone()), _ => None },
        "reason": reason,
        "config_id": config.config_id,
        "config_version": config.version,
        "config_sha256": decided.deployed.sha256,
    })
}
