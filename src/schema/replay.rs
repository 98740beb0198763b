//! The replay's versioned JSON document (`replay replicas --json`/`--out`),
//! which `routeval report --replay` renders.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version 2 added each policy's `replica_requests` and `busiest_share`;
/// version 3 names the router a calibration's flags are for (`router`) and
/// calls them `router_flags` (`sglang_flags` before).
pub const REPLAY_SCHEMA_VERSION: u32 = 3;

/// What `replay replicas --out` writes.
pub const REPLAY_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a replica-routing replay document",
    crate::atomic::Replaces::Document {
        keys: &["schema_version", "trace", "pool", "policies"],
        kind: None,
    },
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayDocument {
    #[serde(deserialize_with = "crate::version::known::<_, 1, REPLAY_SCHEMA_VERSION>")]
    pub schema_version: u32,
    pub trace: TraceSummary,
    pub pool: PoolSummary,
    pub policies: Vec<PolicyResult>,
    /// With `--calibrate`: the load guard and scorer chosen on the first
    /// part of the trace and checked on the rest.
    pub calibration: Option<Calibration>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSummary {
    pub path: String,
    pub requests: u64,
    pub duration_s: f64,
    pub prompt_tokens: u64,
    /// The hit rate of one replica holding all the pool's cache. With
    /// unbounded caches no routing can beat it; with bounded ones it is a
    /// reference, since LRU over one big cache is not the best placement.
    pub ceiling_hit_rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSummary {
    pub replicas: usize,
    /// Arrivals replayed this many times faster than recorded.
    pub speedup: f64,
    /// Blocks per replica; null is unbounded.
    pub cache_blocks: Option<usize>,
    pub block_tokens: u32,
    pub prefill_tokens_per_s: f64,
    pub decode_ms_per_token: f64,
    pub max_batch: u32,
    pub scrape_ms: f64,
    pub index_history: usize,
    pub index_loss_at_s: Option<f64>,
    pub kv_tokens: u64,
    pub window_s: f64,
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyResult {
    pub name: String,
    pub params: BTreeMap<String, Value>,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub hit_rate: f64,
    pub prefill_tokens: u64,
    pub ttft_ms: TtftQuantiles,
    pub queue_ms: QueueQuantiles,
    /// Time-weighted mean of the busiest replica's running requests over
    /// the idlest's (at least 1), while any request runs.
    pub imbalance: f64,
    /// Replica-seconds spent above twice the pool's mean load.
    pub herding_s: f64,
    /// Requests each replica was sent, in the pool's order (empty in a
    /// version 1 document).
    #[serde(default)]
    pub replica_requests: Vec<u64>,
    /// The busiest replica's share of the requests (0 in a version 1
    /// document, and with no requests).
    #[serde(default)]
    pub busiest_share: f64,
    /// Requests sent to a replica for a prefix the router believed cached
    /// there but the engine had evicted.
    pub index_drift_misses: u64,
    pub windows: Vec<Window>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// `p95-ttft` (lower is better) or `hit-rate` (higher is better).
    pub objective: String,
    /// Requests in the first part (searched) and in the later part (held out).
    pub train_requests: u64,
    pub holdout_requests: u64,
    pub grid: Grid,
    /// The cache-aware point with the best objective on the first part.
    pub cache_aware: Chosen,
    /// The scorer weights with the best objective on the first part.
    pub scorer: Chosen,
    /// The replayed policies and both presets on both parts.
    pub baselines: Vec<Scored>,
    /// The router the flags are for: the release `--for` named
    /// (`smg@1.13`, `sglang@0.3`, `sglang@0.1`), or `sglang` for routeval's
    /// own rule, whose thresholds SGLang's router takes.
    #[serde(default = "sglang")]
    pub router: String,
    /// The chosen cache-aware point as the router's launcher flags.
    #[serde(alias = "sglang_flags")]
    pub router_flags: String,
    /// The chosen scorer as an endpoint-picker configuration (YAML).
    pub endpoint_picker: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    pub cache_threshold: Vec<f64>,
    pub abs_gap: Vec<f64>,
    pub rel_gap: Vec<f64>,
    pub prefix_weight: Vec<f64>,
    pub queue_weight: Vec<f64>,
    pub kv_weight: Vec<f64>,
    /// Points simulated: both searches, each on both parts.
    pub points: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chosen {
    pub policy: Scored,
    /// Whether the chosen point also beats its family's preset (SGLang's
    /// defaults, or the scorer's default weights) and every fixed policy
    /// on the held-out part.
    pub wins_on_holdout: bool,
    /// The best point of the grid on the held-out part, for comparison.
    pub best_on_holdout: Scored,
}

/// A policy's objective and headline figures on each part of the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scored {
    pub name: String,
    pub params: BTreeMap<String, Value>,
    pub train: Headline,
    pub holdout: Headline,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Headline {
    pub objective: f64,
    pub hit_rate: f64,
    pub ttft_p95_ms: f64,
    pub herding_s: f64,
}

/// TTFT quantiles of one policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtftQuantiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// Queueing quantiles of one policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueQuantiles {
    pub p50: f64,
    pub p95: f64,
}

/// One window of the replay, by arrival time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    pub start_s: f64,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub hit_rate: f64,
    pub mean_ttft_ms: f64,
}

/// What a calibration written before version 3 was for.
fn sglang() -> String {
    "sglang".to_owned()
}
