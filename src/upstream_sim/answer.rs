//! What a simulated model answers.

use std::collections::HashMap;

use crate::schema::{DatasetRow, Role};
use crate::stats::random::{finalise, fnv1a_parts, unit_of};

/// A simulated model: its name, the version it reports, and its skill.
#[derive(Debug, Clone, PartialEq)]
pub struct SimModel {
    pub name: String,
    pub version: String,
    pub skill: f64,
    /// Follows the verifier's and the judge's reply formats; other models
    /// answer those prompts as they answer anything they do not know.
    pub judges: bool,
}

impl SimModel {
    pub fn defaults() -> Vec<SimModel> {
        let model = |name: &str, skill| SimModel {
            name: name.to_owned(),
            version: format!("{name}-2026-11-01"),
            skill,
            judges: name == "sim-verifier",
        };
        vec![
            model("sim-small", 0.55),
            model("sim-large", 0.92),
            model("sim-verifier", 0.8),
            model("sim-mid", 0.75),
        ]
    }

    /// `models` with the skills `NAME=S` set: a known model's changed, an
    /// unknown name added as a model of its own.
    pub fn with_skills(
        mut models: Vec<SimModel>,
        skills: &[String],
    ) -> Result<Vec<SimModel>, String> {
        for given in skills {
            let (name, skill) = given.split_once('=').ok_or_else(|| {
                format!("--skill {given}: expected NAME=SKILL, such as sim-mid=0.75")
            })?;
            let name = name.trim();
            let skill: f64 = skill
                .trim()
                .parse()
                .ok()
                .filter(|skill: &f64| skill.is_finite())
                .ok_or_else(|| format!("--skill {given}: {skill:?} is not a number"))?;
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(format!("--skill {given}: {name:?} is not a model name"));
            }
            match models.iter_mut().find(|model| model.name == name) {
                Some(model) => model.skill = skill,
                None => models.push(SimModel {
                    name: name.to_owned(),
                    version: format!("{name}-2026-11-01"),
                    skill,
                    judges: false,
                }),
            }
        }
        Ok(models)
    }
}

/// The dataset's prompts, found by their last user message.
#[derive(Debug, Default)]
pub struct Knowledge {
    by_prompt: HashMap<String, (String, Option<String>, f64)>,
}

/// The last user message of a row: what the simulator knows it by.
fn asked(row: &DatasetRow) -> Option<&str> {
    row.messages
        .iter()
        .rev()
        .find(|message| message.role == Role::User)
        .map(|message| message.content.as_str())
}

impl Knowledge {
    /// Ids of rows that ask an earlier row's question but expect another
    /// answer: the simulator, which knows a prompt by its text, answers all
    /// of them as the last such row.
    pub fn ambiguous(rows: &[DatasetRow]) -> Vec<String> {
        let mut references: HashMap<&str, Option<&str>> = HashMap::new();
        let mut ambiguous = Vec::new();
        for row in rows {
            let Some(text) = asked(row) else { continue };
            match references.get(text) {
                Some(reference) if *reference != row.reference.as_deref() => {
                    ambiguous.push(row.id.clone());
                }
                Some(_) => {}
                None => {
                    references.insert(text, row.reference.as_deref());
                }
            }
        }
        ambiguous
    }

    pub fn new(rows: &[DatasetRow]) -> Knowledge {
        let by_prompt = rows
            .iter()
            .filter_map(|row| {
                let last = asked(row)?;
                let difficulty = row.metadata.get("difficulty").and_then(|value| {
                    value
                        .as_f64()
                        .or_else(|| value.as_str().and_then(|text| text.parse().ok()))
                });
                Some((
                    last.to_owned(),
                    (
                        row.id.clone(),
                        row.reference.clone(),
                        difficulty.unwrap_or(0.5),
                    ),
                ))
            })
            .collect();
        Knowledge { by_prompt }
    }
}

fn unit(parts: &[&[u8]]) -> f64 {
    // SplitMix64's finaliser spreads FNV's low-entropy high bits.
    unit_of(finalise(fnv1a_parts(parts)))
}

