//! Client-side politeness: per-tier concurrency that halves on a 429 and
//! grows back one slot per window of successes (AIMD), token buckets for
//! requests and tokens per minute, jittered exponential backoff, and a retry
//! budget so that a failing endpoint is not hit with a storm of retries.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// A concurrency limit between 1 and `max` that adapts to overload.
#[derive(Debug)]
pub struct AdaptiveLimit {
    max: usize,
    state: Mutex<LimitState>,
    released: Notify,
}

#[derive(Debug)]
struct LimitState {
    limit: f64,
    in_flight: usize,
    last_cut: Option<Instant>,
}

/// A slot of an [`AdaptiveLimit`], given back when dropped.
#[derive(Debug)]
pub struct Slot<'a> {
    owner: &'a AdaptiveLimit,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.owner.state.lock().expect("unpoisoned").in_flight -= 1;
        self.owner.released.notify_waiters();
    }
}

impl AdaptiveLimit {
    pub fn new(max: usize) -> AdaptiveLimit {
        AdaptiveLimit {
            max: max.max(1),
            state: Mutex::new(LimitState {
                limit: max.max(1) as f64,
                in_flight: 0,
                last_cut: None,
            }),
            released: Notify::new(),
        }
    }

    pub async fn acquire(&self) -> Slot<'_> {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut state = self.state.lock().expect("unpoisoned");
                if (state.in_flight as f64) < state.limit.floor() {
                    state.in_flight += 1;
                    return Slot { owner: self };
                }
            }
            released.await;
        }
    }

    /// A success: one more slot after `limit` successes in a row.
    pub fn succeeded(&self) {
        let mut state = self.state.lock().expect("unpoisoned");
        let before = state.limit.floor();
        state.limit = (state.limit + 1.0 / state.limit).min(self.max as f64);
        if state.limit.floor() > before {
            drop(state);
            self.released.notify_waiters();
        }
    }

    /// The endpoint said it is overloaded: halve, at most once a second so a
    /// burst of 429s from the same moment counts once.
    pub fn overloaded(&self) {
        let mut state = self.state.lock().expect("unpoisoned");
        let now = Instant::now();
        if state
            .last_cut
            .is_some_and(|cut| now.duration_since(cut) < Duration::from_secs(1))
        {
            return;
        }
        state.last_cut = Some(now);
        state.limit = (state.limit / 2.0).max(1.0);
    }

    #[cfg(test)]
    fn current(&self) -> usize {
        self.state.lock().expect("unpoisoned").limit.floor() as usize
    }
}

/// A token bucket refilled continuously at `per_minute / 60` per second,
/// holding at most a minute's worth.
#[derive(Debug)]
pub struct TokenBucket {
    capacity: f64,
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn per_minute(per_minute: f64) -> TokenBucket {
        TokenBucket {
            capacity: per_minute,
            per_second: per_minute / 60.0,
            state: Mutex::new((per_minute, Instant::now())),
        }
    }

    /// How long to wait before `amount` is available, taking it if it is.
    fn try_take(&self, amount: f64, now: Instant) -> Option<Duration> {
        // A request bigger than the bucket waits for a full bucket, then goes.
        let amount = amount.min(self.capacity);
        let mut state = self.state.lock().expect("unpoisoned");
        let (tokens, last) = &mut *state;
        *tokens = (*tokens + now.saturating_duration_since(*last).as_secs_f64() * self.per_second)
            .min(self.capacity);
        *last = now;
        if *tokens >= amount {
            *tokens -= amount;
            None
        } else {
            Some(Duration::from_secs_f64(
                (amount - *tokens) / self.per_second,
            ))
        }
    }

