//! `routeval grade --run`: a run's responses table, graded by each prompt's
//! rubric, as the graded-results table `calibrate` reads. One row per
//! prompt: whether each tier's answer was acceptable, what each tier cost
//! and how long it took, the reject score of each cascade stage (the
//! verifier's, or self-consistency over the first tier's samples), and what
//! each rubric said. A run of more than two tiers writes each tier's
//! columns under its name and the tiers in the file's metadata.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::rubric::{Rubric, Verdict};
use crate::rubric::{TokenChoice, self_consistency, verdict_score};
use crate::schema::GradedTable;
use crate::schema::{
    CallTier, MANIFEST_FILE, Manifest, RESPONSES_FILE, ResponseRow, read_responses,
};
use crate::schema::{DatasetRow, Message, Role, read_dataset};

use super::graded_table::{GradedPrompt, to_table};

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
    /// The run's tiers, cheapest first.
    pub tiers: Vec<String>,
    /// Per slice: prompts, and the acceptable answers of each tier.
    pub slices: BTreeMap<String, (u64, Vec<u64>)>,
    /// Prompts left out because a tier's call failed (`--allow-missing`).
    pub dropped: u64,
    /// Pairwise comparisons whose two orders disagreed, counted as ties.
    pub pairwise_disagreements: u64,
}

