//! Each gateway policy over the primary route's recorded requests, in
//! arrival order: the user's waits, the fallbacks, the breaker's opens.

use crate::policy::{Admit, Breaker, CallOutcome};
use crate::records::Status;
use crate::schema::{BreakerSettings, Learning, PolicyOutcome};
use crate::stats::percentile;

/// One recorded request of the primary route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrimaryRequest {
    pub arrival_ms: f64,
    /// When its first token came, after arrival; `None` when it never came.
    pub ttft_ms: Option<f64>,
    /// When it ended (an error: when the error came), after arrival.
    pub total_ms: Option<f64>,
    pub status: Status,
    /// Whether the primary was tried: a request serve's open breaker sent
    /// straight to the fallback was not, and has no outcome of its own.
    pub tried: bool,
    /// The fallback's own first token for this request, after it was
    /// moved, where the records have it (serve's do).
    pub fallback_ttft_ms: Option<f64>,
}

impl PrimaryRequest {
    /// A request the primary answered (or failed) as recorded.
    pub fn tried(
        arrival_ms: f64,
        ttft_ms: Option<f64>,
        total_ms: Option<f64>,
        status: Status,
    ) -> PrimaryRequest {
        PrimaryRequest {
            arrival_ms,
            ttft_ms,
            total_ms,
            status,
            tried: true,
            fallback_ttft_ms: None,
        }
    }
}

/// Where a request that leaves the primary is answered.
#[derive(Debug, Clone, PartialEq)]
pub enum FallbackLatency {
    /// Every fallback's first token after this many ms.
    Constant(f64),
    /// The fallback route's own recorded first tokens, by arrival time:
    /// the one nearest in time answers.
    Recorded(Vec<(f64, f64)>),
}

impl FallbackLatency {
    fn ttft_at(&self, at_ms: f64) -> f64 {
        match self {
            FallbackLatency::Constant(ms) => *ms,
            FallbackLatency::Recorded(points) => {
                let after = points.partition_point(|(arrival, _)| *arrival < at_ms);
                let candidates = [after.checked_sub(1), Some(after)];
                candidates
                    .into_iter()
                    .flatten()
                    .filter_map(|index| points.get(index))
                    .min_by(|a, b| (a.0 - at_ms).abs().total_cmp(&(b.0 - at_ms).abs()))
                    .map_or(0.0, |(_, ttft)| *ttft)
            }
        }
    }
}

/// A gateway policy for the primary route.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackPolicy {
    pub name: String,
    /// `None`: no breaker and no deadline; failures before the first token
    /// still fall back.
    pub breaker: Option<BreakerSettings>,
}

/// The three policies of the replay, for one breaker setting.
pub fn standard_policies(open_after: u32, open_ms: f64, deadline_ms: f64) -> Vec<FallbackPolicy> {
    vec![
        FallbackPolicy {
            name: "no-breaker".to_owned(),
            breaker: None,
        },
        FallbackPolicy {
            name: "errors-breaker".to_owned(),
            breaker: Some(BreakerSettings {
                open_after,
                open_ms,
                first_token_deadline_ms: None,
            }),
        },
        FallbackPolicy {
            name: "slow-first-token-breaker".to_owned(),
            breaker: Some(BreakerSettings {
                open_after,
                open_ms,
                first_token_deadline_ms: Some(deadline_ms),
            }),
        },
    ]
}

/// Runs each policy over the primary's requests (sorted by arrival).
pub fn replay_fallback(
    requests: &[PrimaryRequest],
    fallback: &FallbackLatency,
    policies: &[FallbackPolicy],
    learning: Learning,
) -> Vec<PolicyOutcome> {
    policies
        .iter()
        .map(|policy| replay_policy(requests, fallback, policy, learning))
        .collect()
}

pub(super) fn replay_policy(
    requests: &[PrimaryRequest],
    fallback: &FallbackLatency,
    policy: &FallbackPolicy,
    learning: Learning,
) -> PolicyOutcome {
    let mut breaker = policy.breaker.map(Breaker::new);
    let deadline = policy
        .breaker
        .and_then(|settings| settings.first_token_deadline_ms);
    let mut waits: Vec<f64> = Vec::with_capacity(requests.len());
    let mut outcome = empty_outcome(policy, requests.len() as u64);
    let mut fallback_seconds: Vec<i64> = Vec::new();
    let stand_ins = stand_ins(requests);
    for (index, recorded) in requests.iter().enumerate() {
        let now = recorded.arrival_ms;
        // Whether the breaker sends this request to the primary, and if so
        // whether as the half-open probe.
        let admitted = breaker
            .as_mut()
            .map_or(Admit::Route, |breaker| breaker.admit(now));
        let to_primary = admitted != Admit::Fallback;
        let fallback_ttft = |at: f64| {
            recorded
                .fallback_ttft_ms
                .unwrap_or_else(|| fallback.ttft_at(at))
        };
        // A request the primary never saw, sent to it here, goes as the
        // nearest request in time that it did see.
        let request = match (recorded.tried, to_primary, stand_ins[index]) {
            (false, true, Some(stand_in)) => {
                outcome.imputed_requests += 1;
                &requests[stand_in]
            }
            _ => recorded,
        };
        if !to_primary {
            let wait = fallback_ttft(now);
            waits.push(wait);
            outcome.fallback_requests += 1;
            outcome.breaker_fallbacks += 1;
            fallback_seconds.push((now / 1000.0).floor() as i64);
            continue;
        }
        let (wait, call, learned_after) = call_primary(
            request,
            deadline,
            now,
            &fallback_ttft,
            &mut outcome,
            &mut fallback_seconds,
        );
        waits.push(wait);
        if let Some(breaker) = &mut breaker {
            let at_ms = match learning {
                Learning::Instantly => now,
                Learning::AtOutcome => now + learned_after,
            };
            breaker.outcome(at_ms, call, admitted);
            if learning == Learning::Instantly {
                breaker.learn_all();
            }
        }
    }
    outcome.breaker_opens = breaker.as_ref().map_or(0, Breaker::opens);
    finish(&mut outcome, &mut waits, &mut fallback_seconds);
    outcome
}

