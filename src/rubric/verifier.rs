//! Reject scores for cascades: what the threshold of a cascade compares.
//! Either the verifier's verdict (the probability it gave "reject", from the
//! verdict token's log-probabilities when the endpoint returns them, else the
//! score it states), or self-consistency (1 − the share of the majority
//! answer among k samples of the small tier).

use std::collections::HashMap;

use serde::Deserialize;

/// One alternative the endpoint reported for the verdict token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenChoice {
    pub token: String,
    pub logprob: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatedVerdict {
    verdict: String,
    #[serde(default)]
    score: Option<f64>,
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "verifiers explain themselves; the reason is not scored"
    )]
    reason: Option<String>,
}

/// Whether a token spells the start of a verdict.
fn verdict_of(token: &str) -> Option<bool> {
    let word = token
        .trim()
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_ascii_lowercase();
    if word.is_empty() {
        return None;
    }
    if "reject".starts_with(&word) || word.starts_with("reject") {
        Some(true)
    } else if "accept".starts_with(&word) || word.starts_with("accept") {
        Some(false)
    } else {
        None
    }
}

/// The probability the verifier rejects the answer. `verdict` is its text:
/// `{"verdict": "accept"|"reject", "score": p}` (score: probability of
/// reject) or a text starting with ACCEPT or REJECT. An answer that states no
/// verdict is an error, never an accept.
pub fn verdict_score(verdict: &str, alternatives: Option<&[TokenChoice]>) -> Result<f64, String> {
    if let Some(alternatives) = alternatives {
        let (mut accept, mut reject) = (0.0f64, 0.0f64);
        for choice in alternatives {
            match verdict_of(&choice.token) {
                Some(true) => reject += choice.logprob.exp(),
                Some(false) => accept += choice.logprob.exp(),
                None => {}
            }
        }
        if accept + reject > 0.0 {
            return Ok(reject / (accept + reject));
        }
    }
    let text = verdict.trim();
    if text.starts_with('{') {
        let stated: StatedVerdict = serde_json::from_str(text)
            .map_err(|error| format!("verdict is not the expected JSON: {error}"))?;
        let rejects = verdict_of(&stated.verdict)
            .ok_or_else(|| format!("verdict {:?} is neither accept nor reject", stated.verdict))?;
        return match stated.score {
            Some(score) if (0.0..=1.0).contains(&score) => Ok(score),
            Some(score) => Err(format!("score {score} is not a probability")),
            None => Ok(if rejects { 1.0 } else { 0.0 }),
        };
    }
    let first = text.split_whitespace().next().unwrap_or_default();
    match verdict_of(first) {
        Some(rejects) if first.len() >= 6 => Ok(if rejects { 1.0 } else { 0.0 }),
        _ => Err(format!(
            "no verdict in {:?}",
            text.chars().take(60).collect::<String>()
        )),
    }
}

/// 1 − the share of the most common final answer among `answers`; answers
/// with no final answer each count on their own.
pub fn self_consistency(
    answers: &[&str],
    final_answer: impl Fn(&str) -> Option<String>,
) -> Option<f64> {
    if answers.is_empty() {
        return None;
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut majority = 0;
    for answer in answers {
        if let Some(value) = final_answer(answer) {
            let count = counts.entry(value).or_default();
            *count += 1;
            majority = majority.max(*count);
        }
    }
    Some(1.0 - majority.max(1) as f64 / answers.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rubric::final_number;

    #[test]
    fn logprobs_give_the_probability_of_reject() {
        let choices = [
            TokenChoice {
                token: "REJECT".into(),
                logprob: (0.3f64).ln(),
            },
            TokenChoice {
                token: " accept".into(),
                logprob: (0.6f64).ln(),
            },
            TokenChoice {
                token: "maybe".into(),
                logprob: (0.1f64).ln(),
            },
        ];
        assert!((verdict_score("ACCEPT", Some(&choices)).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Tokenisers split words: "Rej" starts "reject".
        let split = [TokenChoice {
            token: "Rej".into(),
            logprob: 0.0,
        }];
        assert_eq!(verdict_score("REJECT", Some(&split)).unwrap(), 1.0);
    }

    #[test]
    fn stated_verdicts_are_parsed_strictly() {
        assert_eq!(
            verdict_score(
                r#"{"verdict": "reject", "score": 0.8, "reason": "wrong total"}"#,
                None
            ),
            Ok(0.8)
        );
        assert_eq!(verdict_score(r#"{"verdict": "accept"}"#, None), Ok(0.0));
        assert_eq!(verdict_score("REJECT: the total is wrong", None), Ok(1.0));
        assert_eq!(verdict_score("accept", None), Ok(0.0));
        assert!(verdict_score("Looks fine to me", None).is_err());
        assert!(verdict_score(r#"{"verdict": "pass"}"#, None).is_err());
        assert!(verdict_score(r#"{"verdict": "reject", "score": 3}"#, None).is_err());
        assert!(verdict_score(r#"{"verdict": "reject", "confidence": 1}"#, None).is_err());
        assert!(verdict_score("", Some(&[])).is_err());
    }

    #[test]
    fn self_consistency_is_one_minus_the_majority_share() {
        let number = |answer: &str| final_number(answer, Some("####"));
        assert_eq!(
            self_consistency(&["#### 4", "#### 4", "#### 4", "#### 5"], number),
            Some(0.25)
        );
        assert_eq!(self_consistency(&["#### 4", "#### 4"], number), Some(0.0));
        // Answers without a number never form a majority.
        assert_eq!(
            self_consistency(&["no idea", "none", "#### 7", "unsure"], number),
            Some(0.75)
        );
        assert_eq!(self_consistency(&["no idea"], number), Some(0.0));
        assert_eq!(self_consistency(&[], number), None);
    }
}
