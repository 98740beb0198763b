//! `routeval evaluate --json`: how well a file's scores separate the prompts
//! that need the large tier, against a random router and the oracle.

use serde::{Deserialize, Serialize};

use super::InputFile;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingQuality {
    pub apgr: f64,
    /// Share of calls to the large tier needed to recover half the gap.
    pub cpt50: Option<f64>,
    pub cpt80: Option<f64>,
}

pub const EVALUATION_SCHEMA_VERSION: u32 = 1;

/// `routeval evaluate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationDocument {
    pub schema_version: u32,
    pub results: InputFile,
    pub router: RoutingQuality,
    pub random: RoutingQuality,
    pub oracle: RoutingQuality,
}
