//! A stage from its route reached to its answer: passed on as it comes,
//! assembled whole for a client that did not stream (and moved once if
//! the route broke before anything was sent), or, for a cascade's stage
//! before the last, read whole, verified, and released or escalated.

use axum::http::HeaderValue;

use crate::records::{Cause, Status};

use super::super::admission::Slot;
use super::super::ending::Ending;
use super::super::forward::Source;
use super::super::passing::pass_through;
use super::super::served::ServedRecord;
use super::super::sse::{Framer, is_sse};
use super::super::witness::{Broken, Event, see};
use super::next::{Outcome, Step};
use super::{Reached, Turn, TurnEnd, Unread, hold, read_whole};

impl Turn<'_> {
    /// Calls the route (or its fallback); passes its answer on, or (a
    /// cascade stage before the last) reads it whole, asks the verifier,
    /// and releases it or escalates. The request's slots (`held`: in total
    /// and its tenant's) and the route's go with the answer, given back
    /// when its last byte has gone.
    pub async fn answer(
        &self,
        mut record: ServedRecord,
        spent: &mut f64,
        held: &mut Vec<Slot>,
    ) -> TurnEnd {
        let mut reached = match self.reach(&mut record).await {
            Ok(reached) => reached,
            Err(stage) => return stage,
        };
        if self.last {
            (record, reached) = match self.assemble_or_move(record, reached, *spent, held).await {
                Ok(going_on) => going_on,
                Err(stage) => return stage,
            };
        }
        let Reached {
            route,
            upstream,
            status,
            content_type,
            limits,
            expected_bytes,
            source,
            slot,
            ttft_ms,
            hedged,
        } = *reached;
        let sse = is_sse(content_type.as_ref());
        see(self.app, &mut record, Event::Answering(status));
        let mut finishing = self.finishing(&route, upstream.clone(), *spent);
        finishing.sse = sse.then(|| {
            if self.client_asked_usage() {
                Framer::default()
            } else {
                Framer::withholding_usage()
            }
        });
        finishing.expected_bytes = expected_bytes;
        let assembling = sse && !self.client_streams();
        if self.last {
            // The first byte's time is the one the breaker learned.
            finishing.first_byte = Some(ttft_ms);
            hold(&mut finishing, held, slot, hedged);
            finishing.record = Some(record);
            return TurnEnd::Answered(pass_through(
                finishing,
                status,
                content_type,
                self.headers(&route, limits),
                source,
            ));
        }
        // A cascade stage before the last: its answer is read whole and
        // verified before the client sees any of it.
        let total_deadline = self.total_deadline();
        let bytes = match tokio::time::timeout_at(total_deadline, read_whole(source)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(problem)) => {
                return self.failed_reason(record, crate::records::Reason::UpstreamCut, &problem);
            }
            Err(_) => {
                let late = super::super::failure::Failure::Deadline { by_breaker: false };
                return self.failed(record, &route, late).await;
            }
        };
        let (score, own, verifier_cost) = match self
            .verdict(&mut record, &bytes, sse, &upstream, total_deadline)
            .await
        {
            Ok(verdict) => verdict,
            Err(stage) => return stage,
        };
        *spent += own + verifier_cost;
        if self.decided.plan.escalates_from(self.stage, score) {
            return TurnEnd::Escalated(Box::new(record));
        }
        let (bytes, content_type) = if assembling {
            finishing.sse = None;
            let completion = super::super::assemble::completion_of(&bytes);
            (
                completion,
                Some(HeaderValue::from_static("application/json")),
            )
        } else {
            (bytes, content_type)
        };
        finishing.spent_before = *spent - own;
        finishing.record = Some(record);
        hold(&mut finishing, held, slot, hedged);
        TurnEnd::Answered(pass_through(
            finishing,
            status,
            content_type,
            self.headers(&route, limits),
            Source::Buffered(bytes),
        ))
    }

    /// The last stage's answer for a client that did not stream, read and
    /// assembled: nothing has been sent yet, so the route's stall, cut or
    /// malformed stream may still move it, once, to the fallback. `Err`:
    /// the request's end; `Ok`: a route reached whose answer passes on as
    /// it comes.
    async fn assemble_or_move(
        &self,
        mut record: ServedRecord,
        mut reached: Box<Reached>,
        spent: f64,
        held: &mut Vec<Slot>,
    ) -> Result<(ServedRecord, Box<Reached>), TurnEnd> {
        let assembling =
            |reached: &Reached| is_sse(reached.content_type.as_ref()) && !self.client_streams();
        while assembling(&reached) {
            see(self.app, &mut record, Event::Answering(reached.status));
            let unread = match self.assembled(record, *reached, spent, held).await {
                Ok(stage) => return Err(stage),
                Err((kept, unread)) => {
                    record = kept;
                    unread
                }
            };
            let at_ms = self.elapsed_ms();
            let stalled = unread.ending == Ending::Stalled;
            let outcome = Outcome::Broke {
                stalled,
                movable: unread.route == self.route
                    && matches!(
                        unread.ending,
                        Ending::Stalled
                            | Ending::UpstreamCut
                            | Ending::Malformed
                            | Ending::UpstreamError
                    ),
            };
            match self.step(&outcome, self.arrival_ms + at_ms) {
                Step::Move { to, .. } => {
                    let event = Event::BrokeAndMoved {
                        route: self.route,
                        broken: broken(&unread),
                        billed: self.billed(self.route),
                        at_ms,
                        to: &to,
                    };
                    see(self.app, &mut record, event);
                    reached = self.moved(&mut record, &to).await?;
                }
                Step::Fail(stayed) => {
                    see(self.app, &mut record, Event::Stayed(stayed.reason()));
                    return Err(self.unassembled(record, unread));
                }
                Step::Answer => unreachable!("a broken answer is not answered"),
            }
        }
        Ok((record, reached))
    }
}

/// What an answer left after its first byte says.
fn broken(unread: &Unread) -> Broken {
    let stalled = unread.ending == Ending::Stalled;
    Broken {
        status: if stalled {
            Status::Timeout
        } else {
            Status::Error
        },
        cause: if stalled {
            Cause::Deadline
        } else {
            Cause::Error
        },
        finish_reason: match unread.ending {
            Ending::Stalled => "stall",
            Ending::Malformed => "upstream_malformed",
            Ending::UpstreamError => "upstream_error",
            _ => "upstream_cut",
        },
        failure: if stalled { "stall" } else { "cut" },
        message: unread.message.clone(),
        ttft_ms: unread.ttft_ms,
    }
}
