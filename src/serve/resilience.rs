//! What lets a request leave a failing route safely, held for concurrent
//! requests: each route's breaker (the kernel's, the one `replay fallback`
//! replays), the retry budget that bounds the extra calls falling back and
//! hedging make, and each route's `rpm` and `tpm` over the last minute,
//! which a fallback may not exceed (the kernel's too), with the log lines
//! and counts `/metrics` shows. All of it is per serve process: a fleet of
//! replicas has a breaker and a budget each.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::log::{Level, Log};
use crate::policy::{
    Admit, Breaker, BreakerState, BudgetSettings, CallOutcome, FallbackMove, MinuteWindows,
    RetryBudget, Stay, take_fallback,
};
use crate::routes::{ResolvedTable, Route};
use crate::schema::BreakerSettings;

/// A route's breaker, and the opens and closes the log has told.
#[derive(Debug)]
struct Watched {
    breaker: Breaker,
    told: (u64, u64),
}

/// Extra calls the retry budget allowed and refused, by what asked:
/// `[fallback, hedge]`.
#[derive(Debug, Default)]
pub struct BudgetCounts {
    pub taken: [AtomicU64; 2],
    pub refused: [AtomicU64; 2],
}

/// What asked the retry budget for an extra call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extra {
    Fallback = 0,
    Hedge = 1,
}

/// Breakers, the budget and the usage windows of one serve.
#[derive(Debug)]
pub struct Resilience {
    breakers: Mutex<BTreeMap<String, Watched>>,
    /// Held together: a fallback's call is counted against both at once,
    /// so concurrent requests cannot overrun either.
    leaving: Mutex<Leaving>,
    pub budget_counts: BudgetCounts,
    log: Arc<Log>,
}

#[derive(Debug)]
struct Leaving {
    budget: RetryBudget,
    usage: MinuteWindows,
}

/// A breaker's state for `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerReport {
    pub route: String,
    /// 0 closed, 1 open, 2 half-open.
    pub state: u8,
    pub opens: u64,
}

/// The kernel's settings for a route's `[routes.breaker]`.
pub fn breaker_settings(route: &Route) -> Option<BreakerSettings> {
    route.breaker.map(|breaker| BreakerSettings {
        open_after: breaker.open_after,
        open_ms: breaker.open_ms,
        first_token_deadline_ms: Some(breaker.first_token_deadline_ms),
    })
}

impl Resilience {
    pub fn new(
        budget_settings: BudgetSettings,
        table: &ResolvedTable,
        log: Arc<Log>,
    ) -> Resilience {
        let resilience = Resilience {
            breakers: Mutex::new(BTreeMap::new()),
            leaving: Mutex::new(Leaving {
                budget: RetryBudget::new(budget_settings),
                usage: MinuteWindows::default(),
            }),
            budget_counts: BudgetCounts::default(),
            log,
        };
        resilience.follow(table);
        resilience
    }

    /// After a reload: a route whose breaker settings are unchanged keeps
    /// its breaker and what it has learned; a changed one starts closed.
    pub fn follow(&self, table: &ResolvedTable) {
        let mut breakers = self.breakers.lock().expect("unpoisoned");
        let mut kept = BTreeMap::new();
        for route in &table.routes {
            if let Some(settings) = breaker_settings(route) {
                let watched = match breakers.remove(&route.name) {
                    Some(watched) if watched.breaker.settings() == settings => watched,
                    _ => Watched {
                        breaker: Breaker::new(settings),
                        told: (0, 0),
                    },
                };
                kept.insert(route.name.clone(), watched);
            }
        }
        *breakers = kept;
    }

    /// What `route`'s breaker does with a request at `now_ms`; `None` for a
    /// route without one.
    pub fn admit(&self, route: &str, now_ms: f64) -> Option<Admit> {
        let mut breakers = self.breakers.lock().expect("unpoisoned");
        let watched = breakers.get_mut(route)?;
        let admit = watched.breaker.admit(now_ms);
        self.tell(route, watched);
        Some(admit)
    }

    /// Logs the opens and closes of `route`'s breaker not yet told. A
    /// breaker learns an outcome at the first look at or after its time
    /// (a request to the route, or a scrape of `/metrics`): so it is
    /// logged.
    fn tell(&self, route: &str, watched: &mut Watched) {
        let now = (watched.breaker.opens(), watched.breaker.closes());
        if now == watched.told {
            return;
        }
        let settings = watched.breaker.settings();
        if now.0 > watched.told.0 {
            self.log
                .event(
                    Level::Warn,
                    "breaker_opened",
                    format!(
                        "route {route:?} is failing: its breaker opened, and its requests go to its fallback for {} ms",
                        settings.open_ms
                    ),
                )
                .field("route", route)
                .field("opens", now.0)
                .field("open_ms", settings.open_ms)
                .emit();
        }
        if now.1 > watched.told.1 {
            self.log
                .event(
                    Level::Info,
                    "breaker_closed",
                    format!("route {route:?} answered its half-open probe: its breaker closed"),
                )
                .field("route", route)
                .field("closes", now.1)
                .emit();
        }
        watched.told = now;
    }

