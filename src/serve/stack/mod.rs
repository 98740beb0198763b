//! The request path, built top-down in the order a request meets it.
//!
//! Every request: a browser's preflight answered from the allowed origins
//! ([`cors`]), its id ([`request_id`]), then its key ([`authenticate`])
//! on every endpoint but the ones [`Endpoint::access`] lists public (the
//! probes and `/metrics`). A path serve does not serve answers an
//! OpenAI-style 404 without a key, saying what it serves.
//!
//! A request for an answer (`POST /v1/chat/completions`) then meets, in
//! turn: its record's ledger ([`ledger`]), its own task ([`detach`]), the
//! records' health ([`records_open`]), a slot in total and one of its
//! key's tenant ([`admission`]), its body's limit and deadline ([`body`]),
//! its decision ([`decide`]) and its tenant's tokens, then the handler,
//! which only proxies. A request for the
//! decision alone (`POST /v1/route`) meets the ledger, the body's limit
//! and the decision, then its handler answers the decision.

mod admission;
mod authenticate;
mod body;
mod cors;
mod decide;
mod detach;
mod ledger;
mod records_open;
mod request_id;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::Response;
use axum::routing::{MethodRouter, get, post};
use tower::ServiceBuilder;

use super::app::App;
use super::http;
use super::reply::error;

/// Whether an endpoint needs a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Keyed,
    Public,
}

/// Every endpoint serve answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Decision,
    Models,
    Model,
    Metrics,
    Healthz,
    Readyz,
}

impl Endpoint {
    pub const ALL: [Endpoint; 7] = [
        Endpoint::Chat,
        Endpoint::Decision,
        Endpoint::Models,
        Endpoint::Model,
        Endpoint::Metrics,
        Endpoint::Healthz,
        Endpoint::Readyz,
    ];

    /// Its path, as the router matches it.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Decision => "/v1/route",
            Endpoint::Models => "/v1/models",
            Endpoint::Model => "/v1/models/{id}",
            Endpoint::Metrics => "/metrics",
            Endpoint::Healthz => "/healthz",
            Endpoint::Readyz => "/readyz",
        }
    }

    /// Its method.
    pub fn method(self) -> &'static str {
        match self {
            Endpoint::Chat | Endpoint::Decision => "POST",
            _ => "GET",
        }
    }

    /// Whether it needs a key: the one list of public endpoints. A new
    /// endpoint does not compile until it is put on one side.
    pub fn access(self) -> Access {
        match self {
            Endpoint::Chat | Endpoint::Decision | Endpoint::Models | Endpoint::Model => {
                Access::Keyed
            }
            Endpoint::Metrics | Endpoint::Healthz | Endpoint::Readyz => Access::Public,
        }
    }

    /// Whether it decides for a request, so that its refusals are
    /// records.
    pub fn decides(self) -> bool {
        matches!(self, Endpoint::Chat | Endpoint::Decision)
    }

    /// The endpoint whose router path is `path`.
    pub fn at(path: &str) -> Option<Endpoint> {
        Endpoint::ALL
            .into_iter()
            .find(|endpoint| endpoint.path() == path)
    }

    /// The endpoint a request's own path (`/v1/models/gpt-x`) reaches.
    pub fn serving(path: &str) -> Option<Endpoint> {
        Endpoint::at(path).or_else(|| {
            let id = path.strip_prefix("/v1/models/")?;
            (!id.is_empty() && !id.contains('/')).then_some(Endpoint::Model)
        })
    }
}

/// The request path: every endpoint with its own stack, each behind the
/// key layer unless public, every request behind the request id.
pub(super) fn request_path(app: &Arc<App>) -> axum::Router {
    let mut router = axum::Router::new();
    for endpoint in Endpoint::ALL {
        if endpoint == Endpoint::Metrics && app.settings.metrics_apart {
            continue;
        }
        router = router.route(endpoint.path(), stack(app, endpoint));
    }
    router
        .route_layer(from_fn_with_state(app.clone(), authenticate::key))
        .method_not_allowed_fallback(wrong_method)
        .fallback(not_served)
        .layer(from_fn_with_state(app.clone(), request_id::name))
        .layer(from_fn_with_state(app.clone(), cors::allow))
        .with_state(app.clone())
}

