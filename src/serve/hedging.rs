//! A hedged call: a copy sent to the same route when the first byte is
//! late, the first answer taken and the other cancelled, and the record of
//! the copy that lost.

use std::time::Instant;

use crate::records::{HEDGE_ID_SUFFIX, Reason, Status};

use super::deployed::Upstream;
use super::served::ServedRecord;
use super::turn::{FirstByte, Hedged, Reached, Turn};

impl Turn<'_> {
    /// The route's hedge for this request: when the copy goes, if the
    /// route hedges and the prompt is short enough.
    pub(super) fn hedge_at(&self, route: &str, from: Instant) -> Option<tokio::time::Instant> {
        let hedge = self.decided.deployed.config.table.route(route)?.hedge?;
        (self.prompt_tokens <= hedge.max_prompt_tokens).then(|| {
            tokio::time::Instant::from_std(from)
                + std::time::Duration::from_secs_f64(hedge.after_ms / 1e3)
        })
    }

    /// The first byte of a hedged call: the call alone if it gives one by
    /// `hedge_at`, else the first of it and a copy sent then (on a slot of
    /// its own, if the route has one free); the other is cancelled, and
    /// [`Hedged`] says what it was.
    pub(super) async fn hedged_first_byte(
        &self,
        route: &str,
        upstream: &Upstream,
        first_token: tokio::time::Instant,
        hedge_at: tokio::time::Instant,
    ) -> (FirstByte, Option<Hedged>) {
        let original = self.first_byte(route, upstream, first_token, "route");
        tokio::pin!(original);
        tokio::select! {
            biased;
            came = &mut original => return (came, None),
            () = tokio::time::sleep_until(hedge_at) => {}
        }
        // The copy is an extra call: the route must have a slot free, and
        // then the retry budget must allow it; it counts in the route's
        // minute like any call.
        let Ok(copy_slot) = self.app.admission.route(route) else {
            return (original.await, None);
        };
        let now_ms = self.arrival_ms + self.elapsed_ms();
        if !self.app.resilience.take_extra(now_ms) {
            return (original.await, None);
        }
        if let Some(found) = self.decided.deployed.config.table.route(route) {
            self.app.resilience.count_call(found, now_ms, self.tokens);
        }
        let copy = self.first_byte(route, upstream, first_token, "hedge");
        tokio::pin!(copy);
        let (first, copy_first) = tokio::select! {
            came = &mut original => (came, false),
            came = &mut copy => (came, true),
        };
        // A copy that failed is no answer: the other may still give one.
        let (winner, copy_won) = if matches!(first, FirstByte::Came { .. }) {
            (first, copy_first)
        } else if copy_first {
            (original.await, false)
        } else {
            (copy.await, true)
        };
        let hedged = Hedged {
            copy_won,
            cancelled_at_ms: self.elapsed_ms(),
            slot: copy_slot,
        };
        (winner, Some(hedged))
    }

    /// A hedged request: its reason is `hedge-won`, and the copy that lost
    /// (cancelled before its first token, so it was never billed output)
    /// is its own record, `ID-hedge-1`, reason `hedge-lost`.
    pub(super) fn record_hedge(&self, record: &mut ServedRecord, reached: &Reached) {
        let Some(hedged) = &reached.hedged else {
            return;
        };
        record.reason = Some(Reason::HedgeWon);
        let mut lost = record.clone();
        lost.id = format!("{}{}", record.id, HEDGE_ID_SUFFIX).into();
        lost.route = reached.route.clone().into();
        lost.reason = Some(Reason::HedgeLost);
        lost.status = Status::Error;
        lost.finish_reason = Some(
            if hedged.copy_won {
                "hedge_original_cancelled"
            } else {
                "hedge_copy_cancelled"
            }
            .into(),
        );
        lost.total_ms = Some(hedged.cancelled_at_ms);
        self.app.finish_attempt(lost);
    }
}
