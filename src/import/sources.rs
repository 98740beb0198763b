//! Readers of the public formats.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::rubric::Rubric;
use crate::schema::{CsvFile, ReadError, RowLocation};

use super::build::ImportedRow;
use super::prices::Prices;

/// Each line of a JSON-lines file as an object, with its line; errors are
/// led by `flag`, which named the file.
fn json_objects(path: &Path, flag: &str) -> anyhow::Result<Vec<(RowLocation, Value)>> {
    let mut objects = Vec::new();
    crate::schema::for_each_json_object(path, |location, object| {
        objects.push((location, Value::Object(object)));
        Ok::<(), ReadError>(())
    })
    .with_context(|| flag.to_owned())?;
    Ok(objects)
}

fn flag(path: &Path, line: u64, column: &str, text: &str) -> anyhow::Result<bool> {
    match text {
        "True" | "true" => Ok(true),
        "False" | "false" => Ok(false),
        other => bail!(
            "{}: line {line}, column \"{column}\": expected True or False, found {other:?}",
            path.display()
        ),
    }
}

/// RouteLLM's `mmlu_<subject>.csv` files in `directory`: the subject is the
/// slice, the two models' correctness columns the outcomes.
pub fn routellm_mmlu(
    directory: &Path,
    small_model: &str,
    large_model: &str,
    prices: &Prices,
) -> anyhow::Result<Vec<ImportedRow>> {
    let mut files: Vec<_> = std::fs::read_dir(directory)
        .with_context(|| format!("{}: cannot read (--dir)", directory.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|extension| extension == "csv")
                && path
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("mmlu_"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "{}: no mmlu_<subject>.csv files (--dir)",
            directory.display()
        );
    }
    let (cost_small, cost_large) = (
        prices.per_call(small_model, false)?,
        prices.per_call(large_model, true)?,
    );
    let mut rows = Vec::new();
    for path in files {
        let subject = path
            .file_stem()
            .expect("a file")
            .to_string_lossy()
            .trim_start_matches("mmlu_")
            .to_owned();
        let mut file = CsvFile::open(&path)?;
        let (prompt, small, large) = (
            file.column("prompt", "")?,
            file.column(small_model, "")?,
            file.column(large_model, "")?,
        );
        let mut record = csv::StringRecord::new();
        let mut index = 0usize;
        while let Some(line) = file.read(&mut record)? {
            rows.push(ImportedRow {
                id: format!("{subject}-{index}"),
                slice: subject.clone(),
                prompt: record[prompt].to_owned(),
                small_ok: flag(&path, line, small_model, &record[small])?,
                large_ok: flag(&path, line, large_model, &record[large])?,
                cost_small,
                cost_large,
            });
            index += 1;
        }
    }
    Ok(rows)
}

/// RouteLLM's GSM8K responses, regraded: each model's recorded answer is
/// graded by `rubric` against the reference answer in GSM8K's `test.jsonl`
/// (same order); the recorded correctness labels are not used.
pub fn routellm_gsm8k(
    responses: &Path,
    questions: &Path,
    rubric: &Rubric,
    small_model: &str,
    large_model: &str,
    prices: &Prices,
) -> anyhow::Result<Vec<ImportedRow>> {
    let references: Vec<(String, String)> = json_objects(questions, "--questions")?
        .into_iter()
        .map(|(location, value)| {
            let field = |name: &str| -> anyhow::Result<String> {
                value[name].as_str().map(str::to_owned).with_context(|| {
                    format!("{}: {location}: missing \"{name}\"", questions.display())
                })
            };
            Ok((field("question")?, field("answer")?))
        })
        .collect::<anyhow::Result<_>>()?;
    let (cost_small, cost_large) = (
        prices.per_call(small_model, false)?,
        prices.per_call(large_model, true)?,
    );
    let mut file = CsvFile::open(responses)?;
    let small_answer = file.column(&format!("{small_model}_response"), "")?;
    let large_answer = file.column(&format!("{large_model}_response"), "")?;
    let mut rows = Vec::new();
    let mut record = csv::StringRecord::new();
    while file.read(&mut record)?.is_some() {
        let index = rows.len();
        let Some((question, reference)) = references.get(index) else {
            bail!(
                "{}: {} rows, but {} has only {} questions",
                responses.display(),
                index + 1,
                questions.display(),
                references.len()
            );
        };
        rows.push(ImportedRow {
            id: format!("gsm8k-{index}"),
            slice: "gsm8k".to_owned(),
            prompt: question.clone(),
            small_ok: rubric.grade(&record[small_answer], Some(reference)).pass,
            large_ok: rubric.grade(&record[large_answer], Some(reference)).pass,
            cost_small,
            cost_large,
        });
    }
    if rows.len() != references.len() {
        bail!(
            "{}: {} rows for {} questions in {}",
            responses.display(),
            rows.len(),
            references.len(),
            questions.display()
        );
    }
    Ok(rows)
}

/// MT-Bench single-answer judgments: a judge score at or above `pass_score`
/// is acceptable; one row per question and turn, the category as slice.
pub fn mt_bench(
    judgments: &Path,
    questions: &Path,
    small_model: &str,
    large_model: &str,
    pass_score: f64,
    prices: &Prices,
) -> anyhow::Result<Vec<ImportedRow>> {
    let mut categories: BTreeMap<i64, (String, Vec<String>)> = BTreeMap::new();
    for (location, question) in json_objects(questions, "--questions")? {
        let id = question["question_id"]
            .as_i64()
            .with_context(|| format!("{}: {location}: no question_id", questions.display()))?;
        let category = question["category"]
            .as_str()
            .unwrap_or("uncategorised")
            .to_owned();
        let turns = question["turns"]
            .as_array()
            .map(|turns| {
                turns
                    .iter()
                    .filter_map(|turn| turn.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        categories.insert(id, (category, turns));
    }
    let mut scores: BTreeMap<(i64, i64), (Option<f64>, Option<f64>)> = BTreeMap::new();
    for (location, judgment) in json_objects(judgments, "--judgments")? {
        let (Some(id), Some(turn), Some(model), Some(score)) = (
            judgment["question_id"].as_i64(),
            judgment["turn"].as_i64(),
            judgment["model"].as_str(),
            judgment["score"].as_f64(),
        ) else {
            bail!(
                "{}: {location}: a judgment without question_id, turn, model or score",
                judgments.display()
            );
        };
        let entry = scores.entry((id, turn)).or_default();
        if model == small_model {
            entry.0 = Some(score);
        } else if model == large_model {
            entry.1 = Some(score);
        }
    }
    let (cost_small, cost_large) = (
        prices.per_call(small_model, false)?,
        prices.per_call(large_model, true)?,
    );
    let mut rows = Vec::new();
    for ((id, turn), (small, large)) in scores {
        let (Some(small), Some(large)) = (small, large) else {
            bail!(
                "{}: question {id} turn {turn} lacks a judgment of both models",
                judgments.display()
            );
        };
        let (category, turns) = categories.get(&id).with_context(|| {
            format!(
                "{}: question {id} is not in {}",
                judgments.display(),
                questions.display()
            )
        })?;
        rows.push(ImportedRow {
            id: format!("mt-bench-{id}-turn-{turn}"),
            slice: category.clone(),
            prompt: turns
                .get((turn - 1).max(0) as usize)
                .cloned()
                .unwrap_or_default(),
            small_ok: small >= pass_score,
            large_ok: large >= pass_score,
            cost_small,
            cost_large,
        });
    }
    Ok(rows)
}
