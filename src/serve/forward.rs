//! Calling a route and passing its answer to the client: the request body
//! forwarded with only `model` replaced, the upstream's bytes streamed as
//! they arrive (or, for a verified cascade stage, released whole), and the
//! request's record finished when the last byte has gone or the client
//! went away.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::Value;

use crate::records::Status;

use super::admission::Slot;
use super::answer::Answer;
use super::app::App;
use super::assemble::Assembly;
use super::deployed::Upstream;
use super::served::CLIENT_DISCONNECTED;
use super::served::ServedRecord;
use super::settings::{Timeouts, after};
use super::sse::{FirstToken, Framer, Malformed, error_event};
use super::upstream_error::carries_secret;
use super::witness::{AnswerEnd, answered};

/// The client's body with the route's model in place of the logical one
/// (or added, for a body that names none: the verifier's), serialised
/// without copying the body; with `streamed`, asking the route to stream
/// with its usage in the last chunk (serve assembles the answer).
struct WithModel<'a> {
    body: &'a serde_json::Map<String, Value>,
    model: &'a str,
    streamed: bool,
}

impl serde::Serialize for WithModel<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let replaced: &[&str] = if self.streamed {
            &["model", "stream", "stream_options"]
        } else {
            &["model"]
        };
        let others = self
            .body
            .iter()
            .filter(|(key, _)| !replaced.contains(&key.as_str()));
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", self.model)?;
        for (key, value) in others {
            map.serialize_entry(key, value)?;
        }
        if self.streamed {
            let mut options = match self.body.get("stream_options") {
                Some(Value::Object(options)) => options.clone(),
                _ => serde_json::Map::new(),
            };
            options.insert("include_usage".to_owned(), Value::Bool(true));
            map.serialize_entry("stream", &true)?;
            map.serialize_entry("stream_options", &options)?;
        }
        map.end()
    }
}

/// Why a call gave no response to pass on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CallFailed {
    /// No connection, the connection failed before a response, or a
    /// response serve will not pass on (a redirect); the message names the
    /// route, never its address.
    Unreachable(String),
    /// No response, or no first byte of it, within the deadline.
    TimedOut,
}

impl CallFailed {
    /// How `routeval_upstream_responses_total` counts it.
    pub(super) fn class(&self) -> &'static str {
        match self {
            CallFailed::Unreachable(_) => "unreachable",
            CallFailed::TimedOut => "timeout",
        }
    }

    /// What happened, for a trace: the problem (never the route's address)
    /// or the deadline.
    pub(super) fn describe(&self) -> String {
        match self {
            CallFailed::Unreachable(problem) => problem.clone(),
            CallFailed::TimedOut => "no first byte by the deadline".to_owned(),
        }
    }
}

/// One upstream call's response, before its body is read.
pub(super) struct Called {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    /// What the client is told of the upstream's limits: `Retry-After`,
    /// `retry-after-ms` and every `x-ratelimit-*`.
    pub limits: Vec<(HeaderName, HeaderValue)>,
    pub response: reqwest::Response,
}

/// Whether an upstream's response header is one the client must see to
/// pace its retries.
fn is_limit_header(name: &str) -> bool {
    name == "retry-after" || name == "retry-after-ms" || name.starts_with("x-ratelimit-")
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

/// The response's first token within `deadline`, and the rest of it. A
/// stream's first token is its first event that says something (content,
/// a tool call, a finish, an error, `[DONE]`): comments (`: PROCESSING`,
/// which OpenRouter sends while a request waits) and empty deltas keep
/// the connection, not the deadline. Any other answer's is its first byte.
pub(super) async fn first_chunk(
    route: &str,
    response: reqwest::Response,
    deadline: tokio::time::Instant,
    sse: bool,
) -> Result<Source, CallFailed> {
    let mut rest = response.bytes_stream().boxed();
    let mut watch = sse.then(FirstToken::default);
    let mut before: Vec<u8> = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, rest.next()).await {
            Err(_) => return Err(CallFailed::TimedOut),
            Ok(Some(Err(problem))) => {
                return Err(CallFailed::Unreachable(format!(
                    "route {route:?}'s answer was cut: {}",
                    without_url(&problem)
                )));
            }
            Ok(None) => {
                let first = (!before.is_empty()).then(|| Bytes::from(before));
                return Ok(Source::Stream { first, rest });
            }
            Ok(Some(Ok(chunk))) => {
                let Some(watch) = watch.as_mut() else {
                    return Ok(Source::Stream {
                        first: Some(chunk),
                        rest,
                    });
                };
                let came = watch.sees_token(&chunk);
                before.extend_from_slice(&chunk);
                if came && watch.error {
                    return Err(CallFailed::Unreachable(format!(
                        "route {route:?} sent an error event before its first token: its generation failed"
                    )));
                }
                if came {
                    return Ok(Source::Stream {
                        first: Some(Bytes::from(before)),
                        rest,
                    });
                }
            }
        }
    }
}