/// A policy's outcome before its first request.
fn empty_outcome(policy: &FallbackPolicy, requests: u64) -> PolicyOutcome {
    PolicyOutcome {
        name: policy.name.clone(),
        breaker: policy.breaker,
        requests,
        total_wait_s: 0.0,
        mean_wait_s: 0.0,
        p50_wait_s: 0.0,
        p95_wait_s: 0.0,
        p99_wait_s: 0.0,
        fallback_requests: 0,
        fallback_share: 0.0,
        peak_fallback_per_s: 0,
        extra_requests: 0,
        extra_share: 0.0,
        deadline_fallbacks: 0,
        error_fallbacks: 0,
        breaker_fallbacks: 0,
        breaker_opens: 0,
        failed_after_first_token: 0,
        imputed_requests: 0,
    }
}

/// A request sent to the primary route: the user's wait, the call's
/// outcome as the breaker counts it, and when, after the request arrived,
/// that outcome is known. A late first token or a failure before one moves
/// the request to the fallback, counted in `outcome` and `fallback_seconds`.
fn call_primary(
    request: &PrimaryRequest,
    deadline: Option<f64>,
    now: f64,
    fallback_ttft: &dyn Fn(f64) -> f64,
    outcome: &mut PolicyOutcome,
    fallback_seconds: &mut Vec<i64>,
) -> (f64, CallOutcome, f64) {
    let failed_before_first_token = request.status.is_failure() && request.ttft_ms.is_none();
    let late = match (deadline, request.ttft_ms) {
        (Some(deadline), Some(ttft)) => ttft > deadline,
        (Some(_), None) => !request.status.is_failure(),
        (None, _) => false,
    };
    let timed_out = request.status == Status::Timeout;
    if late {
        let deadline = deadline.expect("late needs a deadline");
        outcome.deadline_fallbacks += 1;
        outcome.fallback_requests += 1;
        outcome.extra_requests += 1;
        fallback_seconds.push(((now + deadline) / 1000.0).floor() as i64);
        (
            deadline + fallback_ttft(now + deadline),
            CallOutcome::Deadline,
            deadline,
        )
    } else if failed_before_first_token {
        // A failure with no first token: the error comes when the
        // record says it ended, or at once when it says nothing; a
        // deadline that passes first moves the request then.
        let failed_at = request.total_ms.unwrap_or(0.0);
        let moved_at = deadline.map_or(failed_at, |deadline| failed_at.min(deadline));
        let call = if timed_out || deadline.is_some_and(|deadline| moved_at >= deadline) {
            outcome.deadline_fallbacks += 1;
            CallOutcome::Deadline
        } else {
            outcome.error_fallbacks += 1;
            if request.status == Status::RateLimited {
                CallOutcome::RateLimited
            } else {
                CallOutcome::Error
            }
        };
        outcome.fallback_requests += 1;
        outcome.extra_requests += 1;
        fallback_seconds.push(((now + moved_at) / 1000.0).floor() as i64);
        (moved_at + fallback_ttft(now + moved_at), call, moved_at)
    } else {
        let ttft = request.ttft_ms.unwrap_or(0.0);
        // A first token in time is the route answering: what fails
        // after it is the stream's, and the breaker does not count it.
        let call = if request.status.is_failure() {
            outcome.failed_after_first_token += 1;
            CallOutcome::Stall
        } else {
            CallOutcome::FirstToken
        };
        (ttft, call, ttft)
    }
}

/// For each request, the nearest request in arrival order the primary
/// was tried with (itself, if it was).
fn stand_ins(requests: &[PrimaryRequest]) -> Vec<Option<usize>> {
    let mut nearest = vec![None; requests.len()];
    let mut last: Option<usize> = None;
    for (index, request) in requests.iter().enumerate() {
        if request.tried {
            last = Some(index);
        }
        nearest[index] = last;
    }
    let mut next: Option<usize> = None;
    for index in (0..requests.len()).rev() {
        if requests[index].tried {
            next = Some(index);
        }
        let gap = |other: Option<usize>| {
            other.map(|other| (requests[other].arrival_ms - requests[index].arrival_ms).abs())
        };
        if let (Some(after), before) = (next, nearest[index])
            && before.is_none_or(|_| gap(Some(after)) < gap(before))
        {
            nearest[index] = Some(after);
        }
    }
    nearest
}

