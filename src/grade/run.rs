//! `routeval grade --run`: a run's responses table, graded by each prompt's
//! rubric, as the graded-results table `calibrate` reads. One row per
//! prompt: whether each tier's answer was acceptable, what each tier cost
//! and how long it took, the reject score of the cascade (the verifier's, or
//! self-consistency over the small tier's samples), and what each rubric
//! said.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{BooleanArray, Float64Array, StringArray};
use arrow::datatypes::{DataType, Field};

use super::rubric::{Rubric, Verdict};
use super::verifier::{TokenChoice, self_consistency, verdict_score};
use crate::dataset::{DatasetRow, Message, Role, read_dataset};
use crate::routes::Tier;
use crate::run::{
    MANIFEST_FILE, Manifest, RESPONSES_FILE, ResponseRow, read_responses, sha256_file,
};
use crate::schema::{GradedBatch, GradedTable, Present};

/// Where the cascade's reject scores came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreSource {
    Verifier,
    SelfConsistency,
    /// Neither: the score column is null until `routeval router train
    /// --scored-out` (or `router join`) fills it.
    None,
}

#[derive(Debug)]
pub struct GradedRun {
    pub table: GradedTable,
    pub score_source: ScoreSource,
    /// Per slice: prompts, small acceptable, large acceptable.
    pub slices: BTreeMap<String, (u64, u64, u64)>,
    /// Prompts left out because a tier's call failed (`--allow-missing`).
    pub dropped: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum GradeRunError {
    #[error("{}: row {row}: {problem}", path.display())]
    Response {
        path: PathBuf,
        row: u64,
        problem: String,
    },
    #[error("{}: {problem}", path.display())]
    Run { path: PathBuf, problem: String },
}

/// The rows of one prompt.
#[derive(Debug, Default)]
struct PromptCalls {
    small: Vec<ResponseRow>,
    large: Option<ResponseRow>,
    verifier: Option<ResponseRow>,
}

struct GradedPrompt {
    id: String,
    slice: String,
    prompt: String,
    score: Option<f64>,
    small_ok: bool,
    large_ok: bool,
    costs: [f64; 3],
    latencies: [Option<f64>; 5],
    models: [Option<String>; 3],
    detail: String,
}

fn judged(
    row: &ResponseRow,
    rubric: &Rubric,
    reference: Option<&str>,
    judgements: &Judgements,
) -> (bool, String) {
    match (&row.error_kind, &row.text) {
        (None, Some(text)) => {
            let lookup = |at: &str| {
                judgements
                    .get(&(row.prompt_index, row.tier, at.to_owned()))
                    .cloned()
            };
            let verdict = rubric.grade_judged(text, reference, &lookup);
            (verdict.pass, verdict.detail)
        }
        _ => (
            false,
            format!(
                "no answer: {} ({})",
                row.error_kind.as_deref().unwrap_or("error"),
                row.error_message.as_deref().unwrap_or_default()
            ),
        ),
    }
}

/// The verifier's probability of reject; a verifier that failed or said
/// nothing parseable escalates, as a production cascade would.
fn reject_score(row: &ResponseRow) -> (f64, String) {
    let (Some(text), None) = (&row.text, &row.error_kind) else {
        return (
            1.0,
            format!(
                "verifier failed ({}), escalated",
                row.error_kind.as_deref().unwrap_or("error")
            ),
        );
    };
    let alternatives: Option<Vec<TokenChoice>> = row
        .verdict_logprobs
        .as_deref()
        .and_then(|json| serde_json::from_str::<Vec<(String, f64)>>(json).ok())
        .map(|pairs| {
            pairs
                .into_iter()
                .map(|(token, logprob)| TokenChoice { token, logprob })
                .collect()
        });
    match verdict_score(text, alternatives.as_deref()) {
        Ok(score) => (score, format!("verifier {score:.3}")),
        Err(problem) => (
            1.0,
            format!("verifier answer unreadable ({problem}), escalated"),
        ),
    }
}

fn normalised(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    (!words.is_empty()).then(|| words.join(" ").to_lowercase())
}

fn grade_prompt(
    row: &DatasetRow,
    calls: PromptCalls,
    rubric: &Rubric,
    source: ScoreSource,
    judgements: &Judgements,
) -> GradedPrompt {
    let reference = row.reference.as_deref();
    let first_small = calls.small.first();
    let (small_ok, small_detail) = first_small.map_or((false, "no row".to_owned()), |small| {
        judged(small, rubric, reference, judgements)
    });
    let (large_ok, large_detail) = calls
        .large
        .as_ref()
        .map_or((false, "no row".to_owned()), |large| {
            judged(large, rubric, reference, judgements)
        });
    let (score, score_detail, score_cost) = match source {
        ScoreSource::Verifier => {
            let verifier = calls
                .verifier
                .as_ref()
                .expect("checked: every prompt has a verifier row");
            let (score, detail) = reject_score(verifier);
            (Some(score), detail, verifier.cost_usd.unwrap_or_default())
        }
        ScoreSource::SelfConsistency => {
            let texts: Vec<&str> = calls
                .small
                .iter()
                .filter_map(|call| call.text.as_deref())
                .collect();
            let score = if texts.len() == calls.small.len() {
                self_consistency(&texts, normalised).unwrap_or(1.0)
            } else {
                1.0
            };
            let extra: f64 = calls
                .small
                .iter()
                .skip(1)
                .filter_map(|call| call.cost_usd)
                .sum();
            (
                Some(score),
                format!(
                    "self-consistency {score:.3} over {} samples",
                    calls.small.len()
                ),
                extra,
            )
        }
        ScoreSource::None => (None, String::new(), 0.0),
    };
    let prompt = last_user_message(row);
    let mut detail = format!("small: {small_detail}; large: {large_detail}");
    if !score_detail.is_empty() {
        detail.push_str("; ");
        detail.push_str(&score_detail);
    }
    GradedPrompt {
        id: row.id.clone(),
        slice: row.slice.clone(),
        prompt,
        score,
        small_ok,
        large_ok,
        costs: [
            first_small
                .and_then(|small| small.cost_usd)
                .unwrap_or_default(),
            calls
                .large
                .as_ref()
                .and_then(|large| large.cost_usd)
                .unwrap_or_default(),
            score_cost,
        ],
        latencies: [
            first_small.and_then(|small| small.total_ms),
            first_small.and_then(|small| small.ttft_ms),
            calls.large.as_ref().and_then(|large| large.total_ms),
            calls.large.as_ref().and_then(|large| large.ttft_ms),
            calls
                .verifier
                .as_ref()
                .and_then(|verifier| verifier.total_ms),
        ],
        models: [
            first_small.and_then(|small| small.model_version.clone()),
            calls
                .large
                .as_ref()
                .and_then(|large| large.model_version.clone()),
            calls
                .verifier
                .as_ref()
                .and_then(|verifier| verifier.model_version.clone()),
        ],
        detail,
    }
}

/// Verdicts of `llm_judge` checks by (prompt, tier, where the check sits).
pub type Judgements = HashMap<JudgeKey, Verdict>;

/// One `llm_judge` check of one answer: the prompt's row, the tier and the
/// check's place in the rubric.
pub type JudgeKey = (u64, Tier, String);

/// A judge call to make: which check of which answer, and the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeRequest {
    pub key: JudgeKey,
    pub messages: Vec<Message>,
}