/// Sends `body` to `route`'s `upstream` (asking it to stream, with
/// `streamed`), with `headers` (the request's id and trace context); its
/// response's head
/// must come by `deadline`. A redirect is a failure:
/// serve sends a prompt only to the addresses its signed config names.
pub(super) async fn call(
    app: &App,
    route: &str,
    upstream: &Upstream,
    body: &serde_json::Map<String, Value>,
    deadline: tokio::time::Instant,
    headers: &[(HeaderName, HeaderValue)],
    streamed: bool,
) -> Result<Called, CallFailed> {
    let body = WithModel {
        body,
        model: &upstream.model,
        streamed,
    };
    let mut request = app
        .http
        .post(&upstream.chat_url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).expect("JSON serialises"));
    for (name, value) in headers {
        request = request.header(name, value);
    }
    if let Some(key) = &upstream.api_key {
        request = request.bearer_auth(key);
    }
    let response = tokio::time::timeout_at(deadline, request.send())
        .await
        .map_err(|_| CallFailed::TimedOut)?
        .map_err(|problem| {
            CallFailed::Unreachable(format!(
                "route {route:?} did not answer: {}",
                describe(&problem, upstream)
            ))
        })?;
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    if status.is_redirection() {
        return Err(CallFailed::Unreachable(format!(
            "route {route:?} answered {status}, a redirect; serve never follows one"
        )));
    }
    let limits = response
        .headers()
        .iter()
        .filter(|(name, _)| is_limit_header(name.as_str()))
        // A limit header is checked as an error body is: one that carries
        // the route's key or address is dropped.
        .filter(|(_, value)| !carries_secret(upstream, value.as_bytes()))
        .filter_map(|(name, value)| {
            Some((
                HeaderName::from_bytes(name.as_str().as_bytes()).ok()?,
                HeaderValue::from_bytes(value.as_bytes()).ok()?,
            ))
        })
        .collect();
    Ok(Called {
        status,
        content_type: response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| HeaderValue::from_bytes(value.as_bytes()).ok()),
        limits,
        response,
    })
}

/// The headers a call upstream carries: the request's id, and the trace
/// context of `span`, its attempt's.
pub(super) fn outgoing_headers(
    request_id: &str,
    span: &super::trace::ChildSpan<'_>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = span.headers();
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.push((HeaderName::from_static(super::app::REQUEST_ID), id));
    }
    headers
}

/// What went wrong with a call, with neither the upstream's URL nor its
/// host in it: the error and its causes, as far as they say something.
fn describe(error: &reqwest::Error, upstream: &Upstream) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "the request failed"
    };
    let mut innermost: &dyn std::error::Error = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    let mut text = if std::ptr::addr_eq(innermost, error as &dyn std::error::Error) {
        kind.to_owned()
    } else {
        format!("{kind}: {innermost}")
    };
    if let Ok(url) = reqwest::Url::parse(&upstream.chat_url) {
        text = text.replace(url.as_str(), "<route>");
        if let Some(host) = url.host_str() {
            text = text.replace(host, "<route>");
        }
    }
    text
}

pub(super) fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), "");
    }
    text
}

/// The most of a non-streamed answer kept to read its usage and model
/// from; a longer one is passed on whole, unread.
const MAX_READ_BODY_BYTES: usize = 8 << 20;

