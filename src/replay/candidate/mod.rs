//! `routeval replay candidate`: how a candidate route table would do on the
//! traffic a signed config served, before it is deployed, from serve's
//! records, their propensities and a label set of the logged answers.
//! Each record is decided again by the kernel twice: as the candidate
//! would (the route it needs), and as the config that logged it did (the
//! probability it gave every route, which must be the one the record
//! carries). Where the logged policy never chose the route the candidate
//! needs, the slice is refused rather than extrapolated.

mod compare;
mod decide;
mod direct;
mod estimate;
mod labels;
mod render;

pub use compare::{ComparisonOptions, write_state};
pub use estimate::{Bound, Design, LabelDesign, Logged, Tally};
pub use render::render_candidate;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::digest::sha256_path;
use crate::policy::tiered_rows;
use crate::records::{FieldNames, for_each_record};
use crate::routes::{
    ResolvedPolicy, ResolvedTable, RouteConfig, RouteTable, Serving, UnknownSlice,
};
use crate::schema::{
    CANDIDATE_REPLAY_KIND, CANDIDATE_REPLAY_SCHEMA_VERSION, CalibrationDocument, CandidateReplay,
    ColumnNames, ComparisonState, InputFile, LabelsUsed, LoggedBy, ReadOptions, read_graded,
};
use crate::schema::{DocumentFile, read_document};
use crate::units::Confidence;

use compare::{Identity, Order};
use decide::Decisions;
use direct::DirectModel;
use labels::{Labels, Tuning, Unusable};

#[derive(Debug, Clone, PartialEq)]
pub struct CandidateOptions {
    /// serve's records (a file or its records directory).
    pub records: PathBuf,
    /// The signed config that decided them.
    pub config: PathBuf,
    /// The candidate route table, and the calibrations its thresholds come
    /// from.
    pub candidate: PathBuf,
    pub calibrations: Vec<PathBuf>,
    /// The graded results the direct model is fitted on.
    pub results: PathBuf,
    pub labels: PathBuf,
    pub confidence: Confidence,
    /// A sequence valid at every look, or an interval for one.
    pub bound: Bound,
    /// The running comparison against the config, carried between looks.
    pub comparison: Option<ComparisonOptions>,
}

/// Why the records cannot answer for the candidate; each names the slice,
/// the record or the line.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    #[error(
        "slice {slice:?}: the candidate sends {requests} request(s) to route {route:?}, which the config that logged them never chose for them (its policy's route, and no exploration of {route:?} in the slice): the records cannot say how {route:?} would answer; sign exploration ([serving.explore]) and record again"
    )]
    NoSupport {
        slice: String,
        route: String,
        requests: u64,
    },
    #[error("{path}: {problem}")]
    Labels { path: String, problem: String },
}

