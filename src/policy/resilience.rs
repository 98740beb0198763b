//! What lets a request leave a failing route, as pure state driven by the
//! clock (milliseconds): the retry budget that bounds the extra calls
//! falling back and hedging make, each route's calls and tokens over the
//! last minute (its `rpm` and `tpm`), and the choice of the fallback a
//! request moves to. `serve` holds them behind its locks; the breaker
//! beside them is [`super::Breaker`].

#![deny(clippy::arithmetic_side_effects)]

use std::collections::{HashMap, VecDeque};

use crate::records::{self, Reason};
use crate::routes::Route;

const MINUTE_MS: f64 = 60_000.0;

/// Calls and their tokens over the last minute. The sum is kept wide: a
/// request's tokens are a client's number (`max_tokens` up to 2^64 − 1),
/// and two of them must not overflow it.
#[derive(Debug, Default)]
pub struct MinuteWindow {
    calls: VecDeque<(f64, u64)>,
    tokens: u128,
}

impl MinuteWindow {
    /// Forgets what is a minute or more before `now_ms`.
    pub fn at(&mut self, now_ms: f64) -> &mut MinuteWindow {
        while self
            .calls
            .front()
            .is_some_and(|(at, _)| *at <= now_ms - MINUTE_MS)
        {
            let (_, tokens) = self.calls.pop_front().expect("checked");
            self.tokens = self.tokens.saturating_sub(u128::from(tokens));
        }
        self
    }

    pub fn calls(&self) -> u64 {
        self.calls.len() as u64
    }

    /// The minute's tokens, at most `u64::MAX`.
    pub fn tokens(&self) -> u64 {
        u64::try_from(self.tokens).unwrap_or(u64::MAX)
    }

    /// Whether `tokens` more keep the minute within `limit`.
    pub fn fits(&self, tokens: u64, limit: u64) -> bool {
        self.tokens.saturating_add(u128::from(tokens)) <= u128::from(limit)
    }

    pub fn add(&mut self, now_ms: f64, tokens: u64) {
        self.calls.push_back((now_ms, tokens));
        self.tokens = self.tokens.saturating_add(u128::from(tokens));
    }
}

/// A minute window per name (a route, a tenant).
#[derive(Debug, Default)]
pub struct MinuteWindows {
    windows: HashMap<String, MinuteWindow>,
}

impl MinuteWindows {
    /// The window of `name` as it stands at `now_ms`, made on first use.
    pub fn at(&mut self, name: &str, now_ms: f64) -> &mut MinuteWindow {
        if !self.windows.contains_key(name) {
            self.windows
                .insert(name.to_owned(), MinuteWindow::default());
        }
        self.windows
            .get_mut(name)
            .expect("inserted above")
            .at(now_ms)
    }

    /// Whether `route` has room now for one more call of `tokens`.
    fn has_room(&mut self, route: &Route, now_ms: f64, tokens: u64) -> bool {
        let window = self.at(&route.name, now_ms);
        window.calls() < route.rpm && window.fits(tokens, route.tpm)
    }
}

/// The retry budget, from `--retry-budget`, `--retry-budget-window-s` and
/// `--retry-budget-min`: extra calls (a fallback after a failed attempt)
/// may be at most `share` of the requests of the last `window_ms`, plus
/// `min_per_window` that are always allowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSettings {
    pub share: f64,
    pub window_ms: f64,
    pub min_per_window: u64,
}

/// The requests and extra calls of the budget's window.
#[derive(Debug)]
pub struct RetryBudget {
    settings: BudgetSettings,
    /// (ms, extra) of each request and each extra call in the window.
    events: VecDeque<(f64, bool)>,
    requests: u64,
    extras: u64,
}

impl RetryBudget {
    pub fn new(settings: BudgetSettings) -> RetryBudget {
        RetryBudget {
            settings,
            events: VecDeque::new(),
            requests: 0,
            extras: 0,
        }
    }

    /// Counts a request into the window.
    pub fn request(&mut self, now_ms: f64) {
        self.forget(now_ms);
        self.events.push_back((now_ms, false));
        self.requests = self.requests.saturating_add(1);
    }

    /// Takes one extra call at `now_ms`, if the window allows one.
    pub fn take(&mut self, now_ms: f64) -> bool {
        self.forget(now_ms);
        if self.extras >= self.allowed() {
            return false;
        }
        self.events.push_back((now_ms, true));
        self.extras = self.extras.saturating_add(1);
        true
    }

    /// The extra calls the window allows at `now_ms`, and those it has
    /// given.
    pub fn at(&mut self, now_ms: f64) -> (u64, u64) {
        self.forget(now_ms);
        (self.allowed(), self.extras)
    }

    fn allowed(&self) -> u64 {
        let share = (self.settings.share * self.requests as f64).floor() as u64;
        self.settings.min_per_window.saturating_add(share)
    }

    fn forget(&mut self, now_ms: f64) {
        let before = now_ms - self.settings.window_ms;
        while self.events.front().is_some_and(|(at, _)| *at <= before) {
            let (_, extra) = self.events.pop_front().expect("checked");
            if extra {
                self.extras = self.extras.saturating_sub(1);
            } else {
                self.requests = self.requests.saturating_sub(1);
            }
        }
    }
}

