//! Calling a route and passing its answer to the client: the request body
//! forwarded with only `model` replaced, the upstream's bytes streamed as
//! they arrive (or, for a verified cascade stage, released whole), and the
//! request's record finished when the last byte has gone or the client
//! went away.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::Value;

use crate::client::estimate_tokens;
use crate::records::Status;

use super::admission::Slot;
use super::answer::Answer;
use super::deployed::Upstream;
use super::http::App;
use super::journal::ServedRecord;

/// The estimated tokens of a conversation's contents, as `run` estimates a
/// prompt whose endpoint reported no usage.
fn content_tokens(messages: &str) -> u64 {
    serde_json::from_str::<Vec<Value>>(messages)
        .unwrap_or_default()
        .iter()
        .filter_map(|message| message["content"].as_str())
        .map(estimate_tokens)
        .sum()
}

/// The client's body with the route's model in place of the logical one
/// (or added, for a body that names none: the verifier's), serialised
/// without copying the body.
struct WithModel<'a> {
    body: &'a serde_json::Map<String, Value>,
    model: &'a str,
}

impl serde::Serialize for WithModel<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let others = self.body.iter().filter(|(key, _)| *key != "model");
        let mut map = serializer.serialize_map(Some(others.clone().count() + 1))?;
        map.serialize_entry("model", self.model)?;
        for (key, value) in others {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// One upstream call's response, before its body is read.
pub(super) struct Called {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub response: reqwest::Response,
}

/// Where the client's body comes from: the upstream's, as it arrives, or a
/// cascade stage's answer read whole and verified.
pub(super) enum Source {
    Stream(reqwest::Response),
    Buffered(Vec<u8>),
}

pub(super) async fn call(
    app: &App,
    upstream: &Upstream,
    body: &serde_json::Map<String, Value>,
) -> Result<Called, String> {
    let body = WithModel {
        body,
        model: &upstream.model,
    };
    let mut request = app
        .http
        .post(&upstream.chat_url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).expect("JSON serialises"));
    if let Some(key) = &upstream.api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|problem| {
        format!(
            "the upstream at {} did not answer: {}",
            upstream.chat_url,
            without_url(&problem)
        )
    })?;
    Ok(Called {
        status: StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
        content_type: response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| HeaderValue::from_bytes(value.as_bytes()).ok()),
        response,
    })
}

pub(super) fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), "");
    }
    text
}

pub(super) fn is_sse(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// The record finished when the answer's last byte has gone (or the
/// client went away), however the body ends.
pub(super) struct Finishing {
    pub app: Arc<App>,
    pub record: Option<ServedRecord>,
    pub started: Instant,
    pub answer: Answer,
    pub sse: bool,
    pub body: Vec<u8>,
    pub upstream: Upstream,
    /// What earlier calls of a cascade cost.
    pub spent_before: f64,
    pub first_byte: Option<f64>,
    pub finished: bool,
    /// Admission slots, given back with the answer's last byte.
    pub slots: Vec<Slot>,
}

impl Finishing {
    fn feed(&mut self, chunk: &[u8]) {
        if self.first_byte.is_none() {
            self.first_byte = Some(self.started.elapsed().as_secs_f64() * 1e3);
        }
        if self.sse {
            self.answer.feed_sse(chunk);
        } else {
            self.body.extend_from_slice(chunk);
        }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        if !self.sse {
            self.answer = Answer::of_json(&self.body);
        }
        let answer = &self.answer;
        record.total_ms = Some(self.started.elapsed().as_secs_f64() * 1e3);
        record.ttft_ms = self.first_byte;
        record.model = answer.model.clone().or(record.model.take());
        // A stream without usage is counted as the run counts it.
        let input = answer.input_tokens.or_else(|| {
            answer
                .model
                .is_some()
                .then(|| record.messages.as_deref().map_or(0, content_tokens))
        });
        let output = answer.output_tokens.or_else(|| {
            answer
                .model
                .is_some()
                .then(|| estimate_tokens(&answer.text))
        });
        record.input_tokens = input;
        record.cached_input_tokens = answer.cached_input_tokens.or(input.map(|_| 0));
        record.output_tokens = output;
        record.finish_reason = answer.finish_reason.clone();
        let own = input.zip(output).map(|(input, output)| {
            self.upstream
                .cost(input, answer.cached_input_tokens.unwrap_or(0), output)
        });
        record.cost_usd = own.map(|own| own + self.spent_before);
        if !self.finished {
            record.status = Status::Error.name();
            record.finish_reason = Some("client_disconnected".to_owned());
        }
        self.app
            .metrics
            .request(&record.route, &record.reason, record.status, record.ttft_ms);
        self.app.journal.write(record);
    }
}

/// The client's response: the upstream's status and bytes, streamed as they
/// arrive, with the decision in headers; the record is written at its end.
pub(super) fn pass_through(
    mut finishing: Finishing,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    headers: Vec<(&'static str, String)>,
    source: Source,
) -> Response {
    let mut builder = Response::builder().status(status);
    if let Some(content_type) = &content_type {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            builder = builder.header(name, value);
        }
    }
    let body = match source {
        Source::Buffered(bytes) => {
            finishing.feed(&bytes);
            finishing.finished = true;
            drop(finishing);
            Body::from(bytes)
        }
        Source::Stream(response) => {
            let stream = response.bytes_stream();
            let body = futures_util::stream::unfold(
                (stream, finishing),
                |(mut stream, mut finishing)| async move {
                    match stream.next().await {
                        Some(Ok(chunk)) => {
                            finishing.feed(&chunk);
                            Some((Ok::<Bytes, std::io::Error>(chunk), (stream, finishing)))
                        }
                        Some(Err(problem)) => {
                            if let Some(record) = finishing.record.as_mut() {
                                record.finish_reason = Some("upstream_cut".to_owned());
                            }
                            Some((
                                Err(std::io::Error::other(without_url(&problem))),
                                (stream, finishing),
                            ))
                        }
                        None => {
                            finishing.finished = true;
                            drop(finishing);
                            None
                        }
                    }
                },
            );
            Body::from_stream(body)
        }
    };
    builder.body(body).expect("a valid response")
}
