//! What a run did, tier by tier, as the run prints it when it ends.

use std::path::Path;
use std::time::Duration;

use crate::schema::CallTier;
use crate::schema::Manifest;

/// How one tier's calls went.
#[derive(Debug, Clone, PartialEq)]
pub struct TierSummary {
    pub tier: CallTier,
    pub model: String,
    pub calls: u64,
    pub errors: u64,
    pub cached: u64,
    pub retries: u64,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub tiers: Vec<TierSummary>,
    pub rows: u64,
    pub elapsed: Duration,
    pub manifest: Manifest,
}

impl RunSummary {
    /// Calls that ended in an error, over every tier and the verifiers.
    pub fn failed_calls(&self) -> u64 {
        self.manifest.tiers.values().map(|tier| tier.errors).sum()
    }

    /// The table of the tiers' calls and where the rows are.
    pub fn render(&self, responses: &Path) -> String {
        let rows = self.tiers.iter().map(|tier| {
            vec![
                tier.tier.name().to_owned(),
                tier.model.clone(),
                tier.calls.to_string(),
                tier.errors.to_string(),
                tier.cached.to_string(),
                tier.retries.to_string(),
                format!("{:.4}", tier.cost_usd),
            ]
        });
        let table = crate::terminal::table(
            [
                "tier", "model", "calls", "errors", "cached", "retries", "cost $",
            ],
            rows,
        );
        format!(
            "{table}\n{} rows in {} ({:.1} s)",
            self.rows,
            responses.display(),
            self.elapsed.as_secs_f64()
        )
    }
}