/// Why a request did not move to a fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stay {
    /// The route has no fallback the request may use.
    NoFallback,
    /// Every fallback is at its `rpm` or `tpm`, or its own breaker is open.
    Capacity,
    /// The retry budget is spent.
    Budget,
}

impl Stay {
    /// The reason the request's record gives.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Stay::NoFallback => None,
            Stay::Capacity => Some(Reason::NoFallback(records::Stay::Capacity)),
            Stay::Budget => Some(Reason::NoFallback(records::Stay::Budget)),
        }
    }
}

/// Whether the move to a fallback is an extra call, one the retry budget
/// pays for: after a failed attempt it is; past an open breaker (no
/// attempt) it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    AfterAttempt,
    WithoutAttempt,
}

/// The first of `candidates` (fallbacks whose breakers are closed) with
/// room for a call of `tokens` at `now_ms` within its `rpm` and `tpm`, and
/// for a move after an attempt a retry budget that allows it. The call is
/// counted against both.
pub fn take_fallback<'a>(
    candidates: &[&'a Route],
    usage: &mut MinuteWindows,
    budget: &mut RetryBudget,
    now_ms: f64,
    tokens: u64,
    kind: Move,
) -> Result<&'a Route, Stay> {
    if candidates.is_empty() {
        return Err(Stay::NoFallback);
    }
    let route = candidates
        .iter()
        .copied()
        .find(|route| usage.has_room(route, now_ms, tokens))
        .ok_or(Stay::Capacity)?;
    if kind == Move::AfterAttempt && !budget.take(now_ms) {
        return Err(Stay::Budget);
    }
    usage.at(&route.name, now_ms).add(now_ms, tokens);
    Ok(route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(share: f64, min_per_window: u64) -> RetryBudget {
        RetryBudget::new(BudgetSettings {
            share,
            window_ms: 10_000.0,
            min_per_window,
        })
    }

    fn route(rpm: u64, tpm: u64) -> Route {
        toml::from_str(&format!(
            "name = \"backup\"\nprovider = \"p\"\nmodel = \"m-2026-01-01\"\nregion = \"r\"\ntier = \"large\"\nprompt_variant = \"v\"\nprice_input_per_mtok = 1.0\nprice_output_per_mtok = 1.0\nrpm = {rpm}\ntpm = {tpm}\n"
        ))
        .unwrap()
    }

    fn take(
        usage: &mut MinuteWindows,
        budget: &mut RetryBudget,
        backup: &Route,
        now_ms: f64,
        kind: Move,
    ) -> Result<String, Stay> {
        take_fallback(&[backup], usage, budget, now_ms, 10, kind).map(|route| route.name.clone())
    }

    #[test]
    fn the_budget_allows_its_share_of_the_window() {
        let mut budget = budget(0.2, 0);
        let mut usage = MinuteWindows::default();
        let backup = route(1000, 1_000_000);
        let mut extras = 0;
        for index in 0..50 {
            let now = f64::from(index) * 10.0;
            budget.request(now);
            extras +=
                u32::from(take(&mut usage, &mut budget, &backup, now, Move::AfterAttempt).is_ok());
        }
        assert_eq!(extras, 10);
        // Past the window, what was spent is forgotten.
        budget.request(20_000.0);
        assert_eq!(
            take(
                &mut usage,
                &mut budget,
                &backup,
                20_000.0,
                Move::AfterAttempt
            ),
            Err(Stay::Budget)
        );
        // A move without a failed attempt (an open breaker) is not extra.
        assert!(
            take(
                &mut usage,
                &mut budget,
                &backup,
                20_000.0,
                Move::WithoutAttempt
            )
            .is_ok()
        );
        assert!(
            take(
                &mut usage,
                &mut self::budget(0.0, 2),
                &backup,
                0.0,
                Move::AfterAttempt
            )
            .is_ok()
        );
    }

    #[test]
    fn a_fallback_is_used_within_its_rpm_and_tpm_only() {
        let mut budget = budget(1.0, 100);
        let mut usage = MinuteWindows::default();
        let by_rpm = route(3, 1_000_000);
        let taken = (0..5)
            .filter(|index| {
                take(
                    &mut usage,
                    &mut budget,
                    &by_rpm,
                    f64::from(*index),
                    Move::AfterAttempt,
                )
                .is_ok()
            })
            .count();
        assert_eq!(taken, 3);
        // A minute on, the window has room again.
        assert!(
            take(
                &mut usage,
                &mut budget,
                &by_rpm,
                60_001.0,
                Move::AfterAttempt
            )
            .is_ok()
        );
        let mut usage = MinuteWindows::default();
        let by_tpm = route(1000, 25);
        assert!(take(&mut usage, &mut budget, &by_tpm, 0.0, Move::AfterAttempt).is_ok());
        assert!(take(&mut usage, &mut budget, &by_tpm, 1.0, Move::AfterAttempt).is_ok());
        assert_eq!(
            take(&mut usage, &mut budget, &by_tpm, 2.0, Move::AfterAttempt),
            Err(Stay::Capacity)
        );
    }

    #[test]
    fn a_full_fallback_takes_nothing_from_the_budget() {
        let mut budget = budget(0.0, 1);
        let mut usage = MinuteWindows::default();
        let full = route(0, 1_000_000);
        assert_eq!(
            take(&mut usage, &mut budget, &full, 0.0, Move::AfterAttempt),
            Err(Stay::Capacity)
        );
        assert_eq!(budget.at(0.0), (1, 0));
    }
}