/// A wrong answer shaped like the reference, so its rubric fails it.
fn wrong(reference: &str) -> String {
    let trimmed = reference.trim();
    if let Ok(number) = trimmed.parse::<f64>() {
        return format!("{}", number + 1.0);
    }
    if trimmed.len() == 1 && trimmed.chars().all(|c| c.is_ascii_uppercase()) {
        let letter = trimmed.as_bytes()[0];
        return char::from(b'A' + (letter - b'A' + 1) % 4).to_string();
    }
    match trimmed.to_ascii_lowercase().as_str() {
        "yes" => return "no".to_owned(),
        "no" => return "yes".to_owned(),
        _ => {}
    }
    if let Ok(serde_json::Value::Object(mut object)) =
        serde_json::from_str::<serde_json::Value>(trimmed)
        && let Some(status) = object.get_mut("status")
    {
        *status = serde_json::Value::String("unknown".to_owned());
        return serde_json::Value::Object(object).to_string();
    }
    "I am not sure how to help with that.".to_owned()
}

/// The text between `open` and `close` in `text`.
fn tagged<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = start + text[start..].find(close)?;
    Some(text[start..end].trim())
}

/// A verifier's judgement of the answer in a prompt that gives the question
/// and the answer between `<question>` and `<answer>` tags (as the shipped
/// verifier template does): `{"verdict", "score", "reason"}`, where score is
/// the probability the answer is wrong. With a `<reference>` too (the
/// shipped judge template), a judge's `{"pass", "score", "reason"}`. Better verifiers separate right from
/// wrong answers more sharply; harder questions look more doubtful to all.
/// None when the prompt is not a verification request.
pub fn verdict_for(
    knowledge: &Knowledge,
    model: &SimModel,
    prompt: &str,
    seed: u64,
) -> Option<(String, Option<String>)> {
    if !model.judges {
        return None;
    }
    let question = tagged(prompt, "<question>", "</question>")?;
    if let (Some(first), Some(second)) = (
        tagged(prompt, "<answer_a>", "</answer_a>"),
        tagged(prompt, "<answer_b>", "</answer_b>"),
    ) {
        return Some(pairwise_for(
            knowledge, model, question, first, second, seed,
        ));
    }
    let answer = tagged(prompt, "<answer>", "</answer>")?;
    let Some((id, reference, difficulty)) = knowledge.by_prompt.get(question) else {
        return Some((
            r#"{"verdict": "reject", "score": 0.5, "reason": "unknown question"}"#.to_owned(),
            None,
        ));
    };
    let noise = unit(&[
        model.name.as_bytes(),
        id.as_bytes(),
        answer.as_bytes(),
        &seed.to_le_bytes(),
    ]);
    // A judge's prompt also gives the reference: it grades against that and
    // errs a quarter as often as its skill falls short of 1.
    if let Some(given) = tagged(prompt, "<reference>", "</reference>") {
        let same = |text: &str| {
            text.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let right = same(given) == same(answer);
        let pass = right != (noise < (1.0 - model.skill) / 4.0);
        let score = if pass {
            0.75 + 0.25 * noise
        } else {
            0.25 * noise
        };
        let reason = if pass {
            "the answer agrees with the reference"
        } else {
            "the answer does not agree with the reference"
        };
        return Some((
            format!(r#"{{"pass": {pass}, "score": {score:.4}, "reason": "{reason}"}}"#),
            Some(id.clone()),
        ));
    }
    let right = reference
        .as_deref()
        .is_none_or(|reference| reference.trim() == answer);
    let signal = if right { -3.0 } else { 3.0 };
    let z = signal * model.skill + 2.0 * (difficulty - 0.5) + 4.0 * (noise - 0.5);
    let reject = 1.0 / (1.0 + (-z).exp());
    let (verdict, reason) = if reject >= 0.5 {
        ("reject", "the answer does not look right")
    } else {
        ("accept", "the answer looks right")
    };
    Some((
        format!(r#"{{"verdict": "{verdict}", "score": {reject:.4}, "reason": "{reason}"}}"#),
        Some(id.clone()),
    ))
}

/// How often the simulated pairwise judge names the first answer whatever
/// the answers say: the position bias MT-Bench measured in LLM judges.
pub const PAIRWISE_POSITION_BIAS: f64 = 0.3;

/// A pairwise judge's `{"winner", "reason"}`: the answer that agrees with
/// the question's reference wins, both or neither tie, except that a share
/// [`PAIRWISE_POSITION_BIAS`] of judgements name answer A regardless.
fn pairwise_for(
    knowledge: &Knowledge,
    model: &SimModel,
    question: &str,
    first: &str,
    second: &str,
    seed: u64,
) -> (String, Option<String>) {
    let Some((id, reference, _)) = knowledge.by_prompt.get(question) else {
        return (
            r#"{"winner": "tie", "reason": "unknown question"}"#.to_owned(),
            None,
        );
    };
    let noise = unit(&[
        model.name.as_bytes(),
        id.as_bytes(),
        first.as_bytes(),
        second.as_bytes(),
        &seed.to_le_bytes(),
    ]);
    let right = |answer: &str| {
        reference
            .as_deref()
            .is_some_and(|reference| reference.trim() == answer.trim())
    };
    let winner = if noise < PAIRWISE_POSITION_BIAS {
        "A"
    } else {
        match (right(first), right(second)) {
            (true, false) => "A",
            (false, true) => "B",
            _ => "tie",
        }
    };
    (
        format!(r#"{{"winner": "{winner}", "reason": "compared with what the question needs"}}"#),
        Some(id.clone()),
    )
}

/// The answer `model` gives to `prompt` for request seed `seed`, whether it
/// is right, and the dataset id of the prompt, if known.
pub fn answer_for(
    knowledge: &Knowledge,
    model: &SimModel,
    prompt: &str,
    seed: u64,
    steepness: f64,
) -> (String, bool, Option<String>) {
    let Some((id, reference, difficulty)) = knowledge.by_prompt.get(prompt) else {
        return ("I do not know.".to_owned(), false, None);
    };
    let Some(reference) = reference else {
        return ("Here is my answer.".to_owned(), true, Some(id.clone()));
    };
    let chance = 1.0 / (1.0 + (-(model.skill - difficulty) / steepness).exp());
    let right = unit(&[model.name.as_bytes(), id.as_bytes(), &seed.to_le_bytes()]) < chance;
    let text = if right {
        reference.clone()
    } else {
        wrong(reference)
    };
    (text, right, Some(id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `question 0` … `question {count − 1}`, each of difficulty 0.5 with reference 42.
    fn questions(count: u64) -> Vec<DatasetRow> {
        (0..count)
            .map(|index| DatasetRow {
                id: format!("p{index}"),
                slice: "s".to_owned(),
                messages: vec![crate::schema::Message {
                    role: Role::User,
                    content: format!("question {index}"),
                }],
                reference: Some("42".to_owned()),
                rubric: "exact".to_owned(),
                metadata: serde_json::json!({"difficulty": 0.5})
                    .as_object()
                    .unwrap()
                    .clone(),
                location: crate::schema::RowLocation::Line(index + 1),
            })
            .collect()
    }

    #[test]
    fn the_verifier_scores_wrong_answers_higher() {
        let knowledge = Knowledge::new(&questions(500));
        let models = SimModel::defaults();
        let verifier = models
            .iter()
            .find(|model| model.name == "sim-verifier")
            .unwrap();
        let mean_score = |answer: &str| {
            (0..500)
                .map(|index| {
                    let prompt = format!(
                        "Judge.\n<question>\nquestion {index}\n</question>\n<answer>\n{answer}\n</answer>"
                    );
                    let (text, id) = verdict_for(&knowledge, verifier, &prompt, 0).unwrap();
                    assert_eq!(id, Some(format!("p{index}")));
                    crate::rubric::verdict_score(&text, None).unwrap()
                })
                .sum::<f64>()
                / 500.0
        };
        let (right, wrong) = (mean_score("42"), mean_score("43"));
        assert!(right < 0.3 && wrong > 0.7, "right {right}, wrong {wrong}");
        assert_eq!(verdict_for(&knowledge, verifier, "no tags here", 0), None);
        let tagged_prompt = "<question>question 1</question><answer>42</answer>";
        assert_eq!(
            verdict_for(&knowledge, &SimModel::defaults()[0], tagged_prompt, 0),
            None
        );
        let passes = |answer: &str| {
            (0..500)
                .filter(|index| {
                    let prompt = format!(
                        "<question>question {index}</question><answer>{answer}</answer><reference> 42 </reference>"
                    );
                    let (text, _) = verdict_for(&knowledge, verifier, &prompt, 0).unwrap();
                    crate::rubric::judgement_verdict(&text).unwrap().pass
                })
                .count()
        };
        let (right, wrong) = (passes("42"), passes("43"));
        assert!(right > 450 && wrong < 50, "right {right}, wrong {wrong}");
    }

    #[test]
    fn wrong_answers_keep_the_reference_shape() {
        assert_eq!(wrong("5"), "6");
        assert_eq!(wrong("D"), "A");
        assert_eq!(wrong("yes"), "no");
        assert_eq!(
            wrong(r#"{"order_id": "ORD-1", "status": "shipped"}"#),
            r#"{"order_id":"ORD-1","status":"unknown"}"#
        );
        assert_eq!(
            wrong("Use the reset link."),
            "I am not sure how to help with that."
        );
    }

    #[test]
    fn skills_change_a_model_or_add_one() {
        let models = SimModel::with_skills(
            SimModel::defaults(),
            &["sim-mid=0.7".to_owned(), "sim-xl=0.97".to_owned()],
        )
        .unwrap();
        let skill = |name: &str| {
            models
                .iter()
                .find(|model| model.name == name)
                .map(|model| model.skill)
        };
        assert_eq!(skill("sim-mid"), Some(0.7));
        assert_eq!(skill("sim-xl"), Some(0.97));
        assert_eq!(skill("sim-large"), Some(0.92));
        for (bad, expected) in [
            ("sim-mid", "expected NAME=SKILL"),
            ("sim-mid=high", "\"high\" is not a number"),
            ("a b=0.5", "is not a model name"),
        ] {
            let error = SimModel::with_skills(SimModel::defaults(), &[bad.to_owned()]).unwrap_err();
            assert!(error.starts_with(&format!("--skill {bad}: ")), "{error}");
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn skill_and_difficulty_set_the_rate_of_right_answers() {
        let knowledge = Knowledge::new(&questions(4000));
        let rate = |skill: f64| {
            let model = SimModel {
                name: "m".to_owned(),
                version: "m-1".to_owned(),
                skill,
                judges: false,
            };
            (0..4000)
                .filter(|index| {
                    answer_for(&knowledge, &model, &format!("question {index}"), 0, 0.05).1
                })
                .count() as f64
                / 4000.0
        };
        let expected = |skill: f64| 1.0 / (1.0 + (-(skill - 0.5) / 0.05f64).exp());
        for skill in [0.4, 0.5, 0.6] {
            assert!(
                (rate(skill) - expected(skill)).abs() < 0.03,
                "skill {skill}: {}",
                rate(skill)
            );
        }
        let model = &SimModel::defaults()[0];
        assert_eq!(
            answer_for(&knowledge, model, "question 7", 3, 0.05),
            answer_for(&knowledge, model, "question 7", 3, 0.05)
        );
        assert_eq!(
            answer_for(&knowledge, model, "not in the data", 0, 0.05).2,
            None
        );
    }

    #[test]
    fn a_prompt_asked_twice_with_two_references_is_ambiguous() {
        let mut rows = questions(4);
        assert!(Knowledge::ambiguous(&rows).is_empty());
        // The same question and answer under another id is fine.
        let mut copy = rows[1].clone();
        copy.id = "copy".to_owned();
        rows.push(copy);
        assert!(Knowledge::ambiguous(&rows).is_empty());
        let mut other = rows[2].clone();
        other.id = "other".to_owned();
        other.reference = Some("7".to_owned());
        rows.push(other);
        assert_eq!(Knowledge::ambiguous(&rows), ["other"]);
    }
}