/// The record finished when the answer's last byte has gone (or the
/// client went away), however the body ends.
pub(super) struct Finishing {
    pub app: Arc<App>,
    pub record: Option<ServedRecord>,
    pub started: Instant,
    pub answer: Answer,
    /// A streamed answer's events, framed and checked as they pass.
    pub sse: Option<Framer>,
    pub body: Vec<u8>,
    /// The body is not read for the record: it outgrew
    /// [`MAX_READ_BODY_BYTES`], or `answer` was read from the stream it was
    /// assembled from.
    pub body_unread: bool,
    pub route: String,
    pub upstream: Upstream,
    /// What earlier calls of a cascade cost.
    pub spent_before: f64,
    pub first_byte: Option<f64>,
    pub ending: Ending,
    /// The bytes the upstream said it would send, and how many have gone
    /// to the client.
    pub expected_bytes: Option<u64>,
    pub passed_bytes: u64,
    /// The last bytes have been passed on: the next poll ends the body.
    pub over: bool,
    /// Admission slots, given back with the answer's last byte.
    pub slots: Vec<Slot>,
}

impl Finishing {
    fn feed(&mut self, bytes: &[u8]) {
        if self.first_byte.is_none() {
            self.first_byte = Some(self.started.elapsed().as_secs_f64() * 1e3);
        }
        self.passed_bytes = self.passed_bytes.saturating_add(bytes.len() as u64);
        if self.sse.is_some() {
            self.answer.feed_sse(bytes);
        } else if !self.body_unread
            && self.body.len().saturating_add(bytes.len()) <= MAX_READ_BODY_BYTES
        {
            self.body.extend_from_slice(bytes);
        } else if !self.body_unread {
            self.body = Vec::new();
            self.body_unread = true;
        }
    }

    /// Whether the client has been given the whole answer: a stream's
    /// `[DONE]`, or every byte of a body of known length. A client that
    /// leaves after that has read its answer.
    fn answer_given(&self) -> bool {
        match &self.sse {
            Some(framer) => framer.done,
            None => self.expected_bytes == Some(self.passed_bytes),
        }
    }

    /// The next bytes for the client from `chunk` of the upstream's: a
    /// stream's whole events (an error event if they are malformed), or
    /// the chunk itself.
    fn pass(&mut self, chunk: &Bytes) -> Result<Bytes, Bytes> {
        let Some(framer) = &mut self.sse else {
            self.feed(chunk);
            return Ok(chunk.clone());
        };
        let mut events = Vec::new();
        let framed = framer.push(chunk, &mut events);
        self.feed(&events);
        match framed {
            Ok(()) => Ok(Bytes::from(events)),
            Err(malformed) => Err(self.cut(events, &malformed)),
        }
    }

    /// What is left when the upstream ended: a stream's last event without
    /// its blank line.
    /// What is left of a stream its upstream closed, or the error event
    /// that ends it and how: a malformed last event, or a stream closed
    /// before its `[DONE]` with no `finish_reason` (cut short).
    fn pass_rest(&mut self) -> Result<Bytes, (Bytes, Ending)> {
        let Some(framer) = &mut self.sse else {
            return Ok(Bytes::new());
        };
        let mut events = Vec::new();
        let framed = framer.finish(&mut events);
        let done = framer.done;
        self.feed(&events);
        match framed {
            Err(malformed) => Err((self.cut(events, &malformed), Ending::Malformed)),
            Ok(()) if !done && !self.answer.every_choice_finished() => {
                events.extend_from_slice(&error_event(&ended_early(&self.route)));
                Err((Bytes::from(events), Ending::UpstreamCut))
            }
            Ok(()) => Ok(Bytes::from(events)),
        }
    }

    /// `events` and then the error event that ends a malformed stream.
    fn cut(&mut self, mut events: Vec<u8>, malformed: &Malformed) -> Bytes {
        events.extend_from_slice(&error_event(&malformed.message(&self.route)));
        self.ending = Ending::Malformed;
        Bytes::from(events)
    }
}

/// What the client is told of a stream its route closed before `[DONE]`
/// and before any `finish_reason`.
fn ended_early(route: &str) -> String {
    format!(
        "route {route:?} closed its stream before [DONE] and before any finish_reason: the answer was cut"
    )
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
    /// The upstream's stream was not one a client can read.
    Malformed,
    /// The route sent an error event: generation failed.
    UpstreamError,
    /// No byte within `--stall-timeout-ms` after the first.
    Stalled,
    /// The answer ran past `--total-timeout-ms`.
    PastTotal,
    /// An answer longer than serve assembles for a client that did not
    /// stream; recorded as a cut.
    TooLong,
}

