//! Runs the gate: every candidate on the same graded results, the rules, the
//! choice, and the signed config with its exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::atomic::{Named, Staged, check_outputs, commit_all};
use crate::clock::{Clock, format_rfc3339};
use crate::routes::{Constraint, RouteTable};
use crate::schema::{CalibrationDocument, Failure, InputFile, Rule};
use crate::schema::{ReadOptions, read_graded};

use super::deployed_scores::check_deployed_scores;
use super::litellm::{ServeEndpoint, litellm_yaml};
use super::outputs::{OutPaths, lock_out, stage_bytes};
use super::render::markdown;
use super::rules::{RuleContext, check};
use crate::digest::{sha256_file, sha256_hex};
use crate::policy::regressions;
use crate::policy::{Evaluation, TieredRows, evaluate, recorded_models, scores_of, tiered_rows};
use crate::router_model::{FEATURES_VERSION, Router};
use crate::routes::ResolvedTable;
use crate::routes::{Provenance, RouteConfig, Scorer, Serving, ServingInputs};
use crate::routes::{load_secret, sign};
use crate::rubric::PromptTemplate;
use crate::schema::GradedTable;
use crate::schema::{
    BaselineRef, CandidateReport, CertifiedScores, Emitted, GATE_REPORT_SCHEMA_VERSION, GateReport,
    ScoresFrom,
};

/// The confidence of the regression test when the gate is given none.
pub const DEFAULT_REGRESSION_CONFIDENCE: f64 = 0.95;

#[derive(Debug, Clone)]
pub struct GateOptions {
    pub candidates: Vec<PathBuf>,
    /// `routeval serve`, to which the LiteLLM export sends the logical model
    /// (`--serve-url`, `--serve-key-env`).
    pub serve: Option<ServeEndpoint>,
    pub results: PathBuf,
    pub read: ReadOptions,
    /// Calibrations for the policies that take their thresholds from one,
    /// matched by policy and score column.
    pub calibrations: Vec<PathBuf>,
    pub baseline: Option<PathBuf>,
    /// The key the baseline must verify with; `None`: the `.pub` beside `key`.
    pub baseline_pubkey: Option<String>,
    pub constraints: Option<PathBuf>,
    pub target: f64,
    pub confidence: Option<f64>,
    pub max_regression: f64,
    pub key: PathBuf,
    pub out: PathBuf,
    pub ttl_days: u64,
    pub dataset_sha256: Option<String>,
    /// Constraints may name slices the results do not have.
    pub allow_unknown_slices: bool,
    /// With a confidence, certify the target for all slices jointly (Holm).
    pub familywise: bool,
    /// The built-in router whose scores a predictive candidate's thresholds
    /// apply to: pinned by sha256 in the signed config.
    pub router: Option<PathBuf>,
    /// The results' column with the prompt text, which the router's scores
    /// are checked against.
    pub prompt_col: String,
    /// Where a cascade candidate's `[serving.verifier] template` is found.
    pub rubrics: PathBuf,
    /// `replay candidate` documents of the candidates on the traffic the
    /// `baseline` config served: the production checks.
    pub production: Vec<PathBuf>,
}

