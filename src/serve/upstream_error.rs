//! What a client reads when its route answers an error: the upstream's
//! own body only when it is an OpenAI-style error that gives nothing of the
//! route away.

use axum::http::StatusCode;
use futures_util::StreamExt;

use super::deployed::Upstream;
use super::settings::after;

/// Whether `bytes` from a route carry its credentials or its address (its
/// key, its URL, its host), which never reach a client.
pub(super) fn carries_secret(upstream: &Upstream, bytes: &[u8]) -> bool {
    let contains = |needle: &str| {
        !needle.is_empty()
            && bytes
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
    };
    let host = reqwest::Url::parse(&upstream.chat_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default();
    upstream.api_key.as_deref().is_some_and(contains)
        || contains(&upstream.chat_url)
        || contains(&host)
}

/// The most of an upstream's error body read, and how long it may take.
const MAX_ERROR_BODY_BYTES: usize = 64 << 10;
const ERROR_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The body a client gets for `route`'s error `status`: the upstream's own
/// when it is an OpenAI-style error that carries neither the route's key
/// nor its address, else serve's, naming the route and the status.
pub(super) async fn upstream_error_body(
    route: &str,
    upstream: &Upstream,
    status: StatusCode,
    response: reqwest::Response,
    total: tokio::time::Instant,
) -> Vec<u8> {
    let deadline = total.min(after(tokio::time::Instant::now(), ERROR_BODY_WAIT));
    let mut chunks = response.bytes_stream();
    let mut body = Vec::new();
    while body.len() <= MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout_at(deadline, chunks.next()).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let whole = body.len() <= MAX_ERROR_BODY_BYTES;
    let is_openai_error = whole
        && serde_json::from_slice::<serde_json::Value>(&body)
            .is_ok_and(|value| value.get("error").is_some_and(serde_json::Value::is_object));
    let secret = carries_secret(upstream, &body);
    if is_openai_error && !secret {
        return body;
    }
    let why = if secret {
        "its body was withheld: it carried the route's credentials or address"
    } else {
        "its body was not an OpenAI-style error"
    };
    let kind = if status == StatusCode::TOO_MANY_REQUESTS {
        "rate_limit_error"
    } else {
        "upstream_error"
    };
    serde_json::to_vec(&serde_json::json!({
        "error": {
            "message": format!("route {route:?} answered {status}; {why}"),
            "type": kind,
            "param": null,
            "code": status.as_u16().to_string(),
        }
    }))
    .expect("JSON serialises")
}