    /// How long after `now_ms` `route`'s open breaker lets its half-open
    /// probe through; `None` while it is closed or its probe is in flight.
    pub fn probe_in_ms(&self, route: &str, now_ms: f64) -> Option<f64> {
        let mut breakers = self.breakers.lock().expect("unpoisoned");
        let watched = breakers.get_mut(route)?;
        match watched.breaker.state_at(now_ms) {
            BreakerState::Open { until_ms } => Some((until_ms - now_ms).max(0.0)),
            BreakerState::Closed { .. } | BreakerState::Probing => None,
        }
    }

    /// Whether `route`'s breaker would send a request at `now_ms` to its
    /// fallback, without changing it: a fallback is only used closed.
    pub fn is_closed(&self, route: &str, now_ms: f64) -> bool {
        let mut breakers = self.breakers.lock().expect("unpoisoned");
        breakers.get_mut(route).is_none_or(|watched| {
            let state = watched.breaker.state_at(now_ms);
            self.tell(route, watched);
            matches!(state, BreakerState::Closed { .. })
        })
    }

    /// How a call to `route` the breaker admitted as `admitted` went,
    /// known at `at_ms`.
    pub fn outcome(&self, route: &str, at_ms: f64, call: CallOutcome, admitted: Admit) {
        if let Some(watched) = self.breakers.lock().expect("unpoisoned").get_mut(route) {
            watched.breaker.outcome(at_ms, call, admitted);
        }
    }

    /// Counts a request into the budget's window.
    pub fn request(&self, now_ms: f64) {
        self.leaving
            .lock()
            .expect("unpoisoned")
            .budget
            .request(now_ms);
    }

    /// Counts a call of `tokens` to `route` at `now_ms` into its minute.
    pub fn count_call(&self, route: &Route, now_ms: f64, tokens: u64) {
        let mut leaving = self.leaving.lock().expect("unpoisoned");
        leaving.usage.at(&route.name, now_ms).add(now_ms, tokens);
    }

    /// Takes one extra call (a hedge's copy) from the retry budget, if it
    /// has one.
    pub fn take_extra(&self, now_ms: f64) -> bool {
        let taken = self.leaving.lock().expect("unpoisoned").budget.take(now_ms);
        self.count(Extra::Hedge, taken);
        taken
    }

    fn count(&self, asking: Extra, taken: bool) {
        let counts = if taken {
            &self.budget_counts.taken
        } else {
            &self.budget_counts.refused
        };
        counts[asking as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The extra calls the retry budget allows in its window at `now_ms`,
    /// and those it has given.
    pub fn budget_at(&self, now_ms: f64) -> (u64, u64) {
        self.leaving.lock().expect("unpoisoned").budget.at(now_ms)
    }

    /// The kernel's choice of fallback among `candidates` (fallbacks whose
    /// breakers are closed) for a call of `tokens` at `now_ms`, counted
    /// against its minute and, for a move after an attempt, the budget.
    pub fn take_fallback(
        &self,
        candidates: &[&Route],
        now_ms: f64,
        tokens: u64,
        kind: FallbackMove,
    ) -> Result<String, Stay> {
        let mut leaving = self.leaving.lock().expect("unpoisoned");
        let Leaving { budget, usage } = &mut *leaving;
        let taken = take_fallback(candidates, usage, budget, now_ms, tokens, kind);
        if kind == FallbackMove::AfterAttempt && matches!(taken, Ok(_) | Err(Stay::Budget)) {
            self.count(Extra::Fallback, taken.is_ok());
        }
        taken.map(|route| route.name.clone())
    }

    /// Every breaker's state at `now_ms`, for `/metrics`.
    pub fn breakers(&self, now_ms: f64) -> Vec<BreakerReport> {
        let mut breakers = self.breakers.lock().expect("unpoisoned");
        breakers
            .iter_mut()
            .map(|(route, watched)| {
                let state = match watched.breaker.state_at(now_ms) {
                    BreakerState::Closed { .. } => 0,
                    BreakerState::Open { .. } => 1,
                    BreakerState::Probing => 2,
                };
                self.tell(route, watched);
                BreakerReport {
                    route: route.clone(),
                    state,
                    opens: watched.breaker.opens(),
                }
            })
            .collect()
    }
}