impl GradedRun {
    /// Per slice, its prompts and each tier's share of acceptable answers,
    /// as a terminal table.
    pub fn slice_table(&self) -> String {
        let rows = self.slices.iter().map(|(slice, (prompts, ok))| {
            let shares = ok
                .iter()
                .map(|count| format!("{:.3}", *count as f64 / *prompts as f64));
            [slice.clone(), prompts.to_string()]
                .into_iter()
                .chain(shares)
                .collect::<Vec<_>>()
        });
        let headers: Vec<String> = ["slice".to_owned(), "prompts".to_owned()]
            .into_iter()
            .chain(self.tiers.iter().map(|tier| format!("{tier} ok")))
            .collect();
        crate::terminal::table(headers, rows)
    }
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

/// The run's calls by role: its answering tiers, cheapest first, and the
/// verifier of each non-final one.
#[derive(Debug, Clone)]
struct CallPlan {
    tiers: Vec<CallTier>,
    verifiers: Vec<CallTier>,
}

impl CallPlan {
    fn new(order: &[String], run: &Path) -> Result<CallPlan, GradeRunError> {
        let tiers = order
            .iter()
            .map(|name| {
                CallTier::parse(name).ok_or_else(|| GradeRunError::Run {
                    path: run.to_owned(),
                    problem: format!("manifest.json: tier_order: {name:?} is not a tier name"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let verifiers = tiers[..tiers.len().saturating_sub(1)]
            .iter()
            .enumerate()
            .map(|(stage, tier)| CallTier::verifier_of(stage, *tier))
            .collect();
        Ok(CallPlan { tiers, verifiers })
    }

    fn calls(&self) -> PromptCalls {
        PromptCalls {
            answers: vec![Vec::new(); self.tiers.len()],
            verifiers: vec![None; self.verifiers.len()],
        }
    }
}

/// The rows of one prompt.
#[derive(Debug, Default)]
struct PromptCalls {
    /// Per tier: the first tier's every sample (self-consistency reads
    /// them), the others' first.
    answers: Vec<Vec<ResponseRow>>,
    /// Per non-final tier: its verifier's judgement of the first sample.
    verifiers: Vec<Option<ResponseRow>>,
}

impl PromptCalls {
    /// The answer each tier is graded on.
    fn graded_answers(&self) -> impl Iterator<Item = Option<&ResponseRow>> {
        self.answers.iter().map(|samples| samples.first())
    }
}

/// Whether `row`'s answer passed its rubric; `is_base`: it is the
/// strongest tier's, which pairwise checks compare the others with.
fn judged(
    row: &ResponseRow,
    rubric: &Rubric,
    reference: Option<&str>,
    judgements: &Judgements,
    is_base: bool,
) -> (bool, String) {
    match (&row.error_kind, &row.text) {
        (None, Some(text)) => {
            let lookup = |at: &str| {
                if let Some(check) = at.strip_suffix(crate::rubric::PAIRWISE_BASE) {
                    return is_base.then(|| crate::rubric::Verdict {
                        pass: true,
                        score: 1.0,
                        detail: format!(
                            "llm_pairwise: {check}: the strongest tier's answer is the base"
                        ),
                    });
                }
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
    plan: &CallPlan,
    calls: PromptCalls,
    rubric: &Rubric,
    source: ScoreSource,
    judgements: &Judgements,
) -> GradedPrompt {
    let reference = row.reference.as_deref();
    let mut ok = Vec::with_capacity(plan.tiers.len());
    let mut detail = Vec::with_capacity(plan.tiers.len() + 1);
    let last = plan.tiers.len() - 1;
    for (position, (tier, answer)) in plan.tiers.iter().zip(calls.graded_answers()).enumerate() {
        let (pass, why) = answer.map_or((false, "no row".to_owned()), |answer| {
            judged(answer, rubric, reference, judgements, position == last)
        });
        ok.push(pass);
        detail.push(format!("{tier}: {why}"));
    }
    let stages = plan.verifiers.len();
    let mut scores = vec![None; stages];
    let mut verifier_costs = vec![0.0; stages];
    match source {
        ScoreSource::Verifier => {
            for (stage, verifier) in calls.verifiers.iter().enumerate() {
                let verifier = verifier
                    .as_ref()
                    .expect("checked: every prompt has its verifier rows");
                let (score, why) = reject_score(verifier);
                scores[stage] = Some(score);
                verifier_costs[stage] = verifier.cost_usd.unwrap_or_default();
                if stages > 1 {
                    detail.push(format!("{}: {why}", plan.tiers[stage]));
                } else {
                    detail.push(why);
                }
            }
        }
        ScoreSource::SelfConsistency => {
            let samples = &calls.answers[0];
            let texts: Vec<&str> = samples
                .iter()
                .filter_map(|call| call.text.as_deref())
                .collect();
            let score = if texts.len() == samples.len() {
                self_consistency(&texts, normalised).unwrap_or(1.0)
            } else {
                1.0
            };
            scores[0] = Some(score);
            verifier_costs[0] = samples
                .iter()
                .skip(1)
                .filter_map(|call| call.cost_usd)
                .sum();
            detail.push(format!(
                "self-consistency {score:.3} over {} samples",
                samples.len()
            ));
        }
        ScoreSource::None => {}
    }
    let answers: Vec<Option<&ResponseRow>> = calls.graded_answers().collect();
    let first_verifier = calls.verifiers.first().and_then(Option::as_ref);
    GradedPrompt {
        id: row.id.clone(),
        slice: row.slice.clone(),
        prompt: last_user_message(row),
        scores,
        ok,
        costs: answers
            .iter()
            .map(|answer| {
                answer
                    .and_then(|answer| answer.cost_usd)
                    .unwrap_or_default()
            })
            .collect(),
        verifier_costs,
        latencies: answers
            .iter()
            .map(|answer| {
                (
                    answer.and_then(|answer| answer.total_ms),
                    answer.and_then(|answer| answer.ttft_ms),
                )
            })
            .collect(),
        verifier_ms: first_verifier.and_then(|verifier| verifier.total_ms),
        models: answers
            .iter()
            .map(|answer| answer.and_then(|answer| answer.model_version.clone()))
            .collect(),
        verifier_model: first_verifier.and_then(|verifier| verifier.model_version.clone()),
        detail: detail.join("; "),
    }
}

/// Verdicts of `llm_judge` checks by (prompt, tier, where the check sits).
pub type Judgements = HashMap<JudgeKey, Verdict>;

/// One `llm_judge` check of one answer: the prompt's row, the tier and the
/// check's place in the rubric.
pub type JudgeKey = (u64, CallTier, String);

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
    plan: CallPlan,
    by_prompt: BTreeMap<u64, PromptCalls>,
    source: ScoreSource,
    dropped: u64,
}

impl Grading {
    /// Reads the run in directory `run`. `dataset` overrides the path the
    /// manifest recorded; either way its digest must match. A prompt whose
    /// call to a tier failed has no answer to grade: grading it as
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
        if crate::digest::sha256_file(&dataset)? != manifest.dataset.sha256 {
            return Err(run_error(format!(
                "the dataset {} changed since the run (sha256 differs from manifest.json)",
                dataset.display()
            ))
            .into());
        }
        let plan = CallPlan::new(&manifest.tier_order, run)?;
        let names = rubrics.keys().cloned().collect();
        let prompts = read_dataset(&dataset, &names)?;
        let mut by_prompt = calls_by_prompt(run, &plan, &prompts, &dataset, &manifest)?;
        let has_verifier = by_prompt
            .values()
            .any(|calls| calls.verifiers.iter().any(Option::is_some));
        for (index, calls) in &by_prompt {
            if calls.answers.iter().any(Vec::is_empty)
                || (has_verifier && calls.verifiers.iter().any(Option::is_none))
            {
                let id = &prompts[usize::try_from(*index).expect("checked above")].id;
                return Err(run_error(format!("prompt {id:?} lacks a tier's response")).into());
            }
        }
        if by_prompt.is_empty() {
            return Err(run_error("the run has no responses".to_owned()).into());
        }
        let failed_call = |calls: &PromptCalls| -> Option<(CallTier, String)> {
            calls
                .graded_answers()
                .flatten()
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
            plan,
            by_prompt,
            source,
            dropped: holes.len() as u64,
        })
    }

    /// The judge calls the rubrics' `llm_judge` checks need: one per check
    /// for each graded answer (each tier's first sample).
    pub fn judge_requests(&self, rubrics: &BTreeMap<String, Rubric>) -> Vec<JudgeRequest> {
        let mut requests = Vec::new();
        for (index, calls) in &self.by_prompt {
            let prompt = &self.prompts[usize::try_from(*index).expect("checked on read")];
            let question = last_user_message(prompt);
            let rubric = &rubrics[&prompt.rubric];
            // Pairwise checks compare each answer with the strongest tier's.
            let strongest = calls
                .answers
                .last()
                .and_then(|samples| samples.first())
                .filter(|row| row.answered())
                .and_then(|row| row.text.clone());
            let last = calls.answers.len() - 1;
            for (position, row) in calls.graded_answers().enumerate() {
                let Some(row) = row else { continue };
                let (None, Some(answer)) = (&row.error_kind, &row.text) else {
                    continue;
                };
                let base = if position == last {
                    None
                } else {
                    strongest.as_deref()
                };
                for (at, messages) in rubric.judge_prompts_against(
                    &question,
                    answer,
                    prompt.reference.as_deref(),
                    base,
                ) {
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
            graded.push(grade_prompt(
                prompt,
                &self.plan,
                calls,
                rubric,
                self.source,
                judgements,
            ));
        }
        let k = self.plan.tiers.len();
        let mut slices: BTreeMap<String, (u64, Vec<u64>)> = BTreeMap::new();
        for row in &graded {
            let (prompts, ok) = slices
                .entry(row.slice.clone())
                .or_insert_with(|| (0, vec![0; k]));
            *prompts += 1;
            for (count, pass) in ok.iter_mut().zip(&row.ok) {
                *count += u64::from(*pass);
            }
        }
        let tiers: Vec<String> = self
            .plan
            .tiers
            .iter()
            .map(|tier| tier.name().to_owned())
            .collect();
        let pairwise_disagreements = graded
            .iter()
            .map(|row| row.detail.matches("the orders disagree").count() as u64)
            .sum();
        GradedRun {
            pairwise_disagreements,
            table: to_table(&graded, &tiers, out),
            score_source: self.source,
            tiers,
            slices,
            dropped: self.dropped,
        }
    }
}

/// The run's responses, each under its prompt: every tier's answers and
/// every stage's verifier call; refused naming the row when one matches no
/// prompt of `dataset` or no tier of the run.
fn calls_by_prompt(
    run: &Path,
    plan: &CallPlan,
    prompts: &[DatasetRow],
    dataset: &Path,
    manifest: &Manifest,
) -> anyhow::Result<BTreeMap<u64, PromptCalls>> {
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
            let calls = by_prompt
                .entry(row.prompt_index)
                .or_insert_with(|| plan.calls());
            if let Some(position) = plan.tiers.iter().position(|tier| *tier == row.tier) {
                if position == 0 || row.sample == 0 {
                    calls.answers[position].push(row);
                }
            } else if let Some(stage) = plan.verifiers.iter().position(|tier| *tier == row.tier) {
                if row.sample == 0 {
                    calls.verifiers[stage] = Some(row);
                }
            } else {
                return Err(GradeRunError::Response {
                    path: responses.clone(),
                    row: number,
                    problem: format!(
                        "tier {:?} is not one of the run's ({} in manifest.json, and their verifiers)",
                        row.tier.name(),
                        manifest.tier_order.join(", ")
                    ),
                }
                .into());
            }
        }
    }
    Ok(by_prompt)
}

fn last_user_message(row: &DatasetRow) -> String {
    row.messages
        .iter()
        .rev()
        .find(|message| message.role == Role::User)
        .map(|message| message.content.clone())
        .unwrap_or_default()
}
