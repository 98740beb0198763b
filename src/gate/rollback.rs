//! `routeval gate --rollback-to`: the way back an operator can take in
//! seconds. An earlier signed config's table, serving block and
//! measurements are signed again as the version after the deployed one,
//! its parent the deployed config, so `serve` takes it as a forward step;
//! nothing is evaluated again, and the config and the report say it is a
//! rollback and to what. A rollback by a reload of the old file stays
//! refused: that is what protects serve from a replayed old config.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::atomic::{Named, check_outputs};
use crate::clock::{Clock, format_rfc3339};
use crate::routes::{ConfigRef, RouteConfig, load_secret};
use crate::schema::{
    BaselineRef, CandidateReport, GATE_REPORT_SCHEMA_VERSION, GateReport, InputFile, Rollback,
};

use super::engine::{commit_report, mint_id, stage_signed};
use super::inputs::verified_signed;
use super::litellm::ServeEndpoint;
use super::outputs::{OutPaths, lock_out};

/// What `gate --rollback-to` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackOptions {
    /// The earlier config whose table is signed again.
    pub to: PathBuf,
    /// The deployed config: the new one's parent.
    pub deployed: PathBuf,
    /// The public key both verify with; the `.pub` beside `key` without it.
    pub pubkey: Option<String>,
    pub key: PathBuf,
    pub out: PathBuf,
    pub ttl_days: u64,
    pub serve: Option<ServeEndpoint>,
}

/// Signs `options.to`'s table again as the deployed config's next version.
pub fn rollback(options: &RollbackOptions, clock: &dyn Clock) -> anyhow::Result<GateReport> {
    let secret = load_secret(&options.key)?;
    let pubkey = options.pubkey.as_deref();
    let (deployed_sha256, deployed) =
        verified_signed(&options.deployed, "--baseline", pubkey, Some(&options.key))?;
    let (to_sha256, to) =
        verified_signed(&options.to, "--rollback-to", pubkey, Some(&options.key))?;
    let (to_name, deployed_name) = (options.to.display(), options.deployed.display());
    if to.table.logical_model != deployed.table.logical_model {
        anyhow::bail!(
            "{to_name}: serves {:?}, and the deployed {deployed_name} serves {:?} (--rollback-to)",
            to.table.logical_model,
            deployed.table.logical_model
        );
    }
    if to.version >= deployed.version {
        anyhow::bail!(
            "{to_name}: version {} is not older than the deployed version {} (--rollback-to goes back; gate a new table to go forward)",
            to.version,
            deployed.version
        );
    }
    if to.serving.is_none() {
        anyhow::bail!(
            "{to_name}: a {} config has no `serving` block, and serve cannot serve it (--rollback-to)",
            to.schema
        );
    }
    let version = deployed.version + 1;
    let paths = OutPaths::new(&options.out, version);
    paths.refuse_existing(true)?;
    let inputs = [
        Named::new(&options.to, "--rollback-to"),
        Named::new(&options.deployed, "--baseline"),
        Named::new(&options.key, "--key"),
    ];
    check_outputs(&paths.outputs(true), &inputs)?;
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("{}: cannot create (--out)", options.out.display()))?;
    let _lock = lock_out(&options.out)?;
    paths.refuse_existing(true)?;
    let now = clock.now();
    let mut provenance = to.provenance.clone();
    provenance.routeval_version = env!("CARGO_PKG_VERSION").to_owned();
    provenance.rollback_of = Some(ConfigRef {
        version: to.version,
        sha256: to_sha256.clone(),
    });
    let mut config = RouteConfig {
        schema: RouteConfig::schema_for(to.serving.as_ref()).to_owned(),
        config_id: String::new(),
        version,
        parent_sha256: Some(deployed_sha256.clone()),
        created_at: format_rfc3339(now),
        expires_at: format_rfc3339(now + options.ttl_days as i64 * 86_400),
        table: to.table.clone(),
        serving: to.serving.clone(),
        provenance,
    };
    mint_id(&mut config);
    let mut candidate = measured(&options.to, &to_sha256, &to)?;
    let (emitted, signed) = stage_signed(
        &paths,
        &secret,
        &config,
        options.serve.as_ref(),
        &mut candidate.warnings,
    )?;
    let report = GateReport {
        schema_version: GATE_REPORT_SCHEMA_VERSION,
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        results: InputFile {
            path: format!("(the results version {} was gated on)", to.version),
            sha256: to.provenance.results_sha256.clone(),
            rows: candidate.overall.n,
        },
        target: to.provenance.target,
        confidence: to.provenance.confidence,
        max_regression: 0.0,
        max_cost_increase: None,
        signed: true,
        familywise: false,
        baseline: Some(unevaluated(
            deployed_name.to_string(),
            deployed.version,
            deployed_sha256,
        )),
        chosen: Some(candidate.file.clone()),
        candidates: vec![candidate],
        emitted: Some(emitted),
        rollback: Some(Rollback {
            to: unevaluated(to_name.to_string(), to.version, to_sha256),
        }),
    };
    commit_report(&paths, &report, Some(signed))?;
    Ok(report)
}

