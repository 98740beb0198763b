//! The outermost layer: cross-origin requests from the browser origins the
//! operator listed (`--cors-origin`), none by default. A preflight from a
//! listed origin is answered here, before the key layer, since a browser
//! never sends a key with one; an answer to a listed origin says which
//! of serve's headers its script may read. A request from an origin not
//! listed is served as any other, with no CORS header, so the browser
//! keeps the answer from its script; its preflight gets a 403 naming
//! the flag.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::super::app::App;
use super::super::origins::CorsOrigins;
use super::super::reply::error;
use super::Endpoint;

/// The headers of serve's answers a listed origin's script may read.
const EXPOSED: &str = "x-request-id, x-routeval-route, x-routeval-tier, x-routeval-config-version, retry-after, retry-after-ms, x-ratelimit-limit-requests, x-ratelimit-limit-tokens, x-ratelimit-remaining-requests, x-ratelimit-remaining-tokens, x-ratelimit-reset-requests, x-ratelimit-reset-tokens";

/// How long a browser may reuse a preflight's answer.
const PREFLIGHT_MAX_AGE_S: &str = "600";

pub(super) async fn allow(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let origins = &app.settings.cors_origins;
    let Some(sent) = request.headers().get(header::ORIGIN).cloned() else {
        return next.run(request).await;
    };
    if *origins == CorsOrigins::None {
        return next.run(request).await;
    }
    let allowed = origins.allows(&sent);
    if is_preflight(&request) {
        return preflight(&request, &sent, allowed);
    }
    let mut response = next.run(request).await;
    if let Some(allowed) = allowed {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
    }
    response
        .headers_mut()
        .append(header::VARY, HeaderValue::from_static("origin"));
    response
}

fn is_preflight(request: &Request) -> bool {
    request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The answer to a preflight: 204 allowing the path's method and the
/// headers asked for, or a 403 for an origin not listed or a path serve
/// does not serve.
fn preflight(request: &Request, sent: &HeaderValue, allowed: Option<HeaderValue>) -> Response {
    let path = request.uri().path();
    let Some(allowed) = allowed else {
        return error(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            None,
            &format!(
                "origin {} is not allowed here: serve's operator lists allowed origins with --cors-origin",
                sent.to_str().unwrap_or("(not text)")
            ),
        );
    };
    let Some(endpoint) = Endpoint::serving(path) else {
        return error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            None,
            &format!("{path} is not served here"),
        );
    };
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(endpoint.method()),
    );
    if let Some(asked) = asked_headers(request.headers()) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    }
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(PREFLIGHT_MAX_AGE_S),
    );
    headers.insert(header::VARY, HeaderValue::from_static("origin"));
    response
}

/// The request headers a preflight asked for, allowed as asked: serve
/// reads only the ones it knows, and a key is checked whatever header
/// carries it.
fn asked_headers(headers: &HeaderMap) -> Option<HeaderValue> {
    let asked = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS)?;
    let plain = asked
        .as_bytes()
        .iter()
        .all(|byte| byte.is_ascii_alphanumeric() || b"-_, ".contains(byte));
    plain.then(|| asked.clone())
}