/// A run read and matched to its prompts, ready to grade once the judge
/// calls its `llm_judge` checks need are made.
#[derive(Debug)]
pub struct Grading {
    /// The run's config, whose `[judge]` answers the judge requests.
    pub config: PathBuf,
    pub config_sha256: String,
    prompts: Vec<DatasetRow>,
    by_prompt: BTreeMap<u64, PromptCalls>,
    source: ScoreSource,
    dropped: u64,
}

impl Grading {
    /// Reads the run in directory `run`. `dataset` overrides the path the
    /// manifest recorded; either way its digest must match. A prompt whose
    /// small or large call failed has no answer to grade: grading it as
    /// unacceptable would bias quality, so the run is refused unless
    /// `allow_missing`, which drops such prompts.
    pub fn read(
        run: &Path,
        dataset: Option<&Path>,
        rubrics: &BTreeMap<String, Rubric>,
        allow_missing: bool,
    ) -> anyhow::Result<Grading> {
        let manifest = Manifest::load(&run.join(MANIFEST_FILE))?;
        let run_error = |problem: String| GradeRunError::Run {
            path: run.to_owned(),
            problem,
        };
        if !manifest.complete {
            return Err(run_error(
                "the run is not complete; run the same `routeval run` again to finish it"
                    .to_owned(),
            )
            .into());
        }
        let dataset = dataset.map_or_else(|| PathBuf::from(&manifest.dataset.path), Path::to_owned);
        if sha256_file(&dataset)? != manifest.dataset.sha256 {
            return Err(run_error(format!(
                "the dataset {} changed since the run (sha256 differs from manifest.json)",
                dataset.display()
            ))
            .into());
        }
        let names = rubrics.keys().cloned().collect();
        let prompts = read_dataset(&dataset, &names)?;
        let responses = run.join(RESPONSES_FILE);
        let mut by_prompt: BTreeMap<u64, PromptCalls> = BTreeMap::new();
        let mut number = 0u64;
        for batch in read_responses(&responses, 8192)? {
            for row in batch? {
                number += 1;
                let matches = usize::try_from(row.prompt_index)
                    .ok()
                    .and_then(|index| prompts.get(index))
                    .is_some_and(|prompt| prompt.id == row.id);
                if !matches {
                    return Err(GradeRunError::Response {
                        path: responses.clone(),
                        row: number,
                        problem: format!(
                            "id {:?} has no matching prompt in {}",
                            row.id,
                            dataset.display()
                        ),
                    }
                    .into());
                }
                let calls = by_prompt.entry(row.prompt_index).or_default();
                match row.tier {
                    Tier::Small => calls.small.push(row),
                    Tier::Large if row.sample == 0 => calls.large = Some(row),
                    Tier::Verifier if row.sample == 0 => calls.verifier = Some(row),
                    Tier::Large | Tier::Verifier => {}
                }
            }
        }
        let has_verifier = by_prompt.values().any(|calls| calls.verifier.is_some());
        for (index, calls) in &by_prompt {
            if calls.small.is_empty()
                || calls.large.is_none()
                || (has_verifier && calls.verifier.is_none())
            {
                let id = &prompts[usize::try_from(*index).expect("checked above")].id;
                return Err(run_error(format!("prompt {id:?} lacks a tier's response")).into());
            }
        }
        if by_prompt.is_empty() {
            return Err(run_error("the run has no responses".to_owned()).into());
        }
        let failed_call = |calls: &PromptCalls| -> Option<(Tier, String)> {
            calls
                .small
                .first()
                .into_iter()
                .chain(&calls.large)
                .find(|row| !row.answered())
                .map(|row| {
                    (
                        row.tier,
                        row.error_kind.clone().unwrap_or_else(|| "error".to_owned()),
                    )
                })
        };
        let holes: Vec<u64> = by_prompt
            .iter()
            .filter(|(_, calls)| failed_call(calls).is_some())
            .map(|(index, _)| *index)
            .collect();
        if let Some(first) = holes.first() {
            if !allow_missing {
                let (tier, kind) = failed_call(&by_prompt[first]).expect("a hole");
                let id = &prompts[usize::try_from(*first).expect("checked above")].id;
                return Err(run_error(format!(
                    "{} prompts have no answer from a tier (first: id {id:?}, {} tier: {kind}); resend them with `routeval run --retry-errors`, or pass --allow-missing to grade without them",
                    holes.len(),
                    tier.name()
                ))
                .into());
            }
            for index in &holes {
                by_prompt.remove(index);
            }
            if by_prompt.is_empty() {
                return Err(run_error(
                    "every prompt has a failed call; nothing is left to grade".to_owned(),
                )
                .into());
            }
        }
        let source = if has_verifier {
            ScoreSource::Verifier
        } else if manifest.samples > 1 {
            ScoreSource::SelfConsistency
        } else {
            ScoreSource::None
        };
        Ok(Grading {
            config: PathBuf::from(&manifest.config.path),
            config_sha256: manifest.config.sha256,
            prompts,
            by_prompt,
            source,
            dropped: holes.len() as u64,
        })
    }