/// A config a rollback names, which it does not evaluate.
fn unevaluated(path: String, version: u64, sha256: String) -> BaselineRef {
    BaselineRef {
        path,
        version,
        sha256,
        quality: None,
        mean_cost: None,
    }
}

/// The earlier config as the report's one candidate: passed when it was
/// gated, with the measurements it was signed with.
fn measured(path: &Path, sha256: &str, config: &RouteConfig) -> anyhow::Result<CandidateReport> {
    let mut metrics = config.provenance.metrics.iter().cloned();
    let Some(overall) = metrics.next() else {
        anyhow::bail!(
            "{}: provenance.metrics is empty; a config the gate signed carries its measurements (--rollback-to)",
            path.display()
        );
    };
    Ok(CandidateReport {
        file: path.display().to_string(),
        sha256: sha256.to_owned(),
        logical_model: config.table.logical_model.clone(),
        policy: config.table.policy.kind().to_owned(),
        passed: true,
        failures: Vec::new(),
        warnings: vec![format!(
            "a rollback to version {}: not evaluated again; its measurements are those it was signed with on {}",
            config.version, config.created_at
        )],
        overall,
        slices: metrics.collect(),
        regressions: Vec::new(),
        cost_change: None,
        scores: None,
        exploration: config.provenance.exploration.clone(),
        production: None,
    })
}

/// Where a gate that signed version N over a deployed version puts the way
/// back: `OUT/rollback/`, holding version N + 1 with the deployed config's
/// table, signed now, so that going back needs no key.
pub const PRESIGNED_ROLLBACK_DIR: &str = "rollback";

/// After a gate signed `report.emitted` over the deployed config
/// (`--baseline`): the deployed config's table signed again as the next
/// version after the new one, into `OUT/rollback/`, as `--rollback-to`
/// would sign it. The on-call engineer deploys it to go back, with no key.
/// `None` where the gate signed nothing or had no deployed config; an error
/// says why no way back could be signed (the new config stands).
pub fn presign_rollback(
    gate: &super::GateOptions,
    report: &GateReport,
    clock: &dyn Clock,
) -> anyhow::Result<Option<PathBuf>> {
    let (Some(emitted), Some(deployed), Some(key)) = (&report.emitted, &gate.baseline, &gate.key)
    else {
        return Ok(None);
    };
    let out = gate.out.join(PRESIGNED_ROLLBACK_DIR);
    let back = rollback(
        &RollbackOptions {
            to: deployed.clone(),
            deployed: PathBuf::from(&emitted.config),
            pubkey: gate.baseline_pubkey.clone(),
            key: key.clone(),
            out,
            ttl_days: gate.ttl_days,
            serve: gate.serve.clone(),
        },
        clock,
    )?;
    Ok(back.emitted.map(|emitted| PathBuf::from(emitted.config)))
}