    pub async fn take(&self, amount: f64) {
        while let Some(wait) = self.try_take(amount, Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Retries allowed as a share of first attempts, plus a few so that a small
/// run can still retry.
#[derive(Debug)]
pub struct RetryBudget {
    share: f64,
    first_attempts: AtomicU64,
    retries: AtomicU64,
}

/// Retries any run may make whatever its size.
const RETRY_FLOOR: u64 = 10;

impl RetryBudget {
    pub fn new(share: f64) -> RetryBudget {
        RetryBudget {
            share,
            first_attempts: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }

    pub fn first_attempt(&self) {
        self.first_attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry if the budget allows it.
    pub fn try_retry(&self) -> bool {
        let allowed =
            (self.share * self.first_attempts.load(Ordering::Relaxed) as f64) as u64 + RETRY_FLOOR;
        self.retries
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                (used < allowed).then_some(used + 1)
            })
            .is_ok()
    }
}

/// The delay before retry number `retry` (1-based): uniform in
/// [0, min(cap, base × 2^(retry−1))] ("full jitter"), never less than the
/// server's `Retry-After`.
pub fn backoff(base: Duration, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
    const CAP: Duration = Duration::from_secs(30);
    let ceiling = base
        .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
        .min(CAP);
    let jittered = ceiling.mul_f64(unit.clamp(0.0, 1.0));
    match retry_after {
        // Past the server's wait, spread the retries so they do not return together.
        Some(wait) => wait + base.mul_f64(unit.clamp(0.0, 1.0)),
        None => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_halves_on_overload_and_grows_back_slowly() {
        let limit = AdaptiveLimit::new(16);
        limit.overloaded();
        assert_eq!(limit.current(), 8);
        limit.overloaded(); // same second: counted once
        assert_eq!(limit.current(), 8);
        for _ in 0..7 {
            limit.succeeded();
        }
        assert_eq!(limit.current(), 8);
        for _ in 0..2 {
            limit.succeeded();
        }
        assert_eq!(limit.current(), 9);
        for _ in 0..1000 {
            limit.succeeded();
        }
        assert_eq!(limit.current(), 16);
    }

    #[tokio::test]
    async fn slots_are_limited_and_given_back() {
        let limit = AdaptiveLimit::new(2);
        let first = limit.acquire().await;
        let _second = limit.acquire().await;
        let third = tokio::time::timeout(Duration::from_millis(20), limit.acquire()).await;
        assert!(third.is_err(), "a third slot was given");
        drop(first);
        let third = tokio::time::timeout(Duration::from_millis(200), limit.acquire()).await;
        assert!(third.is_ok());
    }

    #[test]
    fn buckets_refill_at_their_rate() {
        let bucket = TokenBucket::per_minute(60.0);
        let start = Instant::now();
        assert_eq!(bucket.try_take(60.0, start), None);
        let wait = bucket.try_take(2.0, start).unwrap();
        assert!((wait.as_secs_f64() - 2.0).abs() < 0.01, "{wait:?}");
        assert_eq!(bucket.try_take(2.0, start + Duration::from_secs(2)), None);
        // Bigger than the bucket: waits for a full one.
        let wait = bucket
            .try_take(600.0, start + Duration::from_secs(2))
            .unwrap();
        assert!((wait.as_secs_f64() - 60.0).abs() < 0.01, "{wait:?}");
    }

    #[test]
    fn the_budget_caps_retries_at_a_share_of_first_attempts() {
        let budget = RetryBudget::new(0.1);
        for _ in 0..200 {
            budget.first_attempt();
        }
        let granted = (0..100).filter(|_| budget.try_retry()).count();
        assert_eq!(granted as u64, 20 + RETRY_FLOOR);
    }

    #[test]
    fn backoff_grows_and_respects_retry_after() {
        let base = Duration::from_millis(100);
        assert_eq!(backoff(base, 1, None, 1.0), base);
        assert_eq!(backoff(base, 4, None, 1.0), Duration::from_millis(800));
        assert_eq!(backoff(base, 30, None, 1.0), Duration::from_secs(30));
        assert!(backoff(base, 3, None, 0.5) <= Duration::from_millis(200));
        let wait = Duration::from_secs(2);
        assert!(backoff(base, 1, Some(wait), 0.0) >= wait);
        assert!(backoff(base, 1, Some(wait), 0.9) >= wait);
    }
}
