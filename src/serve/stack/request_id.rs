//! The layer that names every request: its id goes into the request (for
//! its record and its upstream calls) and onto the response, whatever
//! answered it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use super::super::app::{App, REQUEST_ID, RequestId};

/// The longest request id a client may give; a longer one, or one with
/// anything but letters, digits and `-_.:`, is replaced by serve's own.
const MAX_REQUEST_ID: usize = 128;

fn client_request_id(headers: &HeaderMap) -> Option<String> {
    let id = headers.get(REQUEST_ID)?.to_str().ok()?.trim();
    let plain = !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte));
    plain.then(|| id.to_owned())
}

pub(super) async fn name(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let id = client_request_id(request.headers()).unwrap_or_else(|| {
        let number = app.requests.fetch_add(1, Ordering::Relaxed);
        format!("serve-{}-{number}", app.settings.started_ms)
    });
    let value = HeaderValue::from_str(&id).expect("a request id is a plain token");
    request.extensions_mut().insert(RequestId(id));
    let mut response = next.run(request).await;
    response.headers_mut().insert(REQUEST_ID, value);
    response
}
