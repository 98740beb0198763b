//! The policy that decides which route answers a request.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::schema::Threshold;

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
    /// `large`, otherwise to `small`; or, with `tiers` (route names,
    /// cheapest first) instead of `small` and `large`, k − 1 ascending
    /// thresholds per slice split the score into the k tiers.
    Predictive {
        #[serde(default)]
        small: Option<String>,
        #[serde(default)]
        large: Option<String>,
        #[serde(default)]
        tiers: Option<Vec<String>>,
        /// The graded-results column holding the router's score; the gate's
        /// `--score-col` when absent.
        #[serde(default)]
        score: Option<String>,
        /// Per-slice thresholds (a number, or with `tiers` a list of
        /// k − 1); the key `"*"` covers other slices.
        #[serde(default)]
        thresholds: Option<BTreeMap<String, WrittenThreshold>>,
        /// Take the thresholds from the `--calibration` of this policy and
        /// score column instead.
        #[serde(default)]
        thresholds_from_calibration: bool,
    },
    /// `small` answers, `verifier` scores the answer, and a score at or above
    /// the slice's threshold escalates to `large`; or, with `stages` (route
    /// names, cheapest first), each non-final stage's answer is escalated
    /// when its verifier score (`score_NAME` of the stage's tier) reaches
    /// that stage's threshold.
    Cascade {
        #[serde(default)]
        small: Option<String>,
        verifier: String,
        #[serde(default)]
        large: Option<String>,
        #[serde(default)]
        stages: Option<Vec<String>>,
        /// The graded-results column holding the verifier's reject score.
        #[serde(default)]
        score: Option<String>,
        #[serde(default)]
        thresholds: Option<BTreeMap<String, WrittenThreshold>>,
        #[serde(default)]
        thresholds_from_calibration: bool,
    },
}

/// A slice's threshold as a table writes it: one number for two tiers, a
/// list for `tiers` and `stages`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum WrittenThreshold {
    One(f64),
    Many(Vec<f64>),
}

impl<'de> Deserialize<'de> for WrittenThreshold {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = WrittenThreshold;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a threshold, or a list of thresholds")
            }

            fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Self::Value, E> {
                Ok(WrittenThreshold::One(value))
            }

            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(WrittenThreshold::One(value as f64))
            }

            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Self::Value, E> {
                Ok(WrittenThreshold::One(value as f64))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut sequence: A,
            ) -> Result<Self::Value, A::Error> {
                let mut values = Vec::new();
                while let Some(value) = sequence.next_element::<f64>()? {
                    values.push(value);
                }
                Ok(WrittenThreshold::Many(values))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Per-slice lists of thresholds: k − 1 ascending ones for a `tiers`
/// policy, one per non-final stage for a `stages` cascade.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierThresholds {
    pub default: Option<Vec<Threshold>>,
    pub slices: BTreeMap<String, Vec<Threshold>>,
}

impl TierThresholds {
    pub fn for_slice(&self, slice: &str) -> Option<&[Threshold]> {
        self.slices
            .get(slice)
            .or(self.default.as_ref())
            .map(Vec::as_slice)
    }
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
    /// k tiers on one router score.
    PredictiveTiers {
        /// Route names, cheapest first.
        tiers: Vec<String>,
        score: String,
        thresholds: TierThresholds,
    },
    /// k stages, each non-final one's answer verified.
    CascadeStages {
        /// Route names, cheapest first.
        stages: Vec<String>,
        verifier: String,
        thresholds: TierThresholds,
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
            ResolvedPolicy::Predictive { .. } | ResolvedPolicy::PredictiveTiers { .. } => {
                "predictive"
            }
            ResolvedPolicy::Cascade { .. } | ResolvedPolicy::CascadeStages { .. } => "cascade",
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
            ResolvedPolicy::PredictiveTiers { tiers, .. } => {
                tiers.iter().map(String::as_str).collect()
            }
            ResolvedPolicy::CascadeStages {
                stages, verifier, ..
            } => {
                let mut routes: Vec<&str> = stages.iter().map(String::as_str).collect();
                routes.insert(1, verifier);
                routes
            }
        }
    }

    /// The answering routes of a k-tier policy, cheapest first.
    pub fn tier_routes(&self) -> Option<&[String]> {
        match self {
            ResolvedPolicy::PredictiveTiers { tiers, .. } => Some(tiers),
            ResolvedPolicy::CascadeStages { stages, .. } => Some(stages),
            _ => None,
        }
    }

    pub fn tier_thresholds(&self) -> Option<&TierThresholds> {
        match self {
            ResolvedPolicy::PredictiveTiers { thresholds, .. }
            | ResolvedPolicy::CascadeStages { thresholds, .. } => Some(thresholds),
            _ => None,
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
            ResolvedPolicy::Predictive { score, .. }
            | ResolvedPolicy::Cascade { score, .. }
            | ResolvedPolicy::PredictiveTiers { score, .. } => Some(score),
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

    /// The threshold at which a request of `slice` leaves the first tier
    /// (escalates): the slice's threshold, or with k tiers the first of its
    /// thresholds; `None` for policies without thresholds or a slice with
    /// none.
    pub fn escalation_threshold(&self, slice: &str) -> Option<Threshold> {
        match self {
            ResolvedPolicy::Predictive { thresholds, .. }
            | ResolvedPolicy::Cascade { thresholds, .. } => thresholds.for_slice(slice),
            ResolvedPolicy::PredictiveTiers { thresholds, .. }
            | ResolvedPolicy::CascadeStages { thresholds, .. } => thresholds
                .for_slice(slice)
                .and_then(|thresholds| thresholds.first().copied()),
            ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => None,
        }
    }

    /// Whether requests are routed by a score against thresholds, so that
    /// whether they escalate is a decision drift can watch.
    pub fn decides_by_score(&self) -> bool {
        !matches!(
            self,
            ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. }
        )
    }

    /// Every slice the policy names, with a threshold or a route of its own.
    pub fn slices(&self) -> Vec<&str> {
        let names: Box<dyn Iterator<Item = &String>> = match self {
            ResolvedPolicy::Single { .. } => Box::new(std::iter::empty()),
            ResolvedPolicy::Static { slices, .. } => Box::new(slices.keys()),
            ResolvedPolicy::Predictive { thresholds, .. }
            | ResolvedPolicy::Cascade { thresholds, .. } => Box::new(thresholds.slices.keys()),
            ResolvedPolicy::PredictiveTiers { thresholds, .. }
            | ResolvedPolicy::CascadeStages { thresholds, .. } => {
                Box::new(thresholds.slices.keys())
            }
        };
        names.map(String::as_str).collect()
    }
}
