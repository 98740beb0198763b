//! `replay fallback --json`/`--out`: the gateway policies replayed over a
//! route's request records, and the breaker search, which `report --records`
//! renders. Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

/// A circuit breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerSettings {
    /// Consecutive failures that open it.
    pub open_after: u32,
    /// How long it stays open before one half-open probe.
    pub open_ms: f64,
    /// A first token later than this is a failure, and the request moves to
    /// the fallback when it passes; `None` counts errors and 429s only.
    pub first_token_deadline_ms: Option<f64>,
}

/// When the breaker learns how a request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Learning {
    /// Before the next request arrives (DOMAIN.md's reference replay).
    Instantly,
    /// At the moment the outcome is known: the first token, the error, or
    /// the deadline passing. Requests already in flight are not saved.
    AtOutcome,
}

/// What one policy did to the recorded traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOutcome {
    pub name: String,
    pub breaker: Option<BreakerSettings>,
    pub requests: u64,
    /// Seconds every user waited for a first token, summed.
    pub total_wait_s: f64,
    pub mean_wait_s: f64,
    pub p50_wait_s: f64,
    pub p95_wait_s: f64,
    pub p99_wait_s: f64,
    /// Requests answered by the fallback route.
    pub fallback_requests: u64,
    pub fallback_share: f64,
    /// The most requests the fallback received in one second.
    pub peak_fallback_per_s: u64,
    /// Requests sent beyond one per user request (a deadline or an error
    /// followed by the fallback), and their share of the requests.
    pub extra_requests: u64,
    pub extra_share: f64,
    /// Requests moved because their first token was late.
    pub deadline_fallbacks: u64,
    /// Requests that fell back after an error before their first token.
    pub error_fallbacks: u64,
    /// Requests sent straight to the fallback by an open breaker.
    pub breaker_fallbacks: u64,
    pub breaker_opens: u64,
    /// Recorded failures after the first token: no policy may switch them
    /// (the user already has part of an answer), so each is a failure.
    pub failed_after_first_token: u64,
    /// Requests the records show moved without a try (serve's open
    /// breaker) that this policy sends to the primary: each goes as the
    /// nearest request in time the primary was tried with.
    #[serde(default)]
    pub imputed_requests: u64,
}

/// One point of the breaker search and how it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerPoint {
    pub first_token_deadline_ms: f64,
    pub open_after: u32,
    pub p95_wait_s: f64,
    pub p99_wait_s: f64,
    pub total_wait_s: f64,
    pub fallback_share: f64,
    pub extra_share: f64,
    /// The most requests the fallback received in one second.
    #[serde(default)]
    pub peak_fallback_per_s: u64,
    /// Within every bound: the fallback's share of traffic, the retry
    /// budget, and the fallback's capacity.
    pub admissible: bool,
}

/// The search for the breaker's deadline and failure count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerCalibration {
    pub max_fallback_share: f64,
    /// The retry budget and the fallback's capacity the choice keeps within
    /// (version 1 documents searched without them).
    #[serde(default)]
    pub retry_budget: Option<f64>,
    #[serde(default)]
    pub fallback_capacity_per_s: Option<f64>,
    pub open_ms: f64,
    pub deadlines_ms: Vec<f64>,
    pub open_after: Vec<u32>,
    /// The admissible point with the lowest p95 wait (ties: the lower p99,
    /// the lower total wait, fewer fallbacks, a later deadline, a larger
    /// count, in that order); `None` when no point keeps within every bound.
    pub chosen: Option<BreakerPoint>,
    /// The chosen point's neighbours in the grid: one step of deadline or
    /// of count either way.
    pub neighbours: Vec<BreakerPoint>,
    pub points: Vec<BreakerPoint>,
}

pub const FALLBACK_SCHEMA_VERSION: u32 = 3;

/// Where a fallback replay's fallback latency came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackLatencySource {
    /// Requests that moved to the fallback timed by their own records: the
    /// moved request's first token less the time of the attempt it left.
    pub moved_timed: u64,
    /// Requests that moved whose abandoned attempt has no time (LiteLLM's
    /// spend rows do not time it): the fallback's latency for them is its
    /// record nearest in time.
    pub moved_untimed: u64,
    /// The fallback route's records of requests sent to it directly.
    pub direct: u64,
}

/// What `replay fallback --out` writes.
pub const FALLBACK_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a fallback replay document",
    crate::atomic::Replaces::Document {
        keys: &["schema_version", "records", "route"],
        kind: Some("fallback"),
    },
);

/// `replay fallback --json`: the replayed policies, and the breaker search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackDocument {
    /// 2: the breaker search keeps within the retry budget and the
    /// fallback's capacity too, and says so; 3: `fallback_latency`.
    #[serde(deserialize_with = "crate::version::known::<_, 1, 3>")]
    pub schema_version: u32,
    pub kind: String,
    pub records: crate::schema::InputFile,
    pub route: String,
    /// The fallback route whose records gave its latency, or `None` for a
    /// constant.
    pub fallback_route: Option<String>,
    pub fallback_ttft_ms: Option<f64>,
    /// With `fallback_route`: which of its records timed it.
    #[serde(default)]
    pub fallback_latency: Option<FallbackLatencySource>,
    pub learning: Learning,
    /// The fallback route's capacity from the route table, requests per
    /// second; `None` without `--routes`.
    pub fallback_capacity_per_s: Option<f64>,
    pub retry_budget: f64,
    pub policies: Vec<PolicyOutcome>,
    pub calibration: Option<BreakerCalibration>,
}

impl FallbackDocument {
    /// The policies as a table's header and rows, for the terminal and the
    /// report alike.
    pub fn policy_table(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "policy",
            "total wait s",
            "p50 s",
            "p95 s",
            "p99 s",
            "to fallback",
            "peak/s",
            "extra",
            "opens",
            "failed after 1st token",
        ];
        let rows = self
            .policies
            .iter()
            .map(|policy| {
                vec![
                    policy.name.clone(),
                    format!("{:.1}", policy.total_wait_s),
                    format!("{:.2}", policy.p50_wait_s),
                    format!("{:.2}", policy.p95_wait_s),
                    format!("{:.2}", policy.p99_wait_s),
                    format!(
                        "{} ({:.1}%)",
                        policy.fallback_requests,
                        policy.fallback_share * 100.0
                    ),
                    policy.peak_fallback_per_s.to_string(),
                    format!("{:.1}%", policy.extra_share * 100.0),
                    policy.breaker_opens.to_string(),
                    policy.failed_after_first_token.to_string(),
                ]
            })
            .collect();
        (header, rows)
    }
}
