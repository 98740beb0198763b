//! What every candidate is scored against, read and checked before anything
//! is written (the results, calibrations, constraints, the deployed config,
//! the router, the production estimates), and each candidate loaded and
//! resolved against them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::digest::{sha256_file, sha256_hex};
use crate::policy::{TieredRows, scores_of, tiered_rows};
use crate::router_model::{FEATURES_VERSION, Router};
use crate::routes::ResolvedTable;
use crate::routes::{Constraint, RouteTable};
use crate::routes::{RouteConfig, Scorer, Serving, ServingInputs};
use crate::rubric::PromptTemplate;
use crate::schema::CalibrationDocument;
use crate::schema::GradedTable;
use crate::schema::{CertifiedScores, ScoresFrom};
use crate::schema::{read_document, read_graded};

use super::deployed_scores::check_deployed_scores;
use super::options::GateOptions;

/// Refuses constraints that name a slice the results do not have: a typo in
/// a residency rule would otherwise never apply.
fn check_constraint_slices<'a>(
    constraints: impl IntoIterator<Item = (&'a String, String)>,
    slices: &BTreeSet<String>,
) -> anyhow::Result<()> {
    for (slice, source) in constraints {
        if slice != "*" && !slices.contains(slice) {
            anyhow::bail!(
                "{source}: constraints name slice {slice:?}, which the results do not have; fix the name or pass --allow-unknown-slices"
            );
        }
    }
    Ok(())
}

/// The deployed config `--baseline` names, verified as `verify` would but
/// for its age (an expired deployed config is what a new gate replaces): a
/// new config chains to it and is tested against it, so an edited or
/// foreign one must not pass for it.
fn verified_baseline(
    path: &Path,
    options: &GateOptions,
) -> anyhow::Result<(PathBuf, String, RouteConfig)> {
    let (sha256, config) = verified_signed(
        path,
        "--baseline",
        options.baseline_pubkey.as_deref(),
        options.key.as_deref(),
    )?;
    Ok((path.to_owned(), sha256, config))
}

/// The signed config at `path` (given as `flag`), verified with `pubkey`
/// (the `.pub` beside `key` without it) but for its age: its sha256 and
/// the config. One whose version is the last a config can have has no
/// next.
pub(super) fn verified_signed(
    path: &Path,
    flag: &str,
    pubkey: Option<&str>,
    key: Option<&Path>,
) -> anyhow::Result<(String, RouteConfig)> {
    let key = match (pubkey, key) {
        (Some(key), _) => key.to_owned(),
        (None, None) => anyhow::bail!(
            "{}: {flag} must verify; give the public key it was signed with as --pubkey",
            path.display()
        ),
        (None, Some(key)) => {
            let beside = crate::routes::public_key_path(key);
            if !beside.exists() {
                anyhow::bail!(
                    "{}: {flag} must verify, and no public key is beside --key; give the key it was signed with as --pubkey",
                    beside.display()
                );
            }
            beside.display().to_string()
        }
    };
    let public = crate::routes::load_public(&key)?;
    let (bytes, signature) = crate::routes::read_signed(path, &format!(" ({flag})"))?;
    let verified = crate::routes::check_signed(&bytes, &signature, &public).map_err(|error| {
        anyhow::anyhow!(
            "{}: {error} ({flag} must be a config signed with {key})",
            path.display()
        )
    })?;
    if verified.config.version == u64::MAX {
        anyhow::bail!(
            "{}: version {} is the last a config can have ({flag})",
            path.display(),
            verified.config.version
        );
    }
    Ok((verified.sha256, verified.config))
}

/// Org-wide constraints: a TOML table of slice (or `"*"`) to constraint.
fn load_constraints(path: &Path) -> anyhow::Result<BTreeMap<String, Constraint>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read (--constraints)", path.display()))?;
    toml::from_str(&text).map_err(|error| {
        let first = error
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        anyhow::anyhow!("{}: {first}", path.display())
    })
}