impl Drop for Finishing {
    fn drop(&mut self) {
        self.close();
    }
}

impl Finishing {
    /// Finishes the record as the answer ended and queues it; its number in
    /// the journal, if it was queued. Once only: a second call does nothing.
    fn close(&mut self) -> Option<u64> {
        let record = self.record.take()?;
        if self.ending == Ending::ClientLeft && self.answer_given() {
            self.ending = Ending::Finished;
        }
        if self.sse.is_none() && !self.body_unread {
            self.answer = Answer::of_json(&self.body);
        }
        let broken = match self.ending {
            // Every byte passed, but the route said generation failed, or
            // sent a whole answer that is not one.
            Ending::Finished if self.answer.error => Some((Status::Error, "upstream_error")),
            Ending::Finished if self.answer.unreadable => {
                Some((Status::Error, "upstream_malformed"))
            }
            Ending::Finished => None,
            Ending::ClientLeft => Some((Status::Error, CLIENT_DISCONNECTED)),
            Ending::UpstreamCut | Ending::TooLong => Some((Status::Error, "upstream_cut")),
            Ending::Malformed => Some((Status::Error, "upstream_malformed")),
            Ending::UpstreamError => Some((Status::Error, "upstream_error")),
            Ending::Stalled => Some((Status::Timeout, "stall")),
            Ending::PastTotal => Some((Status::Timeout, "total_deadline")),
        };
        let end = AnswerEnd {
            answer: &self.answer,
            broken,
            ttft_ms: self.first_byte,
            total_ms: self.started.elapsed().as_secs_f64() * 1e3,
            upstream: &self.upstream,
            spent_before: self.spent_before,
        };
        answered(&self.app, record, end)
    }
}

