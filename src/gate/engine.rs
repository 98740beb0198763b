//! Runs the gate: every candidate on the same graded results, the rules, the
//! choice, and the signed config with its exports.

use std::path::Path;

use anyhow::Context;

use crate::atomic::{Named, Staged, check_outputs, commit_all};
use crate::clock::{Clock, format_rfc3339};
use crate::digest::sha256_hex;
use crate::routes::{Provenance, RouteConfig};
use crate::routes::{load_secret, sign};
use crate::schema::InputFile;
use crate::schema::{
    BaselineRef, CandidateReport, Emitted, GATE_REPORT_SCHEMA_VERSION, GateReport,
};

use super::inputs::{Candidate, Inputs, ScoreColumns, candidate_tables};
use super::litellm::{ServeEndpoint, litellm_yaml};
use super::options::GateOptions;
use super::outputs::{OutPaths, lock_out, stage_bytes};
use super::render::markdown;
use super::scoring::{cheapest_passing, score_candidates};

pub fn gate(options: &GateOptions, clock: &dyn Clock) -> anyhow::Result<GateReport> {
    // Everything that can be refused is read before anything is written.
    let secret = options.key.as_deref().map(load_secret).transpose()?;
    let inputs = Inputs::read(options)?;
    let mut scores = ScoreColumns::new(options, &inputs.graded);
    let tables = candidate_tables(options, &inputs, &mut scores)?;
    let (mut candidates, baseline_measured) =
        score_candidates(options, &inputs, &tables, &mut scores)?;
    let chosen = cheapest_passing(&candidates);
    // Without a key the gate chooses and reports; a trusted job signs.
    let signing = chosen.filter(|_| secret.is_some());
    let version = inputs
        .baseline
        .as_ref()
        .map_or(1, |(_, _, config)| config.version + 1);
    let paths = OutPaths::new(&options.out, version);
    paths.refuse_existing(signing.is_some())?;
    check_outputs(&paths.outputs(signing.is_some()), &named_inputs(options))?;
    // One gate writes a directory at a time; the lock goes with the process,
    // even one killed.
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("{}: cannot create (--out)", options.out.display()))?;
    let _lock = lock_out(&options.out)?;
    paths.refuse_existing(signing.is_some())?;
    // Every output is staged, then all are committed: a failure leaves none.
    // The config is committed last, and only where no file is: a kill before
    // then leaves no config, and the next gate writes the others again.
    let mut signed = None;
    let emitted = match signing.zip(secret.as_ref()) {
        Some((index, secret)) => {
            let config = route_config(
                options,
                &inputs,
                &tables[index],
                &candidates[index],
                version,
                clock,
            );
            let (emitted, staged) = stage_signed(
                &paths,
                secret,
                &config,
                options.serve.as_ref(),
                &mut candidates[index].warnings,
            )?;
            signed = Some(staged);
            Some(emitted)
        }
        None => None,
    };
    let rows = inputs.graded.num_rows() as u64;
    let report = GateReport {
        rollback: None,
        schema_version: GATE_REPORT_SCHEMA_VERSION,
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        results: InputFile {
            path: options.results.display().to_string(),
            sha256: inputs.results_sha256,
            rows,
        },
        target: options.target.get(),
        confidence: options.confidence_level(),
        max_regression: options.max_regression.get(),
        max_cost_increase: Some(options.max_cost_increase.get()),
        signed: secret.is_some(),
        familywise: options.familywise,
        baseline: inputs.baseline.map(|(path, sha256, config)| BaselineRef {
            path: path.display().to_string(),
            version: config.version,
            sha256,
            quality: baseline_measured.map(|(quality, _)| quality),
            mean_cost: baseline_measured.map(|(_, cost)| cost),
        }),
        chosen: chosen.map(|index| candidates[index].file.clone()),
        candidates,
        emitted,
    };
    commit_report(&paths, &report, signed)?;
    Ok(report)
}

/// A signed config staged under `--out`: its signature and export, and the
/// config itself, committed last.
pub(super) struct StagedConfig {
    beside: Vec<Staged>,
    config: Staged,
}

