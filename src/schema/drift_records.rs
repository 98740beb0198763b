//! `drift-records.json`: what `drift --records` and `--aggregates` found in
//! the gateway's request records, per slice and per route, and its tables.
//! Versioned; readers reject unknown keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::units::readable;

use super::drift::{ConfigRef, Verdict};
use super::{InputFile, Threshold};

pub const RECORDS_DRIFT_SCHEMA_VERSION: u32 = 5;

/// What `drift --records` and `--aggregates` write with `--out`.
pub const RECORDS_DRIFT_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a drift document of request records",
    crate::atomic::Replaces::Document {
        keys: &["schema_version", "routeval_version", "config", "records"],
        kind: Some("records"),
    },
);

/// The score distribution now against the calibration rows'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinnedShift {
    pub psi: f64,
    /// What PSI averages at these sizes when nothing changed; version 3 on.
    #[serde(default)]
    pub psi_null: f64,
    /// Pearson's χ² test of the same bins; version 3 on.
    #[serde(default = "super::drift::one")]
    pub psi_p_value: f64,
    pub ks_statistic: f64,
    pub ks_p_value: f64,
    pub calibration_rows: u64,
    pub scored_requests: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceWindow {
    /// Milliseconds since 1970 of the window's start.
    pub start_ms: i64,
    pub requests: u64,
    pub escalation_rate: Option<f64>,
    pub escalation_p_value: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordsSliceDrift {
    pub slice: String,
    pub requests: u64,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    pub threshold: Option<Threshold>,
    /// Requests whose routing decision is known (a reason, or a score).
    pub decided: u64,
    pub escalation_rate: Option<f64>,
    /// 95% Wilson interval of the escalation rate now.
    pub escalation_interval: Option<[f64; 2]>,
    pub escalation_rate_at_calibration: Option<f64>,
    pub calibration_n: Option<u64>,
    pub escalation_p_value: Option<f64>,
    pub score_shift: Option<BinnedShift>,
    pub windows: Vec<SliceWindow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteWindow {
    pub start_ms: i64,
    pub requests: u64,
    pub fallback_share: f64,
    /// The share of the window's requests the route failed (an error or a
    /// timeout, not a client that left); version 4 on, null where the
    /// input does not say (an aggregate table without `failures`).
    #[serde(default)]
    pub failure_share: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub other_version_share: Option<f64>,
    pub cost_per_request_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordsRouteDrift {
    pub route: String,
    pub requests: u64,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    /// The model version the signed config pins; `None` for a route it
    /// does not have.
    pub pinned_model: Option<String>,
    pub other_version_share: Option<f64>,
    pub fallback_share: f64,
    /// As a window's `failure_share`, over the run; version 4 on.
    #[serde(default)]
    pub failure_share: Option<f64>,
    pub fallbacks_by_reason: BTreeMap<String, u64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub cost_per_request_usd: Option<f64>,
    pub windows: Vec<RouteWindow>,
}

/// `drift --records --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordsDriftDocument {
    /// 2 adds `records_left_out`, 3 `tests` and the score shift's null and
    /// test, 4 the routes' and their windows' `failure_share`, 5
    /// `records_other_versions`; older versions read without them.
    #[serde(deserialize_with = "crate::version::known::<_, 1, 5>")]
    pub schema_version: u32,
    pub kind: String,
    pub routeval_version: String,
    pub config: ConfigRef,
    /// The records, or the pre-aggregated table.
    pub records: InputFile,
    pub aggregated: bool,
    /// Records (or aggregated requests) of other logical models, which the
    /// deployed config does not route, by logical model: counted, not read.
    #[serde(default)]
    pub records_left_out: BTreeMap<String, u64>,
    /// Records of the logical model that say another config version served
    /// them, by that version: counted, not judged against this config.
    /// Records that name no version (imported without `--config`, and
    /// aggregated tables) are judged.
    #[serde(default)]
    pub records_other_versions: BTreeMap<u64, u64>,
    pub baseline_results: Option<InputFile>,
    pub window_ms: i64,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    pub verdict: Verdict,
    /// How many tests the run's false-alarm control spans (each slice's
    /// escalation and score tests, and every window's escalation test).
    #[serde(default)]
    pub tests: u64,
    pub slices: Vec<RecordsSliceDrift>,
    pub routes: Vec<RecordsRouteDrift>,
}

impl RecordsDriftDocument {
    /// The slices as a table's header and rows.
    pub fn slice_table(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "slice",
            "requests",
            "escalated now",
            "at calibration",
            "p",
            "score PSI",
            "verdict",
            "why",
        ];
        let rows = self
            .slices
            .iter()
            .map(|slice| {
                vec![
                    slice.slice.clone(),
                    slice.requests.to_string(),
                    percent(slice.escalation_rate),
                    percent(slice.escalation_rate_at_calibration),
                    slice
                        .escalation_p_value
                        .map_or_else(|| "-".to_owned(), |p| format!("{p:.2e}")),
                    slice
                        .score_shift
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |shift| format!("{:.3}", shift.psi)),
                    slice.verdict.name().to_owned(),
                    slice.reasons.join("; "),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The routes as a table's header and rows.
    pub fn route_table(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "route",
            "requests",
            "fell back",
            "failed",
            "TTFT p50 ms",
            "p95",
            "other version",
            "$/request",
            "verdict",
            "why",
        ];
        let ms = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| readable(v, 0));
        let rows = self
            .routes
            .iter()
            .map(|route| {
                vec![
                    route.route.clone(),
                    route.requests.to_string(),
                    percent(Some(route.fallback_share)),
                    percent(route.failure_share),
                    ms(route.ttft_p50_ms),
                    ms(route.ttft_p95_ms),
                    percent(route.other_version_share),
                    route
                        .cost_per_request_usd
                        .map_or_else(|| "-".to_owned(), |cost| readable(cost, 5)),
                    route.verdict.name().to_owned(),
                    route.reasons.join("; "),
                ]
            })
            .collect();
        (header, rows)
    }
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0))
}
