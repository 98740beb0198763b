//! Live counters of a run: each finished call updates its tier's and says
//! so as an event, which the command line's reporter draws.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::events::Event;
use crate::policy::{to_picodollars, to_usd};
use crate::schema::CallTier;

/// Counters of one tier, updated by the workers.
#[derive(Debug, Default)]
pub struct TierCounters {
    pub planned: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
    pub cached: AtomicU64,
    /// The kernel's integer picodollars, so the sum is exact and atomic.
    pub picodollars: AtomicI64,
    /// Why the latest failed call failed (its `error_kind`).
    pub last_error: Mutex<Option<String>>,
}

impl TierCounters {
    /// One call finished; `error` is its `error_kind` where it failed.
    pub fn finished(&self, error: Option<&str>, cached: bool, cost: Option<f64>) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if let Some(kind) = error {
            self.errors.fetch_add(1, Ordering::Relaxed);
            *self.last_error.lock().expect("never poisoned") = Some(kind.to_owned());
        }
        if cached {
            self.cached.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(cost) = cost {
            self.picodollars
                .fetch_add(to_picodollars(cost), Ordering::Relaxed);
        }
    }

    pub fn dollars(&self) -> f64 {
        to_usd(i128::from(self.picodollars.load(Ordering::Relaxed)))
    }
}

impl TierCounters {
    /// The counts so far, as the event of tier `tier`.
    pub fn progress(&self, tier: CallTier) -> Event {
        Event::Progress {
            stage: "run",
            lane: tier.name().to_owned(),
            done: self.done.load(Ordering::Relaxed),
            total: self.planned.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            last_error: self.last_error.lock().expect("never poisoned").clone(),
            retries: self.retries.load(Ordering::Relaxed),
            cached: self.cached.load(Ordering::Relaxed),
            cost_usd: self.dollars(),
        }
    }
}