fn finish(outcome: &mut PolicyOutcome, waits: &mut [f64], fallback_seconds: &mut [i64]) {
    let n = waits.len().max(1) as f64;
    // Summed in milliseconds, then rounded to the millisecond, so the
    // total does not carry float noise from thousands of additions.
    let total_ms: f64 = waits.iter().sum();
    outcome.total_wait_s = (total_ms.round()) / 1000.0;
    outcome.mean_wait_s = total_ms / n / 1000.0;
    waits.sort_by(f64::total_cmp);
    let rank = |q: f64| percentile(waits, q).map_or(0.0, |wait| wait / 1000.0);
    outcome.p50_wait_s = rank(0.50);
    outcome.p95_wait_s = rank(0.95);
    outcome.p99_wait_s = rank(0.99);
    outcome.fallback_share = outcome.fallback_requests as f64 / n;
    outcome.extra_share = outcome.extra_requests as f64 / n;
    fallback_seconds.sort_unstable();
    let mut peak = 0u64;
    let mut run = 0u64;
    for (index, second) in fallback_seconds.iter().enumerate() {
        run = if index > 0 && fallback_seconds[index - 1] == *second {
            run + 1
        } else {
            1
        };
        peak = peak.max(run);
    }
    outcome.peak_fallback_per_s = peak;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brown_out() -> Vec<PrimaryRequest> {
        [
            0.4, 0.5, 0.4, 9.0, 12.0, 14.0, 13.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 0.5,
            0.4, 0.4, 0.5, 0.4,
        ]
        .iter()
        .enumerate()
        .map(|(index, seconds)| {
            PrimaryRequest::tried(
                index as f64 * 1000.0,
                Some(seconds * 1000.0),
                Some(seconds * 1000.0 + 500.0),
                Status::Ok,
            )
        })
        .collect()
    }

    #[test]
    fn the_brown_out_waits_domain_md_computes() {
        let outcomes = replay_fallback(
            &brown_out(),
            &FallbackLatency::Constant(900.0),
            &standard_policies(3, 5000.0, 3000.0),
            Learning::Instantly,
        );
        let by_name = |name: &str| {
            outcomes
                .iter()
                .find(|outcome| outcome.name == name)
                .unwrap()
        };
        assert_eq!(by_name("no-breaker").total_wait_s, 111.5);
        let breaker = by_name("slow-first-token-breaker");
        assert_eq!(breaker.total_wait_s, 26.3);
        // Requests 4-6 and the failed probe (11) pay the deadline.
        assert_eq!(breaker.deadline_fallbacks, 4);
        assert_eq!(breaker.breaker_fallbacks, 8);
        assert_eq!(breaker.breaker_opens, 2);
        assert_eq!(breaker.extra_requests, 4);
        // Errors only: nothing fails, so nothing changes.
        assert_eq!(by_name("errors-breaker").total_wait_s, 111.5);
    }

    #[test]
    fn a_breaker_that_learns_at_the_deadline_saves_fewer_requests() {
        let outcomes = replay_fallback(
            &brown_out(),
            &FallbackLatency::Constant(900.0),
            &standard_policies(3, 5000.0, 3000.0),
            Learning::AtOutcome,
        );
        let breaker = &outcomes[2];
        // Requests 4, 5 and 6 fail at 6, 7 and 8 s; 7 and 8 are sent before
        // the third failure is known and pay the deadline too.
        assert!(breaker.deadline_fallbacks > 4, "{breaker:?}");
        assert!(breaker.total_wait_s > 26.3 && breaker.total_wait_s < 111.5);
    }

    #[test]
    fn a_failure_after_the_first_token_is_never_a_save() {
        let requests = vec![PrimaryRequest::tried(
            0.0,
            Some(200.0),
            Some(4000.0),
            Status::Error,
        )];
        let outcomes = replay_fallback(
            &requests,
            &FallbackLatency::Constant(900.0),
            &standard_policies(1, 5000.0, 3000.0),
            Learning::Instantly,
        );
        for outcome in outcomes {
            assert_eq!(outcome.failed_after_first_token, 1);
            assert_eq!(outcome.fallback_requests, 0);
        }
    }

    #[test]
    fn the_fallback_answers_with_its_record_nearest_in_time() {
        let latency = FallbackLatency::Recorded(vec![(0.0, 100.0), (10_000.0, 700.0)]);
        assert_eq!(latency.ttft_at(2000.0), 100.0);
        assert_eq!(latency.ttft_at(9000.0), 700.0);
        assert_eq!(latency.ttft_at(50_000.0), 700.0);
    }
}
