//! A hedged call: a copy sent to the same route when the first byte is
//! late, the first answer taken and the other cancelled.

use std::time::Instant;

use super::super::deployed::Upstream;
use super::super::settings::{after, millis};
use super::attempt::FirstByte;
use super::{Hedged, Turn};

impl Turn<'_> {
    /// The route's hedge for this request: when the copy goes, if the
    /// route hedges and the prompt is short enough.
    pub(super) fn hedge_at(&self, route: &str, from: Instant) -> Option<tokio::time::Instant> {
        let hedge = self.decided.deployed.config.table.route(route)?.hedge?;
        (self.prompt_tokens <= hedge.max_prompt_tokens)
            .then(|| after(tokio::time::Instant::from_std(from), millis(hedge.after_ms)))
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
}
