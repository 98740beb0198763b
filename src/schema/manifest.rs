//! `manifest.json`: what produced a run's responses, so that a table can be
//! traced to its dataset and config and a resume can refuse to mix runs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub const MANIFEST_SCHEMA_VERSION: u32 = 2;
pub use crate::atomic::run_directory::MANIFEST as MANIFEST_FILE;

/// What `merge` writes as a run's manifest.
pub const MANIFEST_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a run manifest",
    crate::atomic::Replaces::Document {
        keys: crate::atomic::run_directory::MANIFEST_KEYS,
        kind: None,
    },
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(deserialize_with = "crate::version::known::<_, 1, MANIFEST_SCHEMA_VERSION>")]
    pub schema_version: u32,
    pub routeval_version: String,
    pub dataset: FileDigest,
    pub config: FileDigest,
    /// `K/N` when the run took one shard of the prompts.
    pub shard: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Whether every call of the run has a row.
    pub complete: bool,
    /// Prompts of the dataset in this run (its shard).
    pub prompts: u64,
    pub samples: u32,
    pub tiers: BTreeMap<String, TierCounts>,
    /// The answering tiers, cheapest first (version 2; a version-1 run had
    /// `small` and `large`).
    #[serde(default = "two_tiers")]
    pub tier_order: Vec<String>,
}

fn two_tiers() -> Vec<String> {
    vec!["small".to_owned(), "large".to_owned()]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    pub path: String,
    pub sha256: String,
}

/// Counts of the rows of one tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierCounts {
    pub model: String,
    pub rows: u64,
    pub answered: u64,
    pub errors: u64,
    pub cached: u64,
    pub cost_usd: f64,
}

impl Manifest {
    pub fn load(path: &Path) -> anyhow::Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| anyhow::anyhow!("{}: cannot read: {error}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|error| anyhow::anyhow!("{}: not a run manifest: {error}", path.display()))
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut text = serde_json::to_string_pretty(self).expect("serialisable");
        text.push('\n');
        crate::atomic::write_bytes_atomically(path, text.as_bytes())
    }
}