    /// The judge calls the rubrics' `llm_judge` checks need: one per check
    /// for each graded answer (the small tier's first sample, the large tier's).
    pub fn judge_requests(&self, rubrics: &BTreeMap<String, Rubric>) -> Vec<JudgeRequest> {
        let mut requests = Vec::new();
        for (index, calls) in &self.by_prompt {
            let prompt = &self.prompts[usize::try_from(*index).expect("checked on read")];
            let question = last_user_message(prompt);
            let rubric = &rubrics[&prompt.rubric];
            for row in calls.small.first().into_iter().chain(&calls.large) {
                let (None, Some(answer)) = (&row.error_kind, &row.text) else {
                    continue;
                };
                for (at, messages) in
                    rubric.judge_prompts(&question, answer, prompt.reference.as_deref())
                {
                    requests.push(JudgeRequest {
                        key: (*index, row.tier, at),
                        messages,
                    });
                }
            }
        }
        requests
    }

    /// Grades every prompt, with the judge's verdicts for `llm_judge` checks.
    pub fn finish(
        self,
        rubrics: &BTreeMap<String, Rubric>,
        judgements: &Judgements,
        out: &Path,
    ) -> GradedRun {
        let mut graded = Vec::with_capacity(self.by_prompt.len());
        for (index, calls) in self.by_prompt {
            let prompt = &self.prompts[usize::try_from(index).expect("checked on read")];
            let rubric = &rubrics[&prompt.rubric];
            graded.push(grade_prompt(prompt, calls, rubric, self.source, judgements));
        }
        let mut slices: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for row in &graded {
            let counts = slices.entry(row.slice.clone()).or_default();
            counts.0 += 1;
            counts.1 += u64::from(row.small_ok);
            counts.2 += u64::from(row.large_ok);
        }
        GradedRun {
            table: to_table(&graded, out),
            score_source: self.source,
            slices,
            dropped: self.dropped,
        }
    }
}