/// The client's response: the upstream's status and bytes, streamed as they
/// arrive (a stream's a whole event at a time), with the decision and the
/// upstream's rate-limit headers; the record is written at its end.
pub(super) fn pass_through(
    mut finishing: Finishing,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    headers: Vec<(HeaderName, HeaderValue)>,
    source: Source,
) -> Response {
    let mut builder = Response::builder().status(status);
    if let Some(content_type) = &content_type {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    let body = match source {
        Source::Buffered(bytes) => {
            finishing.feed(&bytes);
            finishing.ending = Ending::Finished;
            drop(finishing);
            Body::from(bytes)
        }
        Source::Stream { first, rest } => {
            let first = first.map(Ok::<Bytes, reqwest::Error>);
            let rest = futures_util::stream::iter(first).chain(rest).boxed();
            Body::from_stream(futures_util::stream::unfold(
                (rest, Some(finishing)),
                next_bytes,
            ))
        }
    };
    builder.body(body).expect("a valid response")
}

/// The end of an answer passed on whole: its record queued, and the end
/// held back until the record is committed when the journal is behind
/// (docs/serve.md, "Records").
async fn finished<T>(mut state: Finishing) -> Option<T> {
    let number = state.close();
    let journal = state.app.journal.clone();
    drop(state);
    if let Some(number) = number {
        journal.committed(number).await;
    }
    None
}

type UpstreamBytes = BoxStream<'static, Result<Bytes, reqwest::Error>>;

/// The next bytes for the client, and what is left; `None` once the answer
/// has ended, its record written.
async fn next_bytes(
    (mut rest, finishing): (UpstreamBytes, Option<Finishing>),
) -> Option<(
    Result<Bytes, std::io::Error>,
    (UpstreamBytes, Option<Finishing>),
)> {
    let mut state = finishing?;
    if state.over {
        return finished(state).await;
    }
    let timeouts = state.app.settings.timeouts;
    let total = after(
        tokio::time::Instant::from_std(state.started),
        timeouts.total,
    );
    loop {
        let deadline = after(tokio::time::Instant::now(), timeouts.stall).min(total);
        let (item, ending) = match tokio::time::timeout_at(deadline, rest.next()).await {
            Ok(Some(Ok(chunk))) => match state.pass(&chunk) {
                // A chunk that completes no event: read on.
                Ok(bytes) if bytes.is_empty() => continue,
                Ok(bytes) => (Ok(bytes), None),
                Err(cut) => (Ok(cut), Some(Ending::Malformed)),
            },
            Ok(Some(Err(problem))) => (
                Err(std::io::Error::other(without_url(&problem))),
                Some(Ending::UpstreamCut),
            ),
            Ok(None) => match state.pass_rest() {
                Ok(bytes) if bytes.is_empty() => {
                    state.ending = Ending::Finished;
                    return finished(state).await;
                }
                Ok(bytes) => {
                    state.ending = Ending::Finished;
                    state.over = true;
                    return Some((Ok(bytes), (rest, Some(state))));
                }
                Err((cut, ending)) => (Ok(cut), Some(ending)),
            },
            Err(_) => {
                let (ending, message) = if deadline >= total {
                    (Ending::PastTotal, "the answer ran past --total-timeout-ms")
                } else {
                    (
                        Ending::Stalled,
                        "the answer stalled past --stall-timeout-ms",
                    )
                };
                (Err(std::io::Error::other(message)), Some(ending))
            }
        };
        return match ending {
            // The last item; the record is written when the state drops.
            Some(ending) => {
                state.ending = ending;
                Some((item, (rest, None)))
            }
            None => Some((item, (rest, Some(state)))),
        };
    }
}

/// The most of a streamed answer's events serve reads to assemble one
/// non-streamed answer; a client wanting a longer one streams it.
pub(super) const MAX_ASSEMBLED_BYTES: usize = 64 << 20;

/// A streamed answer read whole for a client that did not stream, every
/// chunk within the stall timer and all of it by the total deadline, into
/// `assembly` and `answer`; or how it ended early and what the client is
/// told.
pub(super) async fn read_events(
    route: &str,
    source: Source,
    started: Instant,
    timeouts: Timeouts,
    assembly: &mut Assembly,
    answer: &mut Answer,
) -> Result<(), (Ending, String)> {
    let (first, rest) = match source {
        Source::Stream { first, rest } => (first, rest),
        Source::Buffered(bytes) => (
            Some(Bytes::from(bytes)),
            futures_util::stream::empty().boxed(),
        ),
    };
    let mut chunks = futures_util::stream::iter(first.map(Ok)).chain(rest);
    let total = after(tokio::time::Instant::from_std(started), timeouts.total);
    let mut framer = Framer::default();
    let mut read: usize = 0;
    let malformed = |malformed: Malformed| (Ending::Malformed, malformed.message(route));
    loop {
        let deadline = after(tokio::time::Instant::now(), timeouts.stall).min(total);
        let mut events = Vec::new();
        let ended = match tokio::time::timeout_at(deadline, chunks.next()).await {
            // A stream is over at its `[DONE]`, whenever the upstream
            // closes it.
            Ok(Some(Ok(chunk))) => {
                framer.push(&chunk, &mut events).map_err(malformed)?;
                framer.done
            }
            Ok(Some(Err(problem))) => {
                return Err((
                    Ending::UpstreamCut,
                    format!(
                        "route {route:?}'s answer was cut: {}",
                        without_url(&problem)
                    ),
                ));
            }
            Ok(None) => {
                framer.finish(&mut events).map_err(malformed)?;
                true
            }
            Err(_) if deadline >= total => {
                return Err((
                    Ending::PastTotal,
                    format!("route {route:?}'s answer ran past --total-timeout-ms"),
                ));
            }
            Err(_) => {
                return Err((
                    Ending::Stalled,
                    format!("route {route:?}'s answer stalled past --stall-timeout-ms"),
                ));
            }
        };
        read = read.saturating_add(events.len());
        if read > MAX_ASSEMBLED_BYTES {
            return Err((
                Ending::TooLong,
                format!(
                    "route {route:?}'s answer is longer than the {MAX_ASSEMBLED_BYTES} bytes serve assembles for a client that does not stream; ask with \"stream\": true"
                ),
            ));
        }
        answer.feed_sse(&events);
        for event in super::assemble::events(&events) {
            if !event["error"].is_null() {
                return Err((
                    Ending::UpstreamError,
                    format!("route {route:?} sent an error event: its generation failed"),
                ));
            }
            assembly.add(&event);
        }
        // Closed without `[DONE]`, the stream is whole only if every
        // choice finished.
        if ended && !framer.done && !assembly.finished() {
            return Err((Ending::UpstreamCut, ended_early(route)));
        }
        if ended {
            return Ok(());
        }
    }
}
