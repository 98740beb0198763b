//! A judge's answer read strictly: `{"pass", "score", "reason"}` for an
//! `llm_judge` check, `{"winner", "reason"}` for a pairwise one. An answer
//! that cannot be read is an error with the reason, never a pass.

use serde::Deserialize;

use super::checks::{Verdict, json_of};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Judgement {
    pass: bool,
    score: f64,
    reason: String,
}

/// The verdict a judge's answer states.
pub fn judgement_verdict(text: &str) -> Result<Verdict, String> {
    let judgement: Judgement = serde_json::from_str(json_of(text)).map_err(|error| {
        format!("the judge's answer is not {{\"pass\", \"score\", \"reason\"}}: {error}")
    })?;
    if !(0.0..=1.0).contains(&judgement.score) {
        return Err(format!(
            "the judge's score {} is not in [0, 1]",
            judgement.score
        ));
    }
    Ok(Verdict {
        pass: judgement.pass,
        score: judgement.score,
        detail: format!(
            "llm_judge: {} ({:.2}): {}",
            if judgement.pass { "pass" } else { "fail" },
            judgement.score,
            judgement.reason
        ),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PairwiseJudgement {
    winner: String,
    reason: String,
}

/// A pairwise judge's answer, `{"winner": "A" | "B" | "tie", "reason"}`,
/// as whether the graded answer (A when `graded_first`, else B) was not
/// worse than the other.
pub fn pairwise_judgement(text: &str, graded_first: bool) -> Result<Verdict, String> {
    let judgement: PairwiseJudgement = serde_json::from_str(json_of(text)).map_err(|error| {
        format!("the judge's answer is not {{\"winner\", \"reason\"}}: {error}")
    })?;
    let graded = if graded_first { "A" } else { "B" };
    let other = if graded_first { "B" } else { "A" };
    let winner = judgement.winner.trim();
    let pass = match winner {
        "tie" | "TIE" | "Tie" => true,
        won if won == graded => true,
        lost if lost == other => false,
        unknown => return Err(format!("the judge's winner {unknown:?} is not A, B or tie")),
    };
    Ok(Verdict {
        pass,
        score: if pass { 1.0 } else { 0.0 },
        detail: format!("pairwise: {winner}: {}", judgement.reason),
    })
}

/// A judge's answer read as the check at `at` asks for it.
pub fn verdict_for_check(at: &str, text: &str) -> Result<Verdict, String> {
    use super::checks::{PAIRWISE_FIRST, PAIRWISE_SECOND};
    if at.ends_with(PAIRWISE_FIRST) {
        pairwise_judgement(text, true)
    } else if at.ends_with(PAIRWISE_SECOND) {
        pairwise_judgement(text, false)
    } else {
        judgement_verdict(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judgements_are_read_strictly() {
        let verdict =
            judgement_verdict(r#"{"pass": true, "score": 0.9, "reason": "right"}"#).unwrap();
        assert!(verdict.pass);
        assert_eq!(verdict.score, 0.9);
        assert!(verdict.detail.contains("right"));
        let fenced = "```json\n{\"pass\": false, \"score\": 0.1, \"reason\": \"wrong\"}\n```";
        assert!(!judgement_verdict(fenced).unwrap().pass);
        for unreadable in [
            "PASS",
            r#"{"pass": "yes", "score": 0.9, "reason": "r"}"#,
            r#"{"pass": true, "score": 1.5, "reason": "r"}"#,
            r#"{"pass": true, "score": 0.9}"#,
            r#"{"pass": true, "score": 0.9, "reason": "r", "confidence": 1}"#,
        ] {
            assert!(judgement_verdict(unreadable).is_err(), "{unreadable}");
        }
    }
}
