//! The policy that decides which route answers a request.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::calibrate::Threshold;

/// A policy as written in a candidate table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicySpec {
    /// Every request goes to one route.
    Single { route: String },
    /// A route per slice, `default` for the rest.
    Static {
        default: String,
        #[serde(default)]
        slices: BTreeMap<String, String>,
    },
    /// A router score at or above the slice's threshold sends the request to
    /// `large`, otherwise to `small`.
    Predictive {
        small: String,
        large: String,
        /// The graded-results column holding the router's score; the gate's
        /// `--score-col` when absent.
        #[serde(default)]
        score: Option<String>,
        /// Per-slice thresholds; the key `"*"` covers other slices.
        #[serde(default)]
        thresholds: Option<BTreeMap<String, f64>>,
        /// Take the thresholds from the `--calibration` of this policy and
        /// score column instead.
        #[serde(default)]
        thresholds_from_calibration: bool,
    },
    /// `small` answers, `verifier` scores the answer, and a score at or above
    /// the slice's threshold escalates to `large`.
    Cascade {
        small: String,
        verifier: String,
        large: String,
        /// The graded-results column holding the verifier's reject score.
        #[serde(default)]
        score: Option<String>,
        #[serde(default)]
        thresholds: Option<BTreeMap<String, f64>>,
        #[serde(default)]
        thresholds_from_calibration: bool,
    },
}

/// Per-slice thresholds, concrete.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// For slices not listed; `None` leaves them without a threshold.
    pub default: Option<Threshold>,
    pub slices: BTreeMap<String, Threshold>,
}

impl Thresholds {
    pub fn for_slice(&self, slice: &str) -> Option<Threshold> {
        self.slices.get(slice).copied().or(self.default)
    }
}

/// A policy with its thresholds resolved: what the gate evaluates and what a
/// route config carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ResolvedPolicy {
    Single {
        route: String,
    },
    Static {
        default: String,
        slices: BTreeMap<String, String>,
    },
    Predictive {
        small: String,
        large: String,
        /// The score the thresholds apply to (a graded-results column).
        #[serde(default = "default_score")]
        score: String,
        thresholds: Thresholds,
    },
    Cascade {
        small: String,
        verifier: String,
        large: String,
        #[serde(default = "default_score")]
        score: String,
        thresholds: Thresholds,
    },
}

fn default_score() -> String {
    crate::schema::Column::Score.name().to_owned()
}

impl ResolvedPolicy {
    pub fn kind(&self) -> &'static str {
        match self {
            ResolvedPolicy::Single { .. } => "single",
            ResolvedPolicy::Static { .. } => "static",
            ResolvedPolicy::Predictive { .. } => "predictive",
            ResolvedPolicy::Cascade { .. } => "cascade",
        }
    }

    /// The routes that may answer requests of `slice`.
    pub fn routes_for(&self, slice: &str) -> Vec<&str> {
        match self {
            ResolvedPolicy::Single { route } => vec![route],
            ResolvedPolicy::Static { default, slices } => {
                vec![slices.get(slice).unwrap_or(default)]
            }
            ResolvedPolicy::Predictive { small, large, .. } => vec![small, large],
            ResolvedPolicy::Cascade {
                small,
                verifier,
                large,
                ..
            } => vec![small, verifier, large],
        }
    }

    /// Every route the policy names.
    pub fn routes(&self) -> Vec<&str> {
        match self {
            ResolvedPolicy::Static { default, slices } => {
                let mut routes: Vec<&str> = vec![default];
                routes.extend(slices.values().map(String::as_str));
                routes.sort_unstable();
                routes.dedup();
                routes
            }
            other => other.routes_for(""),
        }
    }

    /// The graded-results column whose score the thresholds apply to.
    pub fn score(&self) -> Option<&str> {
        match self {
            ResolvedPolicy::Predictive { score, .. } | ResolvedPolicy::Cascade { score, .. } => {
                Some(score)
            }
            _ => None,
        }
    }

    pub fn thresholds(&self) -> Option<&Thresholds> {
        match self {
            ResolvedPolicy::Predictive { thresholds, .. }
            | ResolvedPolicy::Cascade { thresholds, .. } => Some(thresholds),
            _ => None,
        }
    }
}