/// The candidate's estimates, per slice and over all the config's decisions
/// in the records; with `--state`, the comparison's state after this look,
/// for the caller to write once the document is out.
pub fn replay_candidate(
    options: &CandidateOptions,
) -> anyhow::Result<(CandidateReplay, Option<ComparisonState>)> {
    let (config, serving, config_sha256) = load_config(&options.config)?;
    let (table, unknown) = load_candidate(options)?;
    check_policy(&table.policy, &options.candidate, "--candidate")?;
    let score_column = table.policy.score().unwrap_or("score").to_owned();
    let read = ReadOptions {
        names: ColumnNames::new(score_column, "slice"),
        ..ReadOptions::default()
    };
    let graded = read_graded(&options.results, &read)?;
    let model = match tiered_rows(&options.results, &read, &table)
        .with_context(|| format!("{} (--results)", options.results.display()))?
    {
        Some(tiered) => DirectModel::tiered(&graded, &tiered),
        None => DirectModel::two_tier(&graded),
    };
    let labels = read_labels(&options.labels)?;
    let committed = check_committed(&serving, &labels, &options.labels)?;
    let candidate_sha256 = sha256_path(&options.candidate)?;
    let identity = Identity {
        config_sha256: &config_sha256,
        candidate_sha256: &candidate_sha256,
        confidence: options.confidence.get(),
        label_seed: labels.seed,
        inclusion: labels.inclusion,
    };
    let previous = previous_look(options, &identity)?;
    let mut order = Order::new(previous.as_ref().map_or(0, |state| state.decisions));
    let decisions = Decisions {
        config: &config,
        serving: &serving,
        config_sha256: &config_sha256,
        candidate: &table,
        unknown,
        model: &model,
    };
    let label_design = labels.design();
    let design = |min_propensity| design_of(options, label_design, min_propensity);
    // Power tuning needs audited labels and a sequence (its terms are not
    // independent).
    let mut tuning = Tuning::new(labels.audit.is_some() && options.bound == Bound::Sequence);
    let (slices, overall, records) = decide_all(
        options,
        &decisions,
        &labels,
        (&design, &mut order, &mut tuning),
    )?;
    let overall_estimate = overall.estimate("*");
    let (comparison, state) = match &options.comparison {
        Some(comparison) => {
            compare::look(comparison, previous, order, &identity, &overall_estimate)
                .map(|(said, state)| (Some(said), Some(state)))?
        }
        None => (None, None),
    };
    let estimate = |slice: &str, tally: &Tally| tally.estimate(slice);
    let file = |path: &Path, rows: u64| -> anyhow::Result<InputFile> {
        Ok(InputFile {
            path: path.display().to_string(),
            sha256: sha256_path(path)?,
            rows,
        })
    };
    let document = CandidateReplay {
        schema_version: CANDIDATE_REPLAY_SCHEMA_VERSION,
        kind: CANDIDATE_REPLAY_KIND.to_owned(),
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        records: file(&options.records, records)?,
        labels: LabelsUsed {
            path: options.labels.display().to_string(),
            sha256: sha256_path(&options.labels)?,
            rows: labels.rows(),
            seed: labels.seed,
            inclusion_probability: labels.inclusion,
            committed,
            power_tuning: labels.audit.is_some().then(|| tuning.lambda()),
        },
        logged_by: LoggedBy {
            path: options.config.display().to_string(),
            version: config.version,
            sha256: config_sha256.clone(),
        },
        candidate: file(&options.candidate, 0)?,
        results: file(&options.results, graded.num_rows() as u64)?,
        confidence: options.confidence.get(),
        bound: options.bound.name().to_owned(),
        overall: overall_estimate,
        slices: slices
            .iter()
            .map(|(slice, tally)| estimate(slice, tally))
            .collect(),
        comparison,
    };
    Ok((document, state))
}

/// Whether the config committed the labels' draw; refused where it
/// committed another.
fn check_committed(serving: &Serving, labels: &Labels, path: &Path) -> anyhow::Result<bool> {
    let Some(committed) = serving.explore.as_ref().and_then(|explore| explore.labels) else {
        return Ok(false);
    };
    if labels.seed != committed.seed || (labels.inclusion - committed.share).abs() > 1e-12 {
        return Err(CandidateError::Labels {
            path: path.display().to_string(),
            problem: format!(
                "drawn with seed {} at probability {}, where --config committed its own draw ([serving.explore.labels]); draw them with routeval sample --records DIR --config CONFIG",
                labels.seed, labels.inclusion
            ),
        }
        .into());
    }
    Ok(true)
}

/// The design of a group whose routes have at least `min_propensity`.
fn design_of(options: &CandidateOptions, labels: LabelDesign, min_propensity: f64) -> Design {
    Design {
        min_propensity,
        labels,
        bound: options.bound,
        confidence: options.confidence.get(),
    }
}

/// The label set, or why it cannot be used.
fn read_labels(path: &Path) -> anyhow::Result<Labels> {
    match Labels::read(path) {
        Ok(labels) => Ok(labels),
        Err(Unusable::Read(error)) => Err(error.into()),
        Err(Unusable::Rows(problem)) => Err(CandidateError::Labels {
            path: path.display().to_string(),
            problem,
        }
        .into()),
    }
}

/// The comparison's state before this look, where `--state` asks for one.
fn previous_look(
    options: &CandidateOptions,
    identity: &Identity<'_>,
) -> anyhow::Result<Option<ComparisonState>> {
    let Some(comparison) = &options.comparison else {
        return Ok(None);
    };
    if options.bound != Bound::Sequence {
        anyhow::bail!(
            "--state compares at every look, which only --bound betting-sequence holds for"
        );
    }
    compare::read_state(&comparison.state, identity)
}

/// The signed config that decided the records, its serving block and its
/// file's sha256.
fn load_config(path: &Path) -> anyhow::Result<(RouteConfig, Serving, String)> {
    let DocumentFile {
        document: config,
        sha256,
    } = read_document::<RouteConfig>(path, "a route config", Some("--config"))?;
    let serving = config.serving.clone().with_context(|| {
        format!(
            "{}: a config without a serving block did not decide serve's records (--config)",
            path.display()
        )
    })?;
    check_policy(&config.table.policy, path, "--config")?;
    Ok((config, serving, sha256))
}