/// What every candidate is scored against: the graded results (and their
/// digest), the calibrations, the organisation's constraints, the slices
/// the results have, and the deployed config with its path and sha256.
pub(super) struct Inputs {
    pub(super) graded: GradedTable,
    pub(super) results_sha256: String,
    pub(super) calibrations: Vec<CalibrationDocument>,
    pub(super) constraints: BTreeMap<String, Constraint>,
    pub(super) slices: BTreeSet<String>,
    pub(super) baseline: Option<(PathBuf, String, RouteConfig)>,
    /// `--router`, loaded, and its sha256.
    pub(super) router: Option<(Router, String)>,
    pub(super) production: super::production::Production,
}

impl Inputs {
    pub(super) fn read(options: &GateOptions) -> anyhow::Result<Inputs> {
        let mut read = options.read_options();
        read.details = true;
        // Single and static tables read no score: a table without one yet
        // (before `router train`) can gate them; a policy that needs the score
        // reads it strictly below, and is refused naming the column.
        read.score_optional = true;
        let graded = read_graded(&options.results, &read)?;
        let results_sha256 = sha256_file(&options.results)?;
        let mut calibrations: Vec<CalibrationDocument> = Vec::new();
        for path in &options.calibrations {
            calibrations.push(
                read_document(path, "a calibration document", Some("--calibration"))?.document,
            );
        }
        let constraints = match &options.constraints {
            Some(path) => load_constraints(path)?,
            None => BTreeMap::new(),
        };
        let slices: BTreeSet<String> = graded
            .batches
            .iter()
            .flat_map(|batch| batch.slice.iter().flatten())
            .map(str::to_owned)
            .collect();
        if !options.allow_unknown_slices
            && let Some(path) = &options.constraints
        {
            check_constraint_slices(
                constraints
                    .keys()
                    .map(|slice| (slice, format!("{} (--constraints)", path.display()))),
                &slices,
            )?;
        }
        let baseline = match &options.baseline {
            Some(path) => Some(verified_baseline(path, options)?),
            None => None,
        };
        let router = match &options.router {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("{}: cannot read (--router)", path.display()))?;
                let router = Router::from_bytes(&bytes, path).context("--router")?;
                Some((router, sha256_hex(&bytes)))
            }
            None => None,
        };
        let production = super::production::Production::read(
            &options.production,
            baseline.as_ref().map(|(_, sha256, _)| sha256.as_str()),
            options.confidence_level(),
        )?;
        Ok(Inputs {
            graded,
            results_sha256,
            calibrations,
            constraints,
            slices,
            baseline,
            router,
            production,
        })
    }
}

/// Each policy's score column, read once: the router's for a predictive
/// table, the verifier's for a cascade, all on the same rows.
pub(super) struct ScoreColumns<'a> {
    pub(super) options: &'a GateOptions,
    pub(super) unscored: Vec<f64>,
    pub(super) columns: BTreeMap<String, Vec<f64>>,
}

