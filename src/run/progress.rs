//! Live counters of a run, the progress bars drawn from them on stderr
//! (only on a terminal and without `--quiet`), and the closing summary.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

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
}

impl TierCounters {
    pub fn finished(&self, error: bool, cached: bool, cost: Option<f64>) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
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

/// Bars per tier, redrawn from the counters a few times a second.
#[derive(Debug)]
pub struct Progress {
    bars: Vec<(CallTier, ProgressBar)>,
    started: Instant,
}

impl Progress {
    pub fn new(tiers: &[CallTier], counters: &[&TierCounters], visible: bool) -> Progress {
        let target = if visible {
            ProgressDrawTarget::stderr_with_hz(4)
        } else {
            ProgressDrawTarget::hidden()
        };
        let multi = MultiProgress::with_draw_target(target);
        let style =
            ProgressStyle::with_template("{prefix:>8} [{bar:28}] {pos}/{len} {msg} eta {eta}")
                .expect("a valid template")
                .progress_chars("=> ");
        let bars = tiers
            .iter()
            .zip(counters)
            .map(|(tier, counters)| {
                let bar = multi.add(ProgressBar::new(counters.planned.load(Ordering::Relaxed)));
                bar.set_style(style.clone());
                bar.set_prefix(tier.name());
                (*tier, bar)
            })
            .collect();
        Progress {
            bars,
            started: Instant::now(),
        }
    }

    pub fn update(&self, counters: &[&TierCounters]) {
        let elapsed = self
            .started
            .elapsed()
            .max(Duration::from_millis(1))
            .as_secs_f64();
        for ((_, bar), counters) in self.bars.iter().zip(counters) {
            let done = counters.done.load(Ordering::Relaxed);
            bar.set_position(done);
            bar.set_message(format!(
                "errors {} retries {} {:.0} req/s ${:.4}",
                counters.errors.load(Ordering::Relaxed),
                counters.retries.load(Ordering::Relaxed),
                done as f64 / elapsed,
                counters.dollars(),
            ));
        }
    }

    pub fn finish(&self) {
        for (_, bar) in &self.bars {
            bar.finish_and_clear();
        }
    }
}