/// Every decision of the records decided again, labelled where the draw
/// chose it, into each slice's tally and the overall one, in the records'
/// order (a sequence reads them as they came); and how many records were
/// read. Each tally's terms are bounded by the design of its requests:
/// a slice's by its own exploration, all requests' by the config's
/// smallest. Refused where a slice lacks support or the labels are not the
/// draw's.
fn decide_all(
    options: &CandidateOptions,
    decisions: &Decisions<'_>,
    labels: &Labels,
    (design, order, tuning): (&dyn Fn(f64) -> Design, &mut Order, &mut Tuning),
) -> anyhow::Result<(BTreeMap<String, Tally>, Tally, u64)> {
    let mut slices: BTreeMap<String, Tally> = BTreeMap::new();
    let mut overall = Tally::new(design(decisions.min_propensity()));
    let mut labelled: HashSet<String> = HashSet::new();
    let mut unsupported: BTreeMap<(String, String), u64> = BTreeMap::new();
    let invalid = |location, field: &str, problem: String| crate::schema::InputError::Invalid {
        path: options.records.clone(),
        location,
        field: field.to_owned(),
        problem,
    };
    let records = for_each_record(
        &options.records,
        &FieldNames::default(),
        |location, record| {
            let decided = decisions
                .decide(record)
                .map_err(|(field, problem)| invalid(location, field, problem))?;
            let Some(mut decided) = decided else {
                return Ok(());
            };
            let slice = record.slice.as_ref();
            if let Some(route) = &decided.unsupported {
                *unsupported
                    .entry((slice.to_owned(), route.clone()))
                    .or_default() += 1;
            }
            decided.logged.reward = labels.reward_of(&record.id, tuning).map_err(|problem| {
                invalid(
                    location,
                    "id",
                    format!("{problem} ({})", options.labels.display()),
                )
            })?;
            if decided.logged.reward.is_some() {
                labelled.insert(record.id.to_string());
            }
            order.push(&record.id, record.timestamp_ms);
            overall.add(&decided.logged);
            match slices.get_mut(slice) {
                Some(tally) => tally.add(&decided.logged),
                None => {
                    let mut tally = Tally::new(design(decided.logged.min_propensity));
                    tally.add(&decided.logged);
                    slices.insert(slice.to_owned(), tally);
                }
            }
            Ok(())
        },
    )?;
    if let Some(problem) = labels.stray(&labelled) {
        return Err(CandidateError::Labels {
            path: options.labels.display().to_string(),
            problem,
        }
        .into());
    }
    if let Some(((slice, route), requests)) = unsupported.into_iter().next() {
        return Err(CandidateError::NoSupport {
            slice,
            route,
            requests,
        }
        .into());
    }
    if slices.is_empty() {
        anyhow::bail!(
            "{}: no record is a decision of --config (serve's records carry decided_route and propensity): nothing to estimate on",
            options.records.display()
        );
    }
    Ok((slices, overall, records))
}

/// A policy the estimate can replay: one route per request, decided from
/// the slice and the score (single, static, predictive over two tiers or
/// more).
fn check_policy(policy: &ResolvedPolicy, path: &Path, flag: &str) -> anyhow::Result<()> {
    match policy {
        ResolvedPolicy::Cascade { .. } | ResolvedPolicy::CascadeStages { .. } => anyhow::bail!(
            "{}: a cascade's route depends on its verifier's verdict on an answer the records do not have; {flag} must be a single, static or predictive table",
            path.display()
        ),
        _ => Ok(()),
    }
}

/// The candidate table resolved against its calibrations, and what it
/// gives a slice it does not name.
fn load_candidate(options: &CandidateOptions) -> anyhow::Result<(ResolvedTable, UnknownSlice)> {
    let table = RouteTable::load(&options.candidate)
        .with_context(|| format!("{} (--candidate)", options.candidate.display()))?;
    let mut calibrations: Vec<CalibrationDocument> = Vec::new();
    for path in &options.calibrations {
        calibrations
            .push(read_document(path, "a calibration document", Some("--calibration"))?.document);
    }
    let resolved = table
        .resolve(&calibrations, "score")
        .map_err(|message| anyhow::anyhow!("{}: {message}", options.candidate.display()))?;
    let unknown = table
        .serving
        .unknown_slice
        .unwrap_or(UnknownSlice::Strongest);
    Ok((resolved, unknown))
}
