//! What a run is asked to do: its settings, the shard of the prompts it
//! takes, and which answers a verifier checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::client::RunConfig;
use crate::events::Reporter;
use crate::schema::CallTier;

/// `--shard K/N`: the prompts whose id hashes to K − 1 modulo N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub fn parse(text: &str) -> Result<Shard, String> {
        let parsed = text.split_once('/').and_then(|(index, count)| {
            Some((index.trim().parse().ok()?, count.trim().parse().ok()?))
        });
        match parsed {
            None => Err(format!("--shard must be K/N, got {text:?}")),
            Some((index, count)) if index == 0 || index > count => {
                Err(format!("--shard K/N needs 1 <= K <= N, got {text:?}"))
            }
            Some((index, count)) => Ok(Shard { index, count }),
        }
    }

    pub fn takes(&self, id: &str) -> bool {
        let digest = Sha256::digest(id.as_bytes());
        let value = u64::from_le_bytes(digest[..8].try_into().expect("eight bytes"));
        value % u64::from(self.count) == u64::from(self.index - 1)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[derive(Debug, Clone)]
pub struct RunSettings {
    pub dataset: PathBuf,
    pub rubrics: PathBuf,
    pub out: PathBuf,
    pub shard: Option<Shard>,
    /// None: `--no-cache`.
    pub cache_dir: Option<PathBuf>,
    pub retry_errors: bool,
    /// Who hears of every finished call.
    pub reporter: Arc<dyn Reporter>,
    /// How often buffered rows reach disk.
    pub flush_every: Duration,
}

/// Each answering tier whose answers a verifier checks (every tier but the
/// last, when the config has verifiers), with the verifier's tier.
pub(super) fn verified_pairs(config: &RunConfig) -> Vec<(CallTier, CallTier)> {
    let stages = &config.tiers[..config.tiers.len() - 1];
    stages
        .iter()
        .enumerate()
        .filter(|(_, tier)| config.verifier_for(tier.tier.name()).is_some())
        .map(|(stage, tier)| (tier.tier, CallTier::verifier_of(stage, tier.tier)))
        .collect()
}
