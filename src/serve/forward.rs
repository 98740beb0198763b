//! Calling a route and reading its answer: the request body forwarded with
//! only `model` replaced, the first token awaited by its deadline, and a
//! stream read whole for a client that did not stream. Passing the answer
//! on is [`super::passing`]'s.

use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::Value;

use super::answer::Answer;
use super::app::App;
use super::assemble::Assembly;
use super::deployed::Upstream;
use super::ending::{Ending, ended_early};
use super::members::Members;
use super::settings::{Timeouts, after};
use super::sse::{FirstToken, Framer, Malformed};
use super::upstream_error::carries_secret;

/// The client's body with the route's model in place of the logical one
/// (or added, for a body that names none: the verifier's), every other
/// member as the client wrote it. A stream, whether the client asked for
/// it or serve did (`streamed`: serve assembles the answer), always asks
/// for its usage in the last chunk, so the record counts what the route
/// billed; a client that did not ask for it does not see it
/// ([`super::sse::Framer::withholding_usage`]).
struct WithModel<'a> {
    body: &'a Members,
    model: &'a str,
    streamed: bool,
}

impl WithModel<'_> {
    fn client_streams(&self) -> bool {
        self.body
            .get("stream")
            .is_some_and(|stream| stream.get().trim() == "true")
    }
}

impl serde::Serialize for WithModel<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let asks_usage = self.streamed || self.client_streams();
        let replaced: &[&str] = match (self.streamed, asks_usage) {
            (true, _) => &["model", "stream", "stream_options"],
            (false, true) => &["model", "stream_options"],
            (false, false) => &["model"],
        };
        let others = self.body.iter().filter(|(key, _)| !replaced.contains(key));
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", self.model)?;
        for (key, value) in others {
            map.serialize_entry(key, value)?;
        }
        if self.streamed {
            map.serialize_entry("stream", &true)?;
        }
        if asks_usage {
            let sent = self
                .body
                .get("stream_options")
                .and_then(|options| serde_json::from_str(options.get()).ok());
            let mut options = match sent {
                Some(Value::Object(options)) => options,
                _ => serde_json::Map::new(),
            };
            options.insert("include_usage".to_owned(), Value::Bool(true));
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
    body: &Members,
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
