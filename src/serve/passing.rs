//! Passing a route's answer to the client: the upstream's bytes streamed
//! as the client reads them (a stream's a whole event at a time) or
//! released whole, and the request's record finished once: before the
//! last bytes go, when the client went away, or when the client stopped
//! reading until `--total-timeout-ms`.

use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use crate::records::Status;

use super::admission::Slot;
use super::answer::Answer;
use super::app::App;
use super::connections::Hangup;
use super::deployed::Upstream;
use super::ending::{Ending, ended_early};
use super::forward::{Source, without_url};
use super::served::{CLIENT_DISCONNECTED, ServedRecord};
use super::settings::after;
use super::sse::{Framer, Malformed, error_event, without_usage};
use super::witness::{AnswerEnd, answered};

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
    /// Closes the client's connection, for an answer that cannot be
    /// ended any other way.
    pub hangup: Option<Hangup>,
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
        let withheld = std::mem::take(&mut framer.withheld);
        self.feed(&events);
        self.answer.feed_sse(&withheld);
        match framed {
            Ok(()) => Ok(Bytes::from(events)),
            Err(malformed) => Err(self.cut(events, &malformed)),
        }
    }

    /// What is left of a stream its upstream closed (its last event
    /// without its blank line), or the error event that ends it and how:
    /// a malformed last event, or a stream closed before its `[DONE]` with
    /// no `finish_reason` (cut short).
    fn pass_rest(&mut self) -> Result<Bytes, (Bytes, Ending)> {
        let Some(framer) = &mut self.sse else {
            return Ok(Bytes::new());
        };
        let mut events = Vec::new();
        let framed = framer.finish(&mut events);
        let done = framer.done;
        let withheld = std::mem::take(&mut framer.withheld);
        self.feed(&events);
        self.answer.feed_sse(&withheld);
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
            Ending::ClientStalled => Some((Status::Timeout, CLIENT_STALLED)),
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

/// The finish reason of a request whose client stopped reading its answer
/// until the total deadline.
pub(super) const CLIENT_STALLED: &str = "client_stalled";

/// The client's response: the upstream's status and bytes, streamed as they
/// arrive (a stream's a whole event at a time) by a task of their own, with
/// the decision and the upstream's rate-limit headers; the record is
/// written at its end.
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
            let bytes = match &finishing.sse {
                Some(framer) if framer.withholds_usage() => {
                    let (events, withheld) = without_usage(&bytes);
                    finishing.answer.feed_sse(&withheld);
                    events
                }
                _ => bytes,
            };
            finishing.feed(&bytes);
            finishing.ending = Ending::Finished;
            drop(finishing);
            Body::from(bytes)
        }
        Source::Stream { first, rest } => {
            let first = first.map(Ok::<Bytes, reqwest::Error>);
            let rest = futures_util::stream::iter(first).chain(rest).boxed();
            let total = after(
                tokio::time::Instant::from_std(finishing.started),
                finishing.app.settings.timeouts.total,
            );
            let hangup = finishing.hangup.clone();
            let passing = Arc::new(Mutex::new(Some(Passing {
                rest,
                finishing: Some(finishing),
                stalled: false,
            })));
            let (body_ended, ended) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(watch(Arc::downgrade(&passing), ended, total, hangup));
            Body::from_stream(futures_util::stream::unfold(
                (passing, body_ended),
                |(passing, body_ended)| async move {
                    let item = next_piece(&passing).await?;
                    Some((item, (passing, body_ended)))
                },
            ))
        }
    };
    builder.body(body).expect("a valid response")
}

/// An answer being passed on, between the connection's polls of its body.
struct Passing {
    rest: UpstreamBytes,
    finishing: Option<Finishing>,
    /// Ended by [`watch`]: the client read nothing until the deadline.
    stalled: bool,
}

type Shared = Arc<Mutex<Option<Passing>>>;

