//! An answer read whole before the client sees any of it: assembled for a
//! client that did not stream (or, when it broke, what the client is
//! told), and a cascade stage's answer put to the verifier.

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode};
use futures_util::StreamExt;

use crate::policy::Plan;
use crate::records::{Reason, Status};

use super::super::admission::Slot;
use super::super::answer::Answer;
use super::super::assemble::Assembly;
use super::super::cascade::verify;
use super::super::deployed::Upstream;
use super::super::ending::Ending;
use super::super::forward::{Source, read_events};
use super::super::passing::pass_through;
use super::super::reply::{error, refuse_as};
use super::super::served::ServedRecord;
use super::super::witness::{Event, Refusal, see};
use super::{Reached, Turn, TurnEnd, Unread, hold};

impl Turn<'_> {
    /// The verifier's verdict on a cascade stage's whole answer `bytes`,
    /// into the record's score: the score, what the stage's call and the
    /// verifier's cost, or the client's response when the verifier failed.
    pub(super) async fn verdict(
        &self,
        record: &mut ServedRecord,
        bytes: &[u8],
        sse: bool,
        upstream: &Upstream,
        deadline: tokio::time::Instant,
    ) -> Result<(f64, f64, f64), TurnEnd> {
        let answer = if sse {
            let mut answer = Answer::keeping_text();
            answer.feed_sse(bytes);
            answer
        } else {
            Answer::of_json(bytes)
        };
        let own = upstream.cost(
            answer.input_tokens.unwrap_or(0),
            answer.cached_input_tokens.unwrap_or(0),
            answer.output_tokens.unwrap_or(0),
        );
        let Plan::Cascade { verifier, .. } = &self.decided.plan else {
            unreachable!("only a cascade has stages before the last")
        };
        let verdict = verify(self.app, self.decided, verifier, &answer.text, deadline).await;
        match verdict {
            Ok((score, verifier_cost)) => {
                see(self.app, record, Event::Scored(Some(score)));
                Ok((score, own, verifier_cost))
            }
            Err(problem) => {
                see(self.app, record, Event::Scored(None));
                Err(self.failed_reason(record.clone(), Reason::VerifierFailed, &problem))
            }
        }
    }

    /// A streamed answer read whole for a client that did not stream, and
    /// answered as the non-streamed completion, the request's slots (`held`)
    /// then kept until it is sent. Or, when the route's stream stalled, was
    /// cut, was malformed or too long to assemble: the record, how it ended,
    /// the route and its first byte's time, the route's slots given back.
    pub(super) async fn assembled(
        &self,
        record: ServedRecord,
        reached: Reached,
        spent_before: f64,
        held: &mut Vec<Slot>,
    ) -> Result<TurnEnd, (ServedRecord, Unread)> {
        let Reached {
            route,
            upstream,
            status,
            limits,
            source,
            slot,
            ttft_ms,
            hedged,
            ..
        } = reached;
        let mut assembly = Assembly::default();
        let mut answer = Answer::default();
        let read = read_events(
            &route,
            source,
            self.started,
            self.app.settings.timeouts,
            &mut assembly,
            &mut answer,
        )
        .await;
        if let Err((ending, message)) = read {
            let unread = Unread {
                route,
                ttft_ms,
                ending,
                message,
            };
            return Err((record, unread));
        }
        let completion = serde_json::to_vec(&assembly.completion()).expect("JSON serialises");
        let mut finishing = self.finishing(&route, upstream, spent_before);
        finishing.answer = answer;
        // The first byte's time is the one the breaker learned.
        finishing.first_byte = Some(ttft_ms);
        finishing.body_unread = true;
        finishing.expected_bytes = Some(completion.len() as u64);
        finishing.record = Some(record);
        hold(&mut finishing, held, slot, hedged);
        let source = Source::Stream {
            first: Some(Bytes::from(completion)),
            rest: futures_util::stream::empty().boxed(),
        };
        Ok(TurnEnd::Answered(pass_through(
            finishing,
            status,
            Some(HeaderValue::from_static("application/json")),
            self.headers(&route, limits),
            source,
        )))
    }

    /// The client's error for an answer that could not be assembled and
    /// could not move: 504 for a stall or the total deadline, 502 for a
    /// cut, a malformed or an overlong stream.
    pub(super) fn unassembled(&self, record: ServedRecord, unread: Unread) -> TurnEnd {
        let (code, kind, record_status, finish_reason) = match unread.ending {
            Ending::Stalled => (
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                Status::Timeout,
                "stall",
            ),
            Ending::PastTotal => (
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                Status::Timeout,
                "total_deadline",
            ),
            Ending::Malformed => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                Status::Error,
                "upstream_malformed",
            ),
            Ending::UpstreamError => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                Status::Error,
                "upstream_error",
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                Status::Error,
                "upstream_cut",
            ),
        };
        let refusal = Refusal {
            reason: None,
            status: Some(record_status),
            finish_reason: Some(finish_reason),
            ttft_ms: Some(unread.ttft_ms),
        };
        TurnEnd::Answered(refuse_as(
            self.app,
            record,
            refusal,
            self.started,
            error(code, kind, None, &unread.message),
        ))
    }
}