/// The longest a signed config may live, in days: ten years keeps
/// `expires_at` a date every reader parses.
pub const MAX_TTL_DAYS: u64 = 3650;

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
        &options.key,
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
    key: &Path,
) -> anyhow::Result<(String, RouteConfig)> {
    let key = match pubkey {
        Some(key) => key.to_owned(),
        None => {
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

pub fn gate(options: &GateOptions, clock: &dyn Clock) -> anyhow::Result<GateReport> {
    // Everything that can be refused is read before anything is written.
    let secret = load_secret(&options.key)?;
    let inputs = Inputs::read(options)?;
    let mut scores = ScoreColumns::new(options, &inputs.graded);
    let tables = candidate_tables(options, &inputs, &mut scores)?;
    let mut candidates = score_candidates(options, &inputs, &tables, &mut scores)?;
    let chosen = cheapest_passing(&candidates);
    let version = inputs
        .baseline
        .as_ref()
        .map_or(1, |(_, _, config)| config.version + 1);
    let paths = OutPaths::new(&options.out, version);
    paths.refuse_existing(chosen.is_some())?;
    check_outputs(&paths.outputs(chosen.is_some()), &named_inputs(options))?;
    // One gate writes a directory at a time; the lock goes with the process,
    // even one killed.
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("{}: cannot create (--out)", options.out.display()))?;
    let _lock = lock_out(&options.out)?;
    paths.refuse_existing(chosen.is_some())?;
    // Every output is staged, then all are committed: a failure leaves none.
    // The config is committed last, and only where no file is: a kill before
    // then leaves no config, and the next gate writes the others again.
    let mut signed = None;
    let emitted = match chosen {
        Some(index) => {
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
                &secret,
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
        target: options.target,
        confidence: options.confidence,
        max_regression: options.max_regression,
        familywise: options.familywise,
        baseline: inputs.baseline.map(|(path, sha256, config)| BaselineRef {
            path: path.display().to_string(),
            version: config.version,
            sha256,
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

/// What every candidate is scored against: the graded results (and their
/// digest), the calibrations, the organisation's constraints, the slices
/// the results have, and the deployed config with its path and sha256.
struct Inputs {
    graded: GradedTable,
    results_sha256: String,
    calibrations: Vec<CalibrationDocument>,
    constraints: BTreeMap<String, Constraint>,
    slices: BTreeSet<String>,
    baseline: Option<(PathBuf, String, RouteConfig)>,
    /// `--router`, loaded, and its sha256.
    router: Option<(Router, String)>,
    production: super::production::Production,
}

impl Inputs {
    fn read(options: &GateOptions) -> anyhow::Result<Inputs> {
        let mut read = options.read.clone();
        read.details = true;
        // Single and static tables read no score: a table without one yet
        // (before `router train`) can gate them; a policy that needs the score
        // reads it strictly below, and is refused naming the column.
        read.score_optional = true;
        let graded = read_graded(&options.results, &read)?;
        let results_sha256 = sha256_file(&options.results)?;
        let mut calibrations: Vec<CalibrationDocument> = Vec::new();
        for path in &options.calibrations {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read (--calibration)", path.display()))?;
            let calibration: CalibrationDocument = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a calibration document", path.display()))?;
            calibrations.push(calibration);
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
            options.confidence,
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
struct ScoreColumns<'a> {
    options: &'a GateOptions,
    unscored: Vec<f64>,
    columns: BTreeMap<String, Vec<f64>>,
}

impl<'a> ScoreColumns<'a> {
    fn new(options: &'a GateOptions, graded: &GradedTable) -> ScoreColumns<'a> {
        let unscored = scores_of(graded);
        let mut columns = BTreeMap::new();
        if graded
            .batches
            .iter()
            .all(|batch| arrow::array::Array::null_count(&batch.score) == 0)
        {
            columns.insert(options.read.names.score.clone(), unscored.clone());
        }
        ScoreColumns {
            options,
            unscored,
            columns,
        }
    }

    fn for_table(&mut self, table: &ResolvedTable) -> anyhow::Result<Vec<f64>> {
        let Some(column) = table.policy.score() else {
            return Ok(self.unscored.clone());
        };
        if let Some(scores) = self.columns.get(column) {
            return Ok(scores.clone());
        }
        let mut read = self.options.read.clone();
        read.names.score = column.to_owned();
        read.details = false;
        let scores = scores_of(&read_graded(&self.options.results, &read)?);
        self.columns.insert(column.to_owned(), scores.clone());
        Ok(scores)
    }
}

/// A candidate route table, resolved against the calibrations, with what
/// it is scored on.
struct Candidate {
    path: PathBuf,
    sha256: String,
    table: ResolvedTable,
    /// Its signed `serving` block, or what it leaves open.
    serving: Result<Serving, String>,
    scores: Vec<f64>,
    tiered: Option<TieredRows>,
    /// A predictive candidate's scores, as its report states them.
    scores_certified: Option<CertifiedScores>,
}

/// Every candidate, loaded, checked against the results and the deployed
/// config, and resolved.
fn candidate_tables(
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
            .resolve(&inputs.calibrations, &options.read.names.score)
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
        let tiered = tiered_rows(&options.results, &options.read, &resolved)
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
        });
    }
    Ok(tables)
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
                    &options.read,
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

/// Each candidate's metrics, its paired comparison with the deployed config
/// and the rules it breaks.
fn score_candidates(
    options: &GateOptions,
    inputs: &Inputs,
    tables: &[Candidate],
    scores: &mut ScoreColumns<'_>,
) -> anyhow::Result<Vec<CandidateReport>> {
    let graded = &inputs.graded;
    let mut recorded = recorded_models(graded);
    // The tiers between record their versions in columns of their own.
    for candidate in tables {
        for (tier, models) in candidate.tiered.iter().flat_map(|rows| &rows.models) {
            recorded
                .entry(tier.clone())
                .or_insert_with(|| models.clone());
        }
    }
    let baseline_evaluation = match &inputs.baseline {
        Some((path, _, config)) => {
            let scores = scores
                .for_table(&config.table)
                .with_context(|| format!("--baseline {}", path.display()))?;
            let tiered = tiered_rows(&options.results, &options.read, &config.table)
                .with_context(|| format!("--baseline {}", path.display()))?;
            Some(evaluate(
                &config.table,
                graded,
                &scores,
                options.confidence,
                tiered.as_ref(),
            ))
        }
        None => None,
    };
    let context = RuleContext {
        target: options.target,
        confidence: options.confidence,
        constraints: &inputs.constraints,
        max_regression: options.max_regression,
        familywise: options.familywise,
        recorded_models: &recorded,
    };
    let mut shared_warnings = Vec::new();
    for (path, calibration) in options.calibrations.iter().zip(&inputs.calibrations) {
        if calibration.results.sha256 != inputs.results_sha256 {
            shared_warnings.push(format!(
                "the calibration {} was computed on other results (sha256 {})",
                path.display(),
                calibration.results.sha256
            ));
        }
    }
    let files: Vec<(&PathBuf, &str)> = tables
        .iter()
        .map(|candidate| (&candidate.path, candidate.sha256.as_str()))
        .collect();
    inputs.production.check_covers(&files)?;
    let scoring = Scoring {
        options,
        inputs,
        baseline: baseline_evaluation.as_ref(),
        context: &context,
        shared_warnings: &shared_warnings,
    };
    Ok(tables
        .iter()
        .map(|candidate| scoring.report(candidate))
        .collect())
}

/// What every candidate is scored with.
struct Scoring<'a> {
    options: &'a GateOptions,
    inputs: &'a Inputs,
    baseline: Option<&'a Evaluation>,
    context: &'a RuleContext<'a>,
    shared_warnings: &'a [String],
}

impl Scoring<'_> {
    /// One candidate's metrics, its paired comparison with the deployed
    /// config, its exploration's price, its production evidence and the
    /// rules it breaks.
    fn report(&self, candidate: &Candidate) -> CandidateReport {
        let Scoring {
            options,
            inputs,
            context,
            ..
        } = *self;
        let graded = &inputs.graded;
        let table = &candidate.table;
        let evaluation = evaluate(
            table,
            graded,
            &candidate.scores,
            options.confidence,
            candidate.tiered.as_ref(),
        );
        let regressions = match self.baseline {
            Some(baseline) => regressions(
                &evaluation,
                baseline,
                options.max_regression,
                1.0 - options.confidence.unwrap_or(DEFAULT_REGRESSION_CONFIDENCE),
            ),
            None => Vec::new(),
        };
        let (mut failures, mut warnings) = check(table, &evaluation, &regressions, context);
        if let Err(open) = &candidate.serving {
            failures.push(Failure {
                rule: Rule::Serving,
                slice: None,
                message: format!("not deployable: {open}"),
            });
        }
        let (exploration, costs_too_much) = super::exploration::priced(
            table,
            candidate.serving.as_ref().ok(),
            &evaluation,
            graded,
            &candidate.scores,
            candidate.tiered.as_ref(),
        );
        failures.extend(costs_too_much);
        let (production, on_production) = inputs.production.judge(
            &candidate.sha256,
            options.target,
            options.confidence,
            options.max_regression,
        );
        failures.extend(on_production);
        warnings.extend(self.shared_warnings.iter().cloned());
        CandidateReport {
            file: candidate.path.display().to_string(),
            sha256: candidate.sha256.clone(),
            logical_model: table.logical_model.clone(),
            policy: table.policy.kind().to_owned(),
            passed: failures.is_empty(),
            failures,
            warnings,
            overall: evaluation.overall,
            slices: evaluation.slices,
            regressions,
            scores: candidate.scores_certified.clone(),
            exploration,
            production,
        }
    }
}

/// The cheapest candidate that passes every rule; ties go to the higher
/// quality, then to the file name.
fn cheapest_passing(candidates: &[CandidateReport]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, candidate)| candidate.passed)
        .min_by(|(_, a), (_, b)| {
            a.overall
                .mean_cost
                .total_cmp(&b.overall.mean_cost)
                .then(b.overall.quality.total_cmp(&a.overall.quality))
                .then(a.file.cmp(&b.file))
        })
        .map(|(index, _)| index)
}

/// Every file the gate reads, by its flag.
fn named_inputs(options: &GateOptions) -> Vec<Named<'_>> {
    let mut inputs = vec![
        Named::new(&options.results, "--results"),
        Named::new(&options.key, "--key"),
    ];
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
            target: options.target,
            confidence: options.confidence,
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
