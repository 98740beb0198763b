//! What a run did, tier by tier, as the run prints it when it ends.

use std::collections::BTreeMap;
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
    /// This session's calls, tier by tier.
    pub tiers: Vec<TierSummary>,
    pub rows: u64,
    pub elapsed: Duration,
    /// The run's counts over every session (a resumed run's included).
    pub manifest: Manifest,
    pub error_kinds: ErrorKinds,
}

/// Per tier, its failed calls by `error_kind`, over every session.
pub type ErrorKinds = BTreeMap<String, BTreeMap<String, u64>>;

/// `total_timeout 660, server_error 8`: the kinds, most first.
fn kinds_said(kinds: Option<&BTreeMap<String, u64>>) -> String {
    let mut kinds: Vec<(&String, &u64)> = kinds.into_iter().flatten().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    kinds
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl RunSummary {
    /// Calls that ended in an error, over every tier and the verifiers.
    pub fn failed_calls(&self) -> u64 {
        self.manifest.tiers.values().map(|tier| tier.errors).sum()
    }

    /// Why the failed calls failed, over every tier: `total_timeout 660,
    /// server_error 8`.
    pub fn failure_kinds(&self) -> String {
        let mut all: BTreeMap<String, u64> = BTreeMap::new();
        for kinds in self.error_kinds.values() {
            for (kind, count) in kinds {
                *all.entry(kind.clone()).or_default() += count;
            }
        }
        kinds_said(Some(&all))
    }

    /// The table of the tiers' calls and where the rows are: the run's
    /// rows, failures and their kinds over every session (a resumed run's
    /// too), beside what this session sent.
    pub fn render(&self, responses: &Path) -> String {
        let rows = self.tiers.iter().map(|tier| {
            let name = tier.tier.name();
            let run = self.manifest.tiers.get(name);
            vec![
                name.to_owned(),
                tier.model.clone(),
                run.map_or(0, |counts| counts.rows).to_string(),
                run.map_or(0, |counts| counts.errors).to_string(),
                kinds_said(self.error_kinds.get(name)),
                tier.calls.to_string(),
                tier.cached.to_string(),
                tier.retries.to_string(),
                format!("{:.4}", run.map_or(tier.cost_usd, |counts| counts.cost_usd)),
            ]
        });
        let table = crate::terminal::table(
            [
                "tier", "model", "rows", "errors", "why", "sent now", "cached", "retries", "cost $",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A resumed run: this session sent 4 small calls (1 failed); over both
    /// sessions the run has 10 rows, 7 of them failed.
    fn resumed() -> RunSummary {
        let manifest: Manifest = serde_json::from_value(serde_json::json!({
            "schema_version": 2,
            "routeval_version": "0",
            "dataset": {"path": "d.jsonl", "sha256": "0"},
            "config": {"path": "c.toml", "sha256": "0"},
            "shard": null,
            "started_at": "2026-12-07T00:00:00Z",
            "finished_at": null,
            "complete": true,
            "prompts": 10,
            "samples": 1,
            "tiers": {"small": {"model": "m", "rows": 10, "answered": 3, "errors": 7, "cached": 0, "cost_usd": 0.5}},
            "tier_order": ["small"],
        }))
        .unwrap();
        RunSummary {
            tiers: vec![TierSummary {
                tier: CallTier::SMALL,
                model: "m".to_owned(),
                calls: 4,
                errors: 1,
                cached: 0,
                retries: 2,
                cost_usd: 0.1,
            }],
            rows: 10,
            elapsed: Duration::from_secs(1),
            manifest,
            error_kinds: BTreeMap::from([(
                "small".to_owned(),
                BTreeMap::from([
                    ("server_error".to_owned(), 2),
                    ("total_timeout".to_owned(), 5),
                ]),
            )]),
        }
    }

    #[test]
    fn after_a_resume_the_table_counts_every_session_and_says_why() {
        let summary = resumed();
        let table = summary.render(Path::new("r.parquet"));
        let row = table.lines().find(|line| line.contains(" small ")).unwrap();
        let cells: Vec<&str> = row
            .split('│')
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .collect();
        assert_eq!(
            cells,
            [
                "small",
                "m",
                "10",
                "7",
                "total_timeout 5, server_error 2",
                "4",
                "0",
                "2",
                "0.5000"
            ],
            "{table}"
        );
        assert_eq!(summary.failed_calls(), 7);
        assert_eq!(summary.failure_kinds(), "total_timeout 5, server_error 2");
    }
}
