//! `replay candidate --state FILE`: the candidate against the running config
//! on the explored traffic, looked at again as the records grow, stopped as
//! soon as the sequence of their paired difference shows one better at the
//! confidence (or the label or day budget is spent). The sequence holds at
//! every look, so stopping at the first decisive one keeps its level;
//! what the state adds is that every look extends one stream (the records
//! a look read before must come first, in the same order) and that a
//! stopped comparison stays stopped.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use crate::schema::{
    COMPARISON_STATE_KIND, COMPARISON_STATE_SCHEMA_VERSION, Comparison, ComparisonBudget,
    ComparisonLook, ComparisonState, ComparisonVerdict, SliceEstimate, read_state_document,
};

const DAY_MS: f64 = 86_400_000.0;

/// `--state` and its budget.
#[derive(Debug, Clone, PartialEq)]
pub struct ComparisonOptions {
    pub state: PathBuf,
    pub budget: ComparisonBudget,
}

/// The order the config's decisions were read in: how many, the digest of
/// their ids, that digest after the first `prefix` of them (what a previous
/// look read), and when the first and last were made.
pub(super) struct Order {
    hasher: Sha256,
    count: u64,
    prefix: u64,
    at_prefix: Option<String>,
    first_ms: Option<i64>,
    last_ms: Option<i64>,
}

fn hex(hasher: Sha256) -> String {
    format!("{:x}", hasher.finalize())
}

impl Order {
    pub fn new(prefix: u64) -> Order {
        Order {
            hasher: Sha256::new(),
            count: 0,
            prefix,
            at_prefix: (prefix == 0).then(|| hex(Sha256::new())),
            first_ms: None,
            last_ms: None,
        }
    }

    pub fn push(&mut self, id: &str, timestamp_ms: i64) {
        self.hasher.update(id.as_bytes());
        self.hasher.update([0]);
        self.count += 1;
        if self.count == self.prefix {
            self.at_prefix = Some(hex(self.hasher.clone()));
        }
        self.first_ms.get_or_insert(timestamp_ms);
        self.last_ms = Some(timestamp_ms);
    }
}

/// What a look must agree with the state on.
pub(super) struct Identity<'a> {
    pub config_sha256: &'a str,
    pub candidate_sha256: &'a str,
    pub confidence: f64,
    pub label_seed: u64,
    pub inclusion: f64,
}

/// The state at `path`, or `None` where there is none yet; refused when
/// it compares something else.
pub(super) fn read_state(
    path: &Path,
    identity: &Identity<'_>,
) -> anyhow::Result<Option<ComparisonState>> {
    let Some(state) =
        read_state_document::<ComparisonState>(path, "a candidate comparison state", "--state")?
    else {
        return Ok(None);
    };
    let differs = |what: &str, state: String, now: String| {
        anyhow::anyhow!(
            "{}: compares {what} {state}, this look {now}; a new comparison starts a new --state",
            path.display()
        )
    };
    if state.config_sha256 != identity.config_sha256 {
        return Err(differs(
            "the records of the config of sha256",
            state.config_sha256,
            identity.config_sha256.to_owned(),
        ));
    }
    if state.candidate_sha256 != identity.candidate_sha256 {
        return Err(differs(
            "the candidate of sha256",
            state.candidate_sha256,
            identity.candidate_sha256.to_owned(),
        ));
    }
    if (state.confidence - identity.confidence).abs() > 1e-12 {
        return Err(differs(
            "at confidence",
            state.confidence.to_string(),
            identity.confidence.to_string(),
        ));
    }
    if state.label_seed != identity.label_seed
        || (state.inclusion_probability - identity.inclusion).abs() > 1e-12
    {
        return Err(differs(
            "labels drawn with seed and probability",
            format!("{} and {}", state.label_seed, state.inclusion_probability),
            format!("{} and {}", identity.label_seed, identity.inclusion),
        ));
    }
    Ok(Some(state))
}

