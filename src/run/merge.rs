//! `routeval merge`: the outputs of `--shard K/N` runs combined into what one
//! run of the whole dataset would have produced.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::settings::Shard;
use super::store::merge_sorted;
use crate::atomic::{Named, Output, check_outputs};
use crate::schema::RESPONSES_FILE;
use crate::schema::RESPONSES_OUTPUT;
use crate::schema::{MANIFEST_FILE, MANIFEST_OUTPUT, Manifest};

/// Merges the shard runs `inputs` into `out`; returns the merged manifest.
pub fn merge_runs(inputs: &[PathBuf], out: &Path) -> anyhow::Result<Manifest> {
    let mut manifests = Vec::with_capacity(inputs.len());
    for input in inputs {
        let manifest = Manifest::load(&input.join(MANIFEST_FILE))?;
        if !manifest.complete {
            anyhow::bail!(
                "{}: the run is not complete; finish it (run the same command again) before merging",
                input.display()
            );
        }
        manifests.push(manifest);
    }
    let Some(first) = manifests.first().cloned() else {
        anyhow::bail!("give the shard runs to merge");
    };
    check_shards(inputs, &manifests, &first)?;
    if std::fs::symlink_metadata(out.join(MANIFEST_FILE)).is_ok() {
        anyhow::bail!(
            "{}: already holds a run (manifest.json); merge into a new --out",
            out.display()
        );
    }
    let input_files: Vec<(PathBuf, PathBuf)> = inputs
        .iter()
        .map(|input| (input.join(RESPONSES_FILE), input.join(MANIFEST_FILE)))
        .collect();
    let mut named_inputs = Vec::new();
    for (responses, manifest) in &input_files {
        named_inputs.push(Named::new(responses, "--runs"));
        named_inputs.push(Named::new(manifest, "--runs"));
    }
    let (merged_responses, merged_manifest) = (out.join(RESPONSES_FILE), out.join(MANIFEST_FILE));
    check_outputs(
        &[
            Output::new(&merged_responses, "--out", &RESPONSES_OUTPUT),
            Output::new(&merged_manifest, "--out", &MANIFEST_OUTPUT),
        ],
        &named_inputs,
    )?;
    std::fs::create_dir_all(out)
        .map_err(|error| anyhow::anyhow!("{}: cannot create (--out): {error}", out.display()))?;
    let sources: Vec<PathBuf> = inputs
        .iter()
        .map(|input| input.join(RESPONSES_FILE))
        .collect();
    merge_sorted(&sources, &out.join(RESPONSES_FILE))?;
    let merged = merged_manifests(&first, &manifests);
    merged.save(&out.join(MANIFEST_FILE))?;
    Ok(merged)
}

/// Every shard run made of the same dataset, config and samples as the
/// first, each shard of one count given once, and none missing.
fn check_shards(
    inputs: &[PathBuf],
    manifests: &[Manifest],
    first: &Manifest,
) -> anyhow::Result<()> {
    let mut shards = BTreeSet::new();
    let mut count = None;
    for (input, manifest) in inputs.iter().zip(manifests) {
        for (what, same) in [
            ("dataset", manifest.dataset.sha256 == first.dataset.sha256),
            ("config", manifest.config.sha256 == first.config.sha256),
            ("number of samples", manifest.samples == first.samples),
        ] {
            if !same {
                anyhow::bail!(
                    "{}: made with another {what} than {}",
                    input.display(),
                    inputs[0].display()
                );
            }
        }
        let shard = manifest
            .shard
            .as_deref()
            .map(Shard::parse)
            .transpose()
            .map_err(|error| anyhow::anyhow!("{}: {error}", input.display()))?
            .ok_or_else(|| anyhow::anyhow!("{}: not a shard run (no --shard)", input.display()))?;
        if *count.get_or_insert(shard.count) != shard.count {
            anyhow::bail!(
                "{}: shard {shard} is not one of {} shards",
                input.display(),
                count.unwrap_or_default()
            );
        }
        if !shards.insert(shard.index) {
            anyhow::bail!("{}: shard {shard} is given twice", input.display());
        }
    }
    let count = count.unwrap_or_default();
    let missing: Vec<String> = (1..=count)
        .filter(|index| !shards.contains(index))
        .map(|index| format!("{index}/{count}"))
        .collect();
    if !missing.is_empty() {
        anyhow::bail!("shards {} are missing", missing.join(", "));
    }
    Ok(())
}

/// The shards' manifests as one run's: the first's settings, every
/// shard's prompts and calls summed, from the earliest start to the
/// latest finish.
fn merged_manifests(first: &Manifest, manifests: &[Manifest]) -> Manifest {
    let mut merged = first.clone();
    merged.shard = None;
    merged.prompts = manifests.iter().map(|manifest| manifest.prompts).sum();
    merged.started_at = manifests
        .iter()
        .map(|manifest| manifest.started_at.clone())
        .min()
        .unwrap_or_default();
    merged.finished_at = manifests
        .iter()
        .filter_map(|manifest| manifest.finished_at.clone())
        .max();
    merged.tiers.clear();
    for manifest in manifests {
        for (tier, counts) in &manifest.tiers {
            let total = merged.tiers.entry(tier.clone()).or_default();
            total.model.clone_from(&counts.model);
            total.rows += counts.rows;
            total.answered += counts.answered;
            total.errors += counts.errors;
            total.cached += counts.cached;
            total.cost_usd += counts.cost_usd;
        }
    }
    merged
}