/// The body's next piece. The answer is read only as the connection asks
/// for it (as the client reads), never ahead.
async fn next_piece(passing: &Shared) -> Option<Result<Bytes, std::io::Error>> {
    let taken = passing.lock().expect("unpoisoned").take()?;
    if taken.stalled {
        return Some(Err(std::io::Error::other(
            "the client read nothing of its answer until --total-timeout-ms",
        )));
    }
    let (item, (rest, finishing)) = next_bytes((taken.rest, taken.finishing)).await?;
    *passing.lock().expect("unpoisoned") = Some(Passing {
        rest,
        finishing,
        stalled: false,
    });
    Some(item)
}

/// Ends an answer its client stopped reading. The connection polls the
/// body only as the client reads, so a client that stops would hold its
/// request, its slots and the upstream call for as long as it kept the
/// connection. At `--total-timeout-ms` after the request's arrival, an
/// answer still waiting for its client has its upstream call dropped, its
/// record finished as `client_stalled` and its connection closed (the
/// client cannot be told otherwise mid-answer). An answer being read
/// then ends by the same deadline in [`next_bytes`]; one that ended, or
/// whose client left, ends the watch.
async fn watch(
    passing: Weak<Mutex<Option<Passing>>>,
    body_ended: tokio::sync::oneshot::Receiver<()>,
    total: tokio::time::Instant,
    hangup: Option<Hangup>,
) {
    tokio::select! {
        () = tokio::time::sleep_until(total) => {}
        _ = body_ended => return,
    }
    loop {
        let Some(passing) = passing.upgrade() else {
            return;
        };
        // `None`: being read; `Some(None)`: its record is written already.
        let waiting = passing.lock().expect("unpoisoned").as_mut().map(|waiting| {
            let finishing = waiting.finishing.take()?;
            waiting.stalled = true;
            let rest = std::mem::replace(&mut waiting.rest, futures_util::stream::empty().boxed());
            Some((rest, finishing))
        });
        drop(passing);
        match waiting {
            Some(Some((rest, mut finishing))) => {
                drop(rest);
                finishing.ending = Ending::ClientStalled;
                drop(finishing);
                if let Some(hangup) = hangup {
                    hangup.now();
                }
                return;
            }
            Some(None) => return,
            // Being read: it ends by the deadline as it is read.
            None => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

/// Finishes the record as `state.ending` says, and waits for its commit
/// where the journal asks answers to (docs/serve.md, "Records"): called
/// before the answer's last bytes go, so that whatever the answer's end,
/// its client has it only once the record is as durable as promised.
async fn finish(mut state: Finishing) {
    let number = state.close();
    let journal = state.app.journal.clone();
    drop(state);
    if let Some(number) = number {
        journal.committed(number).await;
    }
}

type UpstreamBytes = BoxStream<'static, Result<Bytes, reqwest::Error>>;

/// The next bytes for the client, and what is left; `None` once the answer
/// has ended. The last bytes (a stream's `[DONE]`, the rest of a body, the
/// error that ends a broken one) come after the record is finished.
async fn next_bytes(
    (mut rest, finishing): (UpstreamBytes, Option<Finishing>),
) -> Option<(
    Result<Bytes, std::io::Error>,
    (UpstreamBytes, Option<Finishing>),
)> {
    let mut state = finishing?;
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
                // A stream is over at its `[DONE]`, however long its
                // upstream keeps the connection.
                Ok(bytes) if state.answer_given() && state.sse.is_some() => {
                    (Ok(bytes), Some(Ending::Finished))
                }
                Ok(bytes) => (Ok(bytes), None),
                Err(cut) => (Ok(cut), Some(Ending::Malformed)),
            },
            Ok(Some(Err(problem))) => (
                Err(std::io::Error::other(without_url(&problem))),
                Some(Ending::UpstreamCut),
            ),
            Ok(None) => match state.pass_rest() {
                Ok(bytes) => (Ok(bytes), Some(Ending::Finished)),
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
        let Some(ending) = ending else {
            return Some((item, (rest, Some(state))));
        };
        state.ending = ending;
        finish(state).await;
        return match item {
            Ok(bytes) if bytes.is_empty() => None,
            item => Some((item, (rest, None))),
        };
    }
}
