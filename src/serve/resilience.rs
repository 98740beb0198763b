//! What lets a request leave a failing route safely: each route's breaker
//! (the kernel's, the one `replay fallback` replays), the retry budget that
//! bounds the extra calls falling back and hedging make, and each route's `rpm` and
//! `tpm` over the last minute, which a fallback may not exceed. All of it is
//! per serve process: a fleet of replicas has a breaker and a budget each.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::admission::{MinuteWindow, entry};
use super::log::{Level, Log};
use crate::policy::{Admit, Breaker, BreakerState};
use crate::records::{self, Reason};
use crate::routes::{ResolvedTable, Route};
use crate::schema::BreakerSettings;

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

/// Why a failed request did not move to a fallback.
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

#[derive(Debug, Default)]
struct Budget {
    /// (ms, extra) of each request and each extra call in the window.
    events: VecDeque<(f64, bool)>,
    requests: u64,
    extras: u64,
}

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
    budget_settings: BudgetSettings,
    breakers: Mutex<BTreeMap<String, Watched>>,
    budget: Mutex<Budget>,
    usage: Mutex<HashMap<String, MinuteWindow>>,
    pub budget_counts: BudgetCounts,
    log: Arc<Log>,
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
            budget_settings,
            breakers: Mutex::new(BTreeMap::new()),
            budget: Mutex::new(Budget::default()),
            usage: Mutex::new(HashMap::new()),
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

    /// How a call to `route` went, known at `at_ms`.
    pub fn outcome(&self, route: &str, at_ms: f64, failure: bool, probe: bool) {
        if let Some(watched) = self.breakers.lock().expect("unpoisoned").get_mut(route) {
            watched.breaker.outcome(at_ms, failure, probe);
        }
    }

    /// Counts a request into the budget's window.
    pub fn request(&self, now_ms: f64) {
        let mut budget = self.budget.lock().expect("unpoisoned");
        self.forget_budget(&mut budget, now_ms);
        budget.events.push_back((now_ms, false));
        budget.requests += 1;
    }

    fn forget_budget(&self, budget: &mut Budget, now_ms: f64) {
        let before = now_ms - self.budget_settings.window_ms;
        while budget.events.front().is_some_and(|(at, _)| *at <= before) {
            let (_, extra) = budget.events.pop_front().expect("checked");
            if extra {
                budget.extras -= 1;
            } else {
                budget.requests -= 1;
            }
        }
    }

    /// Counts a call of `tokens` to `route` at `now_ms` into its minute.
    pub fn count_call(&self, route: &Route, now_ms: f64, tokens: u64) {
        let mut usage = self.usage.lock().expect("unpoisoned");
        entry(&mut usage, &route.name)
            .at(now_ms)
            .add(now_ms, tokens);
    }

    /// Takes one extra call (a hedge's copy) from the retry budget, if it
    /// has one.
    pub fn take_extra(&self, now_ms: f64) -> bool {
        let mut budget = self.budget.lock().expect("unpoisoned");
        self.take_from(&mut budget, now_ms, Extra::Hedge)
    }

    fn allowed(&self, budget: &Budget) -> u64 {
        self.budget_settings.min_per_window
            + (self.budget_settings.share * budget.requests as f64).floor() as u64
    }

    fn take_from(&self, budget: &mut Budget, now_ms: f64, asking: Extra) -> bool {
        self.forget_budget(budget, now_ms);
        if budget.extras >= self.allowed(budget) {
            self.budget_counts.refused[asking as usize].fetch_add(1, Ordering::Relaxed);
            return false;
        }
        budget.events.push_back((now_ms, true));
        budget.extras += 1;
        self.budget_counts.taken[asking as usize].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The extra calls the retry budget allows in its window at `now_ms`,
    /// and those it has given.
    pub fn budget_at(&self, now_ms: f64) -> (u64, u64) {
        let mut budget = self.budget.lock().expect("unpoisoned");
        self.forget_budget(&mut budget, now_ms);
        (self.allowed(&budget), budget.extras)
    }

    /// The first of `candidates` (fallbacks whose breakers are closed) with
    /// room for a call of `tokens` at `now_ms` within its `rpm` and `tpm`,
    /// and, for an `extra` call (one after a failed attempt), a retry
    /// budget that allows it; the call is counted against both. The budget
    /// and the usage are held together, so concurrent requests cannot
    /// overrun either.
    pub fn take_fallback(
        &self,
        candidates: &[&Route],
        now_ms: f64,
        tokens: u64,
        extra: bool,
    ) -> Result<String, Stay> {
        if candidates.is_empty() {
            return Err(Stay::NoFallback);
        }
        let mut budget = self.budget.lock().expect("unpoisoned");
        let mut usage = self.usage.lock().expect("unpoisoned");
        let route = candidates
            .iter()
            .find(|route| {
                let window = entry(&mut usage, &route.name).at(now_ms);
                window.calls() < route.rpm && window.tokens() + tokens <= route.tpm
            })
            .ok_or(Stay::Capacity)?;
        if extra && !self.take_from(&mut budget, now_ms, Extra::Fallback) {
            return Err(Stay::Budget);
        }
        entry(&mut usage, &route.name)
            .at(now_ms)
            .add(now_ms, tokens);
        Ok(route.name.clone())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resilience(share: f64, min_per_window: u64) -> Resilience {
        let table = ResolvedTable {
            logical_model: "m".to_owned(),
            routes: Vec::new(),
            policy: crate::routes::ResolvedPolicy::Single {
                route: "a".to_owned(),
            },
            fallbacks: Vec::new(),
            constraints: BTreeMap::new(),
        };
        Resilience::new(
            BudgetSettings {
                share,
                window_ms: 10_000.0,
                min_per_window,
            },
            &table,
            Arc::new(Log::to_stderr(crate::serve::log::LogSettings {
                format: crate::serve::log::LogFormat::Json,
                requests: false,
                least: Level::Error,
            })),
        )
    }

    fn route(rpm: u64, tpm: u64) -> Route {
        toml::from_str(&format!(
            "name = \"backup\"\nprovider = \"p\"\nmodel = \"m-2026-01-01\"\nregion = \"r\"\ntier = \"large\"\nprompt_variant = \"v\"\nprice_input_per_mtok = 1.0\nprice_output_per_mtok = 1.0\nrpm = {rpm}\ntpm = {tpm}\n"
        ))
        .unwrap()
    }

    #[test]
    fn the_budget_allows_its_share_of_the_window() {
        let resilience = resilience(0.2, 0);
        let backup = route(1000, 1_000_000);
        let mut extras = 0;
        for index in 0..50 {
            let now = f64::from(index) * 10.0;
            resilience.request(now);
            extras += u32::from(resilience.take_fallback(&[&backup], now, 10, true).is_ok());
        }
        assert_eq!(extras, 10);
        // Past the window, what was spent is forgotten.
        resilience.request(20_000.0);
        assert_eq!(
            resilience.take_fallback(&[&backup], 20_000.0, 10, true),
            Err(Stay::Budget)
        );
        // A move without a failed attempt (an open breaker) is not extra.
        assert!(
            resilience
                .take_fallback(&[&backup], 20_000.0, 10, false)
                .is_ok()
        );
        assert!(
            self::resilience(0.0, 2)
                .take_fallback(&[&backup], 0.0, 10, true)
                .is_ok()
        );
    }

    #[test]
    fn a_fallback_is_used_within_its_rpm_and_tpm_only() {
        let resilience = resilience(1.0, 100);
        let by_rpm = route(3, 1_000_000);
        let taken = (0..5)
            .filter(|index| {
                resilience
                    .take_fallback(&[&by_rpm], f64::from(*index), 10, true)
                    .is_ok()
            })
            .count();
        assert_eq!(taken, 3);
        // A minute on, the window has room again.
        assert!(
            resilience
                .take_fallback(&[&by_rpm], 60_001.0, 10, true)
                .is_ok()
        );
        let resilience = self::resilience(1.0, 100);
        let by_tpm = route(1000, 25);
        assert!(resilience.take_fallback(&[&by_tpm], 0.0, 10, true).is_ok());
        assert!(resilience.take_fallback(&[&by_tpm], 1.0, 10, true).is_ok());
        assert_eq!(
            resilience.take_fallback(&[&by_tpm], 2.0, 10, true),
            Err(Stay::Capacity)
        );
    }
}