/// This look: the comparison it reports and the state to keep. Refused
/// where the records do not begin with the decisions the state compared.
pub(super) fn look(
    options: &ComparisonOptions,
    previous: Option<ComparisonState>,
    order: Order,
    identity: &Identity<'_>,
    overall: &SliceEstimate,
) -> anyhow::Result<(Comparison, ComparisonState)> {
    let path = options.state.display().to_string();
    let mut state = match previous {
        Some(state) => {
            if order.at_prefix.as_deref() != Some(state.decisions_sha256.as_str()) {
                bail!(
                    "{path}: the records do not begin with the {} decisions compared before, in their order (--state): a comparison reads one growing stream of records; start a new --state for other records",
                    state.decisions
                );
            }
            state
        }
        None => ComparisonState {
            schema_version: COMPARISON_STATE_SCHEMA_VERSION,
            kind: COMPARISON_STATE_KIND.to_owned(),
            config_sha256: identity.config_sha256.to_owned(),
            candidate_sha256: identity.candidate_sha256.to_owned(),
            confidence: identity.confidence,
            label_seed: identity.label_seed,
            inclusion_probability: identity.inclusion,
            budget: options.budget,
            decisions: 0,
            decisions_sha256: String::new(),
            first_decision_ms: None,
            looks: Vec::new(),
            stopped_at: None,
        },
    };
    if let Some(stopped) = state.stopped_at {
        let last = state.looks[stopped - 1].clone();
        let comparison = said(&path, &state, &last, stopped, true);
        return Ok((comparison, state));
    }
    let difference = overall.quality_difference;
    let verdict = match (difference.lower, difference.upper) {
        (Some(lower), _) if lower > 0.0 => ComparisonVerdict::Better,
        (_, Some(upper)) if upper < 0.0 => ComparisonVerdict::Worse,
        _ => ComparisonVerdict::Undecided,
    };
    state.first_decision_ms = state.first_decision_ms.or(order.first_ms);
    state.decisions = order.count;
    state.decisions_sha256 = hex(order.hasher);
    let current = ComparisonLook {
        decisions: order.count,
        labelled: overall.labelled,
        difference,
        verdict,
    };
    state.looks.push(current.clone());
    let days = match (state.first_decision_ms, order.last_ms) {
        (Some(first), Some(last)) => (last - first) as f64 / DAY_MS,
        _ => 0.0,
    };
    let spent = state
        .budget
        .max_labels
        .is_some_and(|most| overall.labelled >= most)
        || state.budget.max_days.is_some_and(|most| days >= most);
    let stopped = verdict != ComparisonVerdict::Undecided || spent;
    if stopped {
        state.stopped_at = Some(state.looks.len());
    }
    let comparison = said(&path, &state, &current, state.looks.len(), stopped);
    Ok((comparison, state))
}

/// The comparison as `candidate.json` carries it, its line included.
fn said(
    path: &str,
    state: &ComparisonState,
    look: &ComparisonLook,
    looks: usize,
    stopped: bool,
) -> Comparison {
    let confidence = state.confidence;
    let labels = look.labelled;
    let (lower, upper) = (
        look.difference.lower.unwrap_or(-1.0),
        look.difference.upper.unwrap_or(1.0),
    );
    let message = match look.verdict {
        ComparisonVerdict::Better => format!(
            "better than the running config after {labels} labels (look {looks}, stopped): the paired difference is at least {lower:.4} at confidence {confidence}, holding at every look"
        ),
        ComparisonVerdict::Worse => format!(
            "worse than the running config after {labels} labels (look {looks}, stopped): the paired difference is at most {upper:.4} at confidence {confidence}, holding at every look"
        ),
        ComparisonVerdict::Undecided if stopped => format!(
            "undecided after {labels} labels (look {looks}): the paired difference is between {lower:.4} and {upper:.4} at confidence {confidence}, and the budget ({}) is spent; stopped",
            budget_said(&state.budget)
        ),
        ComparisonVerdict::Undecided => format!(
            "undecided after {labels} labels (look {looks}): the paired difference is between {lower:.4} and {upper:.4} at confidence {confidence}; keep exploring and look again"
        ),
    };
    Comparison {
        state: path.to_owned(),
        verdict: look.verdict,
        stopped,
        looks,
        labelled: labels,
        difference: look.difference,
        message,
    }
}

fn budget_said(budget: &ComparisonBudget) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = budget.max_labels {
        parts.push(format!("{labels} labels"));
    }
    if let Some(days) = budget.max_days {
        parts.push(format!("{days} days"));
    }
    parts.join(", ")
}

/// Writes `state` where [`read_state`] reads it. The caller writes it
/// after the look's document: a look whose document was not written is not
/// counted.
pub fn write_state(state: &ComparisonState, path: &Path) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(state)?;
    text.push('\n');
    crate::atomic::write_bytes_atomically(path, text.as_bytes())
        .with_context(|| format!("{}: cannot write (--state)", path.display()))
}