fn last_user_message(row: &DatasetRow) -> String {
    row.messages
        .iter()
        .rev()
        .find(|message| message.role == Role::User)
        .map(|message| message.content.clone())
        .unwrap_or_default()
}

fn to_table(rows: &[GradedPrompt], out: &Path) -> GradedTable {
    let reals = |value: &dyn Fn(&GradedPrompt) -> f64| {
        Float64Array::from_iter_values(rows.iter().map(value))
    };
    let optional = |index: usize| {
        Float64Array::from(
            rows.iter()
                .map(|row| row.latencies[index])
                .collect::<Vec<_>>(),
        )
    };
    let models = |index: usize| {
        StringArray::from(
            rows.iter()
                .map(|row| row.models[index].clone())
                .collect::<Vec<_>>(),
        )
    };
    let has_verifier = rows.iter().any(|row| row.models[2].is_some());
    let batch = GradedBatch {
        first_row: 0,
        lines: None,
        id: StringArray::from_iter_values(rows.iter().map(|row| row.id.as_str())),
        slice: StringArray::from_iter_values(rows.iter().map(|row| row.slice.as_str())),
        score: rows.iter().map(|row| row.score).collect(),
        small_ok: BooleanArray::from(rows.iter().map(|row| row.small_ok).collect::<Vec<_>>()),
        large_ok: BooleanArray::from(rows.iter().map(|row| row.large_ok).collect::<Vec<_>>()),
        cost_small: reals(&|row| row.costs[0]),
        cost_large: reals(&|row| row.costs[1]),
        cost_verifier: reals(&|row| row.costs[2]),
        cost_router: Float64Array::from(vec![0.0; rows.len()]),
        latencies: [
            Some(optional(0)),
            Some(optional(1)),
            Some(optional(2)),
            Some(optional(3)),
            has_verifier.then(|| optional(4)),
            None,
        ],
        models: [
            Some(models(0)),
            Some(models(1)),
            has_verifier.then(|| models(2)),
        ],
        audited: Default::default(),
        extra: vec![
            (
                Arc::new(Field::new("prompt", DataType::Utf8, false)),
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|row| row.prompt.as_str()),
                )),
            ),
            (
                Arc::new(Field::new("detail", DataType::Utf8, false)),
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|row| row.detail.as_str()),
                )),
            ),
        ],
    };
    GradedTable {
        path: out.to_owned(),
        batches: vec![batch],
        present: Present {
            latencies: [true, true, true, true, has_verifier, false],
            models: [true, true, has_verifier],
            audited: [false; 2],
        },
    }
}