/// The admin listener's paths (`--admin-listen`): the public endpoints,
/// `/metrics` among them, and nothing a client's key opens.
pub(super) fn admin_path(app: &Arc<App>) -> axum::Router {
    let mut router = axum::Router::new();
    for endpoint in Endpoint::ALL {
        if endpoint.access() == Access::Public {
            router = router.route(endpoint.path(), stack(app, endpoint));
        }
    }
    router.fallback(not_served).with_state(app.clone())
}

/// Every path serve does not serve: an OpenAI-style 404 that names the
/// keyed endpoints it does serve, so an SDK raises `NotFoundError` with a
/// message a person can act on.
async fn not_served(request: Request) -> Response {
    let served: Vec<String> = Endpoint::ALL
        .into_iter()
        .filter(|endpoint| endpoint.access() == Access::Keyed)
        .map(|endpoint| format!("{} {}", endpoint.method(), endpoint.path()))
        .collect();
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        None,
        &format!(
            "{} {} is not served here; routeval serve answers {}",
            request.method(),
            request.uri().path(),
            served.join(", ")
        ),
    )
}

/// A path serve answers, asked with another method: OpenAI's error body
/// (an SDK's `APIStatusError` with a message) and the `Allow` header, not
/// an empty 405.
async fn wrong_method(request: Request) -> Response {
    let path = request.uri().path();
    let Some(endpoint) = Endpoint::serving(path) else {
        return not_served(request).await;
    };
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        None,
        &format!(
            "{} {path} is not allowed; {path} answers {}",
            request.method(),
            endpoint.method()
        ),
    );
    response.headers_mut().insert(
        axum::http::header::ALLOW,
        axum::http::HeaderValue::from_static(endpoint.method()),
    );
    response
}

/// An endpoint's handler behind its own layers, outermost first.
fn stack(app: &Arc<App>, endpoint: Endpoint) -> MethodRouter<Arc<App>> {
    let state = || app.clone();
    match endpoint {
        Endpoint::Chat => post(http::chat).layer(
            ServiceBuilder::new()
                .layer(from_fn_with_state(state(), ledger::open))
                .layer(from_fn(detach::own_task))
                .layer(from_fn_with_state(state(), records_open::or_refuse))
                .layer(from_fn_with_state(state(), admission::total))
                .layer(from_fn_with_state(state(), admission::tenant_slot))
                .layer(from_fn_with_state(state(), body::read))
                .layer(from_fn_with_state(state(), decide::plan))
                .layer(from_fn_with_state(state(), admission::tenant_tokens)),
        ),
        Endpoint::Decision => post(http::decision).layer(
            ServiceBuilder::new()
                .layer(from_fn_with_state(state(), ledger::open))
                .layer(from_fn_with_state(state(), body::read))
                .layer(from_fn_with_state(state(), decide::plan)),
        ),
        Endpoint::Models => get(http::models),
        Endpoint::Model => get(http::model),
        Endpoint::Metrics => get(http::metrics),
        Endpoint::Healthz => get(http::healthz),
        Endpoint::Readyz => get(http::readyz),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_found_at_its_own_path_and_the_public_ones_decide_nothing() {
        for endpoint in Endpoint::ALL {
            assert_eq!(Endpoint::at(endpoint.path()), Some(endpoint));
            if endpoint.access() == Access::Public {
                assert!(!endpoint.decides(), "{endpoint:?}");
                assert_eq!(endpoint.method(), "GET", "{endpoint:?}");
            }
        }
        assert_eq!(Endpoint::at("/v1/embeddings"), None);
    }

    #[test]
    fn a_request_path_reaches_the_endpoint_whose_pattern_it_fills() {
        assert_eq!(Endpoint::serving("/v1/models/gpt-x"), Some(Endpoint::Model));
        assert_eq!(Endpoint::serving("/v1/models"), Some(Endpoint::Models));
        assert_eq!(
            Endpoint::serving("/v1/chat/completions"),
            Some(Endpoint::Chat)
        );
        for unserved in ["/v1/models/", "/v1/models/a/b", "/v1/embeddings"] {
            assert_eq!(Endpoint::serving(unserved), None, "{unserved}");
        }
    }
}