impl<'a> ScoreColumns<'a> {
    pub(super) fn new(options: &'a GateOptions, graded: &GradedTable) -> ScoreColumns<'a> {
        let unscored = scores_of(graded);
        let mut columns = BTreeMap::new();
        if graded
            .batches
            .iter()
            .all(|batch| arrow::array::Array::null_count(&batch.score) == 0)
        {
            columns.insert(options.names.score.clone(), unscored.clone());
        }
        ScoreColumns {
            options,
            unscored,
            columns,
        }
    }

    pub(super) fn for_table(&mut self, table: &ResolvedTable) -> anyhow::Result<Vec<f64>> {
        let Some(column) = table.policy.score() else {
            return Ok(self.unscored.clone());
        };
        if let Some(scores) = self.columns.get(column) {
            return Ok(scores.clone());
        }
        let mut read = self.options.read_options();
        read.names.score = column.to_owned();
        read.details = false;
        let scores = scores_of(&read_graded(&self.options.results, &read)?);
        self.columns.insert(column.to_owned(), scores.clone());
        Ok(scores)
    }
}

/// A candidate route table, resolved against the calibrations, with what
/// it is scored on.
pub(super) struct Candidate {
    pub(super) path: PathBuf,
    pub(super) sha256: String,
    pub(super) table: ResolvedTable,
    /// Its signed `serving` block, or what it leaves open.
    pub(super) serving: Result<Serving, String>,
    pub(super) scores: Vec<f64>,
    pub(super) tiered: Option<TieredRows>,
    /// A predictive candidate's scores, as its report states them.
    pub(super) scores_certified: Option<CertifiedScores>,
    /// The cost increase over the deployed config its table accepts
    /// (`[gate] accept_cost_increase`).
    pub(super) accept_cost_increase: Option<f64>,
}

/// Every candidate, loaded, checked against the results and the deployed
/// config, and resolved.
pub(super) fn candidate_tables(
    options: &GateOptions,
    inputs: &Inputs,
    scores: &mut ScoreColumns<'_>,
) -> anyhow::Result<Vec<Candidate>> {
    let mut tables = Vec::new();
    let mut checked_columns = BTreeSet::new();
    for path in &options.candidates {
        let table = RouteTable::load(path)?;
        if !options.allow_unknown_slices {
            check_constraint_slices(
                table
                    .constraints
                    .keys()
                    .map(|slice| (slice, path.display().to_string())),
                &inputs.slices,
            )?;
        }
        if let Some((baseline_path, _, deployed)) = &inputs.baseline
            && deployed.table.logical_model != table.logical_model
        {
            anyhow::bail!(
                "{}: routes logical model {:?}, but --baseline {} is the config of {:?}: a new version must replace a config of the same logical model",
                path.display(),
                table.logical_model,
                baseline_path.display(),
                deployed.table.logical_model
            );
        }
        let resolved = table
            .resolve(&inputs.calibrations, &options.names.score)
            .map_err(|message| anyhow::anyhow!("{}: {message}", path.display()))?;
        if !options.allow_unknown_slices
            && let Some(slice) = resolved
                .policy
                .slices()
                .into_iter()
                .find(|slice| *slice != "*" && !inputs.slices.contains(*slice))
        {
            anyhow::bail!(
                "{}: the policy gives slice {slice:?} thresholds or a route of its own, but the results do not have it (it would be signed untested, and the slice meant would get the default); fix the name or pass --allow-unknown-slices",
                path.display()
            );
        }
        let sha256 = sha256_file(path)?;
        let scores = scores
            .for_table(&resolved)
            .with_context(|| format!("candidate {}", path.display()))?;
        let tiered = tiered_rows(&options.results, &options.read_options(), &resolved)
            .with_context(|| format!("candidate {}", path.display()))?;
        let serving = pin_serving(options, inputs, &table, &resolved)?;
        if !options.allow_unknown_slices
            && let Ok(serving) = &serving
        {
            super::exploration::check_slices(serving, &inputs.slices)
                .map_err(|message| anyhow::anyhow!("{}: {message}", path.display()))?;
        }
        let scores_certified = match (&serving, resolved.policy.score()) {
            (Ok(serving), Some(column)) => {
                certified_scores(options, inputs, serving, column, &mut checked_columns)
                    .with_context(|| format!("candidate {}", path.display()))?
            }
            _ => None,
        };
        tables.push(Candidate {
            path: path.clone(),
            sha256,
            serving,
            table: resolved,
            scores,
            tiered,
            scores_certified,
            accept_cost_increase: table.gate.accept_cost_increase,
        });
    }
    if options.include_baseline {
        tables.push(deployed_candidate(
            options,
            inputs,
            scores,
            &mut checked_columns,
        )?);
    }
    Ok(tables)
}

/// The deployed config's own table and `[serving]`, as they were signed,
/// scored like any candidate (`--include-baseline`).
fn deployed_candidate(
    options: &GateOptions,
    inputs: &Inputs,
    scores: &mut ScoreColumns<'_>,
    checked_columns: &mut BTreeSet<String>,
) -> anyhow::Result<Candidate> {
    let Some((path, sha256, config)) = &inputs.baseline else {
        anyhow::bail!("--include-baseline needs --baseline: there is no deployed config to score");
    };
    let context = || format!("--baseline {} (--include-baseline)", path.display());
    let table = config.table.clone();
    let candidate_scores = scores.for_table(&table).with_context(context)?;
    let tiered =
        tiered_rows(&options.results, &options.read_options(), &table).with_context(context)?;
    let router = inputs.router.as_ref().map(|(_, sha256)| sha256.as_str());
    let serving = match &config.serving {
        None => Err("signed without a [serving] block".to_owned()),
        Some(serving) => match &serving.scorer {
            Some(Scorer::Builtin { sha256, .. }) if Some(sha256.as_str()) != router => {
                Err(format!(
                    "it pins the router {sha256}, and --router is {}: its thresholds apply to that router's scores",
                    router.unwrap_or("not given")
                ))
            }
            _ => Ok(serving.clone()),
        },
    };
    let scores_certified = match (&serving, table.policy.score()) {
        (Ok(serving), Some(column)) => {
            certified_scores(options, inputs, serving, column, checked_columns)
                .with_context(context)?
        }
        _ => None,
    };
    Ok(Candidate {
        path: path.clone(),
        sha256: sha256.clone(),
        table,
        serving,
        scores: candidate_scores,
        tiered,
        scores_certified,
        accept_cost_increase: None,
    })
}

/// What a predictive candidate's scores are: the pinned router's own on
/// prompts it never saw (checked on every row, once per column), or an
/// external router's as given.
fn certified_scores(
    options: &GateOptions,
    inputs: &Inputs,
    serving: &Serving,
    column: &str,
    checked_columns: &mut BTreeSet<String>,
) -> anyhow::Result<Option<CertifiedScores>> {
    Ok(match (&serving.scorer, &inputs.router, &options.router) {
        (Some(Scorer::Builtin { .. }), Some((router, sha256)), Some(router_path)) => {
            if checked_columns.insert(column.to_owned()) {
                check_deployed_scores(
                    &options.results,
                    &options.read_options(),
                    &options.prompt_col,
                    column,
                    router,
                    router_path,
                )?;
            }
            Some(CertifiedScores {
                column: column.to_owned(),
                scorer: ScoresFrom::DeployedRouter,
                router_sha256: Some(sha256.clone()),
                router_trained_on: router.trained_on.as_ref().map(|set| set.len() as u64),
            })
        }
        (Some(Scorer::External(_)), _, _) => Some(CertifiedScores {
            column: column.to_owned(),
            scorer: ScoresFrom::External,
            router_sha256: None,
            router_trained_on: None,
        }),
        _ => None,
    })
}

/// The candidate's `[serving]` with what the gate pins for it: the router's
/// sha256 and the verifier template's text. A template the candidate names
/// that cannot be read is an input error; anything left open is the
/// candidate's failure.
fn pin_serving(
    options: &GateOptions,
    inputs: &Inputs,
    table: &RouteTable,
    resolved: &ResolvedTable,
) -> anyhow::Result<Result<Serving, String>> {
    let template = match &table.serving.verifier {
        Some(spec) => {
            PromptTemplate::load(&options.rubrics, &spec.template)?;
            let path = options
                .rubrics
                .join("prompts")
                .join(format!("{}.toml", spec.template));
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("{}: cannot read the template", path.display()))?;
            let sha256 = sha256_hex(text.as_bytes());
            Some((spec.template.clone(), text, sha256))
        }
        None => None,
    };
    let serving_inputs = ServingInputs {
        router_sha256: inputs.router.as_ref().map(|(_, sha256)| sha256.as_str()),
        template: template
            .as_ref()
            .map(|(name, text, sha256)| (name.as_str(), text.as_str(), sha256.as_str())),
        constraints: Some(&inputs.constraints),
    };
    Ok(table
        .serving
        .pin(&resolved.policy, serving_inputs, FEATURES_VERSION))
}