/// Signs `config` and stages it with its signature and LiteLLM export; a
/// policy LiteLLM cannot carry out is a warning, and no export.
pub(super) fn stage_signed(
    paths: &OutPaths,
    secret: &minisign::SecretKey,
    config: &RouteConfig,
    serve: Option<&ServeEndpoint>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<(Emitted, StagedConfig)> {
    let bytes = config.canonical_bytes();
    let sha256 = sha256_hex(&bytes);
    let signature = sign(secret, &bytes, &config.trusted_comment(&sha256))?;
    let name = RouteConfig::file_name(config.version);
    let config_staged = stage_bytes(&paths.config, &bytes)?;
    let mut beside = vec![stage_bytes(&paths.signature, signature.as_bytes())?];
    let litellm = match litellm_yaml(config, &name, &sha256, serve) {
        Ok(export) => {
            beside.push(stage_bytes(&paths.litellm, export.text.as_bytes())?);
            warnings.extend(export.warnings);
            Some(paths.litellm.display().to_string())
        }
        Err(why) => {
            warnings.push(format!("no LiteLLM export written: {why}"));
            None
        }
    };
    let emitted = Emitted {
        config: paths.config.display().to_string(),
        signature: paths.signature.display().to_string(),
        litellm,
        version: config.version,
        sha256,
    };
    Ok((
        emitted,
        StagedConfig {
            beside,
            config: config_staged,
        },
    ))
}

/// Writes the report, and the signed config with what goes beside it: every
/// output is staged, then all are committed, the config last and only where
/// no file is. A failure leaves none; a kill before the config leaves no
/// config, and the next gate writes the others again.
pub(super) fn commit_report(
    paths: &OutPaths,
    report: &GateReport,
    signed: Option<StagedConfig>,
) -> anyhow::Result<()> {
    let json =
        serde_json::to_string_pretty(report).context("cannot encode the gate report")? + "\n";
    let mut staged = Vec::new();
    let config = signed.map(|signed| {
        staged.extend(signed.beside);
        signed.config
    });
    staged.push(stage_bytes(&paths.report_json, json.as_bytes())?);
    staged.push(stage_bytes(
        &paths.report_markdown,
        markdown(report).as_bytes(),
    )?);
    commit_all(staged)?;
    if let Some(config) = config {
        config.commit_new()?;
    }
    Ok(())
}

/// Every file the gate reads, by its flag.
fn named_inputs(options: &GateOptions) -> Vec<Named<'_>> {
    let mut inputs = vec![Named::new(&options.results, "--results")];
    inputs.extend(options.key.iter().map(|key| Named::new(key, "--key")));
    for (paths, flag) in [
        (&options.candidates, "--candidates"),
        (&options.calibrations, "--calibration"),
    ] {
        inputs.extend(paths.iter().map(|path| Named::new(path, flag)));
    }
    inputs.extend(
        options
            .production
            .iter()
            .map(|path| Named::new(path, "--production")),
    );
    for (path, flag) in [
        (&options.baseline, "--baseline"),
        (&options.constraints, "--constraints"),
        (&options.router, "--router"),
    ] {
        inputs.extend(path.iter().map(|path| Named::new(path, flag)));
    }
    inputs
}

/// The chosen candidate as the route config of `version`: its table, its
/// metrics, its provenance, and an id minted from its content.
fn route_config(
    options: &GateOptions,
    inputs: &Inputs,
    candidate: &Candidate,
    report: &CandidateReport,
    version: u64,
    clock: &dyn Clock,
) -> RouteConfig {
    let table = &candidate.table;
    let now = clock.now();
    let mut metrics = vec![report.overall.clone()];
    metrics.extend(report.slices.iter().cloned());
    let mut config = RouteConfig {
        schema: RouteConfig::schema_for(candidate.serving.as_ref().ok()).to_owned(),
        config_id: String::new(),
        version,
        parent_sha256: inputs
            .baseline
            .as_ref()
            .map(|(_, sha256, _)| sha256.clone()),
        created_at: format_rfc3339(now),
        expires_at: format_rfc3339(now + options.ttl_days as i64 * 86_400),
        table: table.clone(),
        serving: candidate.serving.clone().ok(),
        provenance: Provenance {
            routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
            results_sha256: inputs.results_sha256.clone(),
            dataset_sha256: options.dataset_sha256.clone(),
            candidate_file: candidate.path.display().to_string(),
            candidate_sha256: candidate.sha256.clone(),
            git_commit: git_commit(&candidate.path),
            target: options.target.get(),
            confidence: options.confidence_level(),
            metrics,
            rollback_of: None,
            exploration: report.exploration.clone(),
        },
    };
    mint_id(&mut config);
    config
}

/// The config's id, minted from its content: `<logical model>-v<N>-<hash>`.
pub(super) fn mint_id(config: &mut RouteConfig) {
    config.config_id = String::new();
    config.config_id = format!(
        "{}-v{}-{}",
        config.table.logical_model,
        config.version,
        &sha256_hex(&config.canonical_bytes())[..12]
    );
}

/// The commit of the repository holding the candidate, when there is one.
fn git_commit(candidate: &Path) -> Option<String> {
    let directory = candidate
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let output = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(directory)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && commit.len() == 40).then_some(commit)
}
