//! Calling a route and passing its answer to the client: the request body
//! forwarded with only `model` replaced, the upstream's bytes streamed as
//! they arrive (or, for a verified cascade stage, released whole), and the
//! request's record finished when the last byte has gone or the client
//! went away.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
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
pub(super) fn message_tokens(messages: &[Value]) -> u64 {
    messages
        .iter()
        .filter_map(|message| message["content"].as_str())
        .map(estimate_tokens)
        .sum()
}

/// [`message_tokens`] of a conversation kept as JSON text (a record's).
fn content_tokens(messages: &str) -> u64 {
    message_tokens(&serde_json::from_str::<Vec<Value>>(messages).unwrap_or_default())
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

/// The three timers of a call: to its first byte, between bytes, and to
/// its end (from the request's arrival), from `--first-token-timeout-ms`,
/// `--stall-timeout-ms` and `--total-timeout-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub first_token: Duration,
    pub stall: Duration,
    pub total: Duration,
}

/// Why a call gave no response to pass on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CallFailed {
    /// No connection, or the connection failed before a response.
    Unreachable(String),
    /// No response, or no first byte of it, within the deadline.
    TimedOut,
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
    /// The first chunk, already read within the first-token deadline, and
    /// the rest.
    Stream {
        first: Option<Bytes>,
        rest: BoxStream<'static, Result<Bytes, reqwest::Error>>,
    },
    Buffered(Vec<u8>),
}

/// The response's first chunk within `deadline`, and the rest of it.
pub(super) async fn first_chunk(
    response: reqwest::Response,
    deadline: tokio::time::Instant,
) -> Result<Source, CallFailed> {
    let mut rest = response.bytes_stream().boxed();
    match tokio::time::timeout_at(deadline, rest.next()).await {
        Err(_) => Err(CallFailed::TimedOut),
        Ok(Some(Err(problem))) => Err(CallFailed::Unreachable(format!(
            "the upstream's answer was cut: {}",
            without_url(&problem)
        ))),
        Ok(first) => Ok(Source::Stream {
            first: first.map(|chunk| chunk.expect("matched above")),
            rest,
        }),
    }
}

/// Sends `body` to `upstream`; its response's head must come by `deadline`.
pub(super) async fn call(
    app: &App,
    upstream: &Upstream,
    body: &serde_json::Map<String, Value>,
    deadline: tokio::time::Instant,
) -> Result<Called, CallFailed> {
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
    let response = tokio::time::timeout_at(deadline, request.send())
        .await
        .map_err(|_| CallFailed::TimedOut)?
        .map_err(|problem| {
            CallFailed::Unreachable(format!(
                "the upstream at {} did not answer: {}",
                upstream.chat_url,
                without_url(&problem)
            ))
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
    pub ending: Ending,
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

/// How an answer's passing on ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Ending {
    /// Every byte went to the client.
    Finished,
    /// The client went away first (the default until the end is seen).
    #[default]
    ClientLeft,
    UpstreamCut,
    /// No byte within `--stall-timeout-ms` after the first.
    Stalled,
    /// The answer ran past `--total-timeout-ms`.
    PastTotal,
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
        let (status, finish_reason) = match self.ending {
            Ending::Finished => (None, None),
            Ending::ClientLeft => (Some(Status::Error), Some("client_disconnected")),
            Ending::UpstreamCut => (Some(Status::Error), Some("upstream_cut")),
            Ending::Stalled => (Some(Status::Timeout), Some("stall")),
            Ending::PastTotal => (Some(Status::Timeout), Some("total_deadline")),
        };
        if let Some(status) = status {
            record.status = status.name();
        }
        if let Some(finish_reason) = finish_reason {
            record.finish_reason = Some(finish_reason.to_owned());
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
            finishing.ending = Ending::Finished;
            drop(finishing);
            Body::from(bytes)
        }
        Source::Stream { first, rest } => {
            let timeouts = finishing.app.timeouts;
            let total = tokio::time::Instant::from_std(finishing.started) + timeouts.total;
            let first = first.map(Ok::<Bytes, reqwest::Error>);
            let rest = futures_util::stream::iter(first).chain(rest);
            let body = futures_util::stream::unfold(
                (rest, Some(finishing)),
                move |(mut rest, mut finishing)| async move {
                    let mut state = finishing.take()?;
                    let deadline = (tokio::time::Instant::now() + timeouts.stall).min(total);
                    let (item, ending) = match tokio::time::timeout_at(deadline, rest.next()).await
                    {
                        Ok(Some(Ok(chunk))) => {
                            state.feed(&chunk);
                            (Some(Ok(chunk)), None)
                        }
                        Ok(Some(Err(problem))) => (
                            Some(Err(std::io::Error::other(without_url(&problem)))),
                            Some(Ending::UpstreamCut),
                        ),
                        Ok(None) => (None, Some(Ending::Finished)),
                        Err(_) => {
                            let ending = if deadline >= total {
                                Ending::PastTotal
                            } else {
                                Ending::Stalled
                            };
                            let message = match ending {
                                Ending::PastTotal => "the answer ran past --total-timeout-ms",
                                _ => "the answer stalled past --stall-timeout-ms",
                            };
                            (Some(Err(std::io::Error::other(message))), Some(ending))
                        }
                    };
                    match ending {
                        // The last item, then the record (on drop).
                        Some(ending) => {
                            state.ending = ending;
                            drop(state);
                            item.map(|item| (item, (rest, None)))
                        }
                        None => item.map(|item| (item, (rest, Some(state)))),
                    }
                },
            );
            Body::from_stream(body)
        }
    };
    builder.body(body).expect("a valid response")
}
