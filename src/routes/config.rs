//! The route config the gate emits: canonical JSON (RFC 8785), so that the
//! sha256 of the file is its identity, signed with minisign (prehashed
//! Ed25519) with a trusted comment that binds the id, version, hash and
//! parent into the signature.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::routes::{ResolvedTable, Serving};

use crate::schema::{ExplorationPrice, Metrics};

pub const ROUTE_CONFIG_SCHEMA: &str = "routeval.route-config/2";

/// The schema of a config whose policy spans more than two tiers
/// (`predictive_tiers`, `cascade_stages`, and `served` in its metrics): a
/// reader of /2 cannot read it, so it says /3. Two-tier configs stay /2.
pub const TIERED_ROUTE_CONFIG_SCHEMA: &str = "routeval.route-config/3";

/// The schema of a config with a `serving` block: everything `routeval
/// serve` needs to reproduce the gated decisions. Every config the gate
/// signs now says /4; /1 to /3 still verify, and serve names what they lack.
pub const SERVING_ROUTE_CONFIG_SCHEMA: &str = "routeval.route-config/4";

/// The schema of a config that explores (`serving.explore`): a runtime of
/// /4 would serve its policy without the exploration the gate priced and
/// write records without propensities, so it says /5. Configs that do not
/// explore stay /4.
pub const EXPLORING_ROUTE_CONFIG_SCHEMA: &str = "routeval.route-config/5";

/// Every route-config schema this build reads: /1 configs carry no per-policy
/// score column and read as `score`.
const KNOWN_ROUTE_CONFIG_SCHEMAS: [&str; 5] = [
    "routeval.route-config/1",
    ROUTE_CONFIG_SCHEMA,
    TIERED_ROUTE_CONFIG_SCHEMA,
    SERVING_ROUTE_CONFIG_SCHEMA,
    EXPLORING_ROUTE_CONFIG_SCHEMA,
];

fn known_schema<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let schema = String::deserialize(deserializer)?;
    if KNOWN_ROUTE_CONFIG_SCHEMAS.contains(&schema.as_str()) {
        Ok(schema)
    } else {
        Err(serde::de::Error::custom(crate::version::unknown(
            &format!("{schema:?}"),
            &KNOWN_ROUTE_CONFIG_SCHEMAS.join(", "),
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    #[serde(deserialize_with = "known_schema")]
    pub schema: String,
    pub config_id: String,
    /// One more than the config it replaces; 1 for the first.
    pub version: u64,
    /// sha256 of the file of the config it replaces.
    pub parent_sha256: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub table: ResolvedTable,
    /// How a runtime serves the table (/4 on); `None` in older configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<Serving>,
    pub provenance: Provenance,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub routeval_version: String,
    pub results_sha256: String,
    /// sha256 of the labelled dataset behind the results, when known.
    pub dataset_sha256: Option<String>,
    pub candidate_file: String,
    pub candidate_sha256: String,
    pub git_commit: Option<String>,
    /// The quality target and confidence the gate held the table to.
    pub target: f64,
    pub confidence: Option<f64>,
    /// The gate's measurements of this table: all rows, then each slice.
    pub metrics: Vec<Metrics>,
    /// A rollback (`gate --rollback-to`): the earlier config whose table,
    /// serving block and measurements this one signs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<ConfigRef>,
    /// What the signed exploration costs at the gate's measurements: all
    /// rows, then each slice (route-config/5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exploration: Vec<ExplorationPrice>,
}

/// A signed config by its version and its file's sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigRef {
    pub version: u64,
    pub sha256: String,
}

impl RouteConfig {
    /// The schema a config the gate signs with `serving` says: /5 when it
    /// explores, else /4.
    pub fn schema_for(serving: Option<&Serving>) -> &'static str {
        if serving.is_some_and(|serving| serving.explore.is_some()) {
            EXPLORING_ROUTE_CONFIG_SCHEMA
        } else {
            SERVING_ROUTE_CONFIG_SCHEMA
        }
    }

    /// The file's bytes: RFC 8785 canonical JSON.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json_canonicalizer::to_vec(self).expect("a route config always serialises")
    }

    /// The trusted comment its signature carries.
    pub fn trusted_comment(&self, sha256: &str) -> String {
        format!(
            "routeval config_id:{} version:{} sha256:{sha256} parent:{}",
            self.config_id,
            self.version,
            self.parent_sha256.as_deref().unwrap_or("none")
        )
    }

    pub fn file_name(version: u64) -> String {
        format!("route-config.v{version}.json")
    }
}

/// The signature file beside `config`.
pub fn signature_path(config: &Path) -> std::path::PathBuf {
    let mut name = config.as_os_str().to_owned();
    name.push(".minisig");
    name.into()
}
