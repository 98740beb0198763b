//! Before the first call: the run directory made or recognised and locked,
//! the manifest of this run checked against the one it resumes, the journal
//! of an interrupted run recovered and cut parts quarantined, and what is
//! already done counted.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;

use super::journal::{Recovered, recover};
use super::settings::{RunSettings, verified_pairs};
use super::store::{Done, scan};
use crate::atomic::run_directory::LOCK as LOCK_FILE;
use crate::client::RunConfig;
use crate::schema::{FileDigest, MANIFEST_FILE, Manifest, for_each_row};

/// What is known before the first request: the checked dataset, its digest
/// and size, and what an earlier run of the same `--out` already did.
#[derive(Debug)]
pub struct Prepared {
    pub prompts: u64,
    pub manifest: Manifest,
    pub(super) done: Done,
    pub(super) rubrics: std::collections::BTreeSet<String>,
    /// Held until the run ends: one process writes a run directory at a time.
    pub(super) lock: std::fs::File,
    /// What a killed run's journals held, now folded into a part.
    pub recovered: Recovered,
}

impl Prepared {
    /// Stored files that could not be read, moved to `OUT/quarantine/`, with
    /// the reason; their calls will be sent again.
    pub fn quarantined(&self) -> &[(PathBuf, String)] {
        &self.done.quarantined
    }
}

/// Takes the run directory's exclusive lock, or says who holds it.
fn lock_run(out: &std::path::Path) -> anyhow::Result<std::fs::File> {
    crate::atomic::lock_directory(out, LOCK_FILE, "routeval run", "--out")
}

/// Refuses an existing `--out` that no run made: a run moves aside and
/// removes what it finds in its `journal/` and `parts/`, so it may resume
/// only a directory holding a run's manifest (or, from a run killed before
/// it wrote one, nothing but the run's lock).
fn refuse_foreign_directory(out: &std::path::Path) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    let names: Vec<std::ffi::OsString> = entries
        .map(|entry| entry.map(|entry| entry.file_name()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: cannot list (--out)", out.display()))?;
    let ours = names.iter().any(|name| name == MANIFEST_FILE)
        || names.iter().all(|name| name == LOCK_FILE);
    if !ours {
        anyhow::bail!(
            "{}: is not empty and holds no routeval run (no {MANIFEST_FILE}); give a new or empty directory as --out",
            out.display()
        );
    }
    Ok(())
}

/// Checks everything that can be checked without the network: the dataset
/// (every row, before any request), the output directory and what an earlier
/// run left in it.
pub fn prepare(config: &RunConfig, settings: &RunSettings, now: &str) -> anyhow::Result<Prepared> {
    let rubrics: std::collections::BTreeSet<String> =
        crate::rubric::load_rubrics(&settings.rubrics)?
            .into_keys()
            .collect();
    let mut prompts = 0u64;
    for_each_row(&settings.dataset, &rubrics, |row| {
        if settings.shard.is_none_or(|shard| shard.takes(&row.id)) {
            prompts += 1;
        }
        Ok(())
    })?;
    let dataset = FileDigest {
        path: settings.dataset.display().to_string(),
        sha256: crate::digest::sha256_file(&settings.dataset)?,
    };
    let config_digest = FileDigest {
        path: config.path.display().to_string(),
        sha256: config.sha256(),
    };
    // A run directory is new, or the real directory of an earlier run.
    if let Ok(metadata) = std::fs::symlink_metadata(&settings.out)
        && !metadata.is_dir()
    {
        anyhow::bail!(
            "{}: exists and is not a directory (--out)",
            settings.out.display()
        );
    }
    refuse_foreign_directory(&settings.out)?;
    std::fs::create_dir_all(&settings.out)
        .with_context(|| format!("{}: cannot create (--out)", settings.out.display()))?;
    let lock = lock_run(&settings.out)?;
    let manifest_path = settings.out.join(MANIFEST_FILE);
    let shard = settings.shard.map(|shard| shard.to_string());
    let mut started_at = now.to_owned();
    if manifest_path.exists() {
        let earlier = Manifest::load(&manifest_path)?;
        let mismatch = if earlier.dataset.sha256 != dataset.sha256 {
            Some("dataset")
        } else if earlier.config.sha256 != config_digest.sha256 {
            Some("config")
        } else if earlier.shard != shard {
            Some("shard")
        } else {
            None
        };
        if let Some(what) = mismatch {
            anyhow::bail!(
                "{}: this run was made with another {what}; give a new --out to start a new run",
                settings.out.display()
            );
        }
        started_at = earlier.started_at;
    }
    let recovered = recover(&settings.out)?;
    let done = scan(
        &settings.out,
        settings.retry_errors,
        &verified_pairs(config),
    )?;
    let manifest = Manifest {
        schema_version: crate::schema::MANIFEST_SCHEMA_VERSION,
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        dataset,
        config: config_digest,
        shard,
        started_at,
        finished_at: None,
        complete: false,
        prompts,
        samples: config.run.samples,
        tiers: BTreeMap::new(),
        tier_order: config.tier_names(),
    };
    Ok(Prepared {
        prompts,
        manifest,
        done,
        rubrics,
        lock,
        recovered,
    })
}
