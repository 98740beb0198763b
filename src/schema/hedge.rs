//! `replay hedge --json`/`--out`: hedged requests replayed over request
//! records, one row per delay and prompt-length bucket, which
//! `report --records` renders. Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

/// One delay on one bucket (or on every request, bucket `all`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeRow {
    /// The quantile of the route's first-token times the delay is.
    pub delay_quantile: f64,
    pub delay_ms: f64,
    pub bucket: String,
    pub requests: u64,
    /// Requests whose first token had not come by the delay.
    pub hedged: u64,
    pub p50_ttft_ms: [f64; 2],
    pub p95_ttft_ms: [f64; 2],
    pub p99_ttft_ms: [f64; 2],
    /// Input tokens the copies paid, and their share of the bucket's.
    pub extra_input_tokens: u64,
    pub extra_input_share: f64,
    /// Output tokens the losing copies would also pay without cancellation.
    pub extra_output_tokens_uncancelled: u64,
    /// Milliseconds of p95 first token saved per thousand extra input
    /// tokens: the trade in one number (higher pays better).
    pub p95_ms_saved_per_k_extra_input: Option<f64>,
}

pub const HEDGE_SCHEMA_VERSION: u32 = 1;

/// What `replay hedge --out` writes.
pub const HEDGE_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a hedging replay document",
    crate::atomic::Replaces::Document {
        keys: &["schema_version", "records", "rows"],
        kind: Some("hedge"),
    },
);

/// `replay hedge --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeDocument {
    #[serde(deserialize_with = "crate::version::known::<_, 1, 1>")]
    pub schema_version: u32,
    pub kind: String,
    pub records: crate::schema::InputFile,
    /// The route replayed; `None` for every route's records together.
    pub route: Option<String>,
    pub seed: u64,
    pub rows: Vec<HedgeRow>,
}

/// The trade on the terminal: per delay and bucket, the percentiles before
/// and after and the extra input tokens.
impl HedgeDocument {
    /// The rows as a table's header and rows, for the terminal and the
    /// report alike.
    pub fn table(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let pair = |values: [f64; 2]| format!("{:.0} → {:.0}", values[0], values[1]);
        let header = vec![
            "delay",
            "prompt",
            "requests",
            "hedged",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "extra input",
            "p95 ms saved / 1k extra tok",
        ];
        let rows = self
            .rows
            .iter()
            .map(|row| {
                vec![
                    format!(
                        "p{:.0} = {:.0} ms",
                        row.delay_quantile * 100.0,
                        row.delay_ms
                    ),
                    row.bucket.clone(),
                    row.requests.to_string(),
                    row.hedged.to_string(),
                    pair(row.p50_ttft_ms),
                    pair(row.p95_ttft_ms),
                    pair(row.p99_ttft_ms),
                    format!("{:.1}%", row.extra_input_share * 100.0),
                    row.p95_ms_saved_per_k_extra_input
                        .map_or_else(|| "-".to_owned(), |saved| format!("{saved:.1}")),
                ]
            })
            .collect();
        (header, rows)
    }
}
