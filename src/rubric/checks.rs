//! Rubrics: named, reviewable rules for whether an answer is acceptable.
//! Each `rubrics/*.toml` file holds one (strict: an unknown key is an error
//! that names it), compiled once at load so a bad pattern is reported before
//! anything is graded.

use std::path::PathBuf;

use regex::Regex;

use super::extract::{ChoiceFinder, final_number, value};
use super::spec::NumberComparison;
use crate::rubric::PromptTemplate;
use crate::schema::Message;

/// The judgements of a prompt's `llm_judge` checks, by where they sit.
pub type Judged<'a> = &'a dyn Fn(&str) -> Option<Verdict>;

/// Where a pairwise check's judgement with the graded answer first, and
/// second, is kept; and where the base's own pass is looked up.
pub const PAIRWISE_FIRST: &str = "#first";
pub const PAIRWISE_SECOND: &str = "#second";
pub const PAIRWISE_BASE: &str = "#base";

/// Whether an answer passed, a score in [0, 1], and which check decided and
/// why.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub pass: bool,
    pub score: f64,
    pub detail: String,
}

impl Verdict {
    fn of(pass: bool, detail: String) -> Verdict {
        Verdict {
            pass,
            score: if pass { 1.0 } else { 0.0 },
            detail,
        }
    }
}

/// A check ready to grade.
#[derive(Debug, Clone)]
pub(super) enum Check {
    Exact {
        case_sensitive: bool,
    },
    Choice {
        finder: ChoiceFinder,
    },
    Numeric {
        tolerance: f64,
        relative_tolerance: f64,
        marker: Option<String>,
        compare: NumberComparison,
    },
    Regex {
        regex: Regex,
    },
    JsonSchema {
        validator: std::sync::Arc<jsonschema::Validator>,
    },
    Contains {
        text: String,
        case_sensitive: bool,
        negate: bool,
    },
    Judge {
        /// Where the check sits in the rubric, which names its judgement.
        at: String,
        template: std::sync::Arc<PromptTemplate>,
        criteria: String,
    },
    Pairwise {
        at: String,
        template: std::sync::Arc<PromptTemplate>,
        criteria: String,
    },
    All(Vec<Check>),
    Any(Vec<Check>),
    Weighted {
        checks: Vec<(f64, Check)>,
        threshold: f64,
    },
}

/// A named, compiled rubric.
#[derive(Debug, Clone)]
pub struct Rubric {
    pub name: String,
    pub description: Option<String>,
    pub path: PathBuf,
    pub(super) check: Check,
}

#[derive(Debug, thiserror::Error)]
pub enum RubricError {
    /// Rubrics are read from files only, never from the binary: a grade
    /// must rest on rubrics the user can read, change and pin.
    #[error(
        "{}: no such directory (--rubrics, ./rubrics by default; `routeval demo` writes the rubrics it ships under its --out, in inputs/rubrics)",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{}: rubric \"{name}\" is also defined in {}", path.display(), other.display())]
    Duplicate {
        path: PathBuf,
        name: String,
        other: PathBuf,
    },
}

/// The JSON in an answer: the whole text, or the body of its first fenced
/// code block.
pub(super) fn json_of(answer: &str) -> &str {
    let trimmed = answer.trim();
    let Some(start) = trimmed.find("```") else {
        return trimmed;
    };
    let body = &trimmed[start + 3..];
    let body = body.find('\n').map_or(body, |newline| &body[newline + 1..]);
    body.find("```").map_or(body, |end| &body[..end]).trim()
}

fn normalise(text: &str, case_sensitive: bool) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if case_sensitive {
        collapsed
    } else {
        collapsed.to_lowercase()
    }
}

impl Check {
    /// The judge prompts of this check and those nested in it.
    fn judge_prompts(
        &self,
        question: &str,
        answer: &str,
        reference: Option<&str>,
        base: Option<&str>,
        out: &mut Vec<(String, Vec<Message>)>,
    ) {
        match self {
            Check::Pairwise {
                at,
                template,
                criteria,
            } => {
                let Some(base) = base else {
                    return;
                };
                for (suffix, first, second) in [
                    (PAIRWISE_FIRST, answer, base),
                    (PAIRWISE_SECOND, base, answer),
                ] {
                    out.push((
                        format!("{at}{suffix}"),
                        template.render(&[
                            ("{question}", question),
                            ("{answer_a}", first),
                            ("{answer_b}", second),
                            ("{criteria}", criteria),
                        ]),
                    ));
                }
            }
            Check::Judge {
                at,
                template,
                criteria,
            } => out.push((
                at.clone(),
                template.render(&[
                    ("{question}", question),
                    ("{answer}", answer),
                    ("{reference}", reference.unwrap_or("(none)")),
                    ("{criteria}", criteria),
                ]),
            )),
            Check::All(checks) | Check::Any(checks) => {
                for check in checks {
                    check.judge_prompts(question, answer, reference, base, out);
                }
            }
            Check::Weighted { checks, .. } => {
                for (_, check) in checks {
                    check.judge_prompts(question, answer, reference, base, out);
                }
            }
            _ => {}
        }
    }

    fn grade(&self, answer: &str, reference: Option<&str>, judged: Judged<'_>) -> Verdict {
        let reference_missing =
            |kind: &str| Verdict::of(false, format!("{kind}: the prompt has no reference"));
        match self {
            Check::Exact { case_sensitive } => match reference {
                None => reference_missing("exact"),
                Some(reference) => exact_verdict(answer, reference, *case_sensitive),
            },
            Check::Choice { finder } => match reference {
                None => reference_missing("choice"),
                Some(reference) => choice_verdict(finder, answer, reference),
            },
            Check::Numeric {
                tolerance,
                relative_tolerance,
                marker,
                compare,
            } => match reference {
                None => reference_missing("numeric"),
                Some(reference) => numeric_verdict(
                    answer,
                    reference,
                    *tolerance,
                    *relative_tolerance,
                    marker.as_deref(),
                    *compare,
                ),
            },
            Check::Regex { regex } => {
                let pass = regex.is_match(answer);
                Verdict::of(
                    pass,
                    format!("regex: {}", if pass { "matches" } else { "does not match" }),
                )
            }
            Check::JsonSchema { validator } => json_schema_verdict(validator, answer),
            Check::Contains {
                text,
                case_sensitive,
                negate,
            } => {
                let found = if *case_sensitive {
                    answer.contains(text.as_str())
                } else {
                    answer.to_lowercase().contains(text.as_str())
                };
                let kind = if *negate { "not_contains" } else { "contains" };
                Verdict::of(
                    found != *negate,
                    format!(
                        "{kind}: {text:?} {}",
                        if found { "found" } else { "not found" }
                    ),
                )
            }
            Check::Judge { at, .. } => judged(at).unwrap_or_else(|| {
                Verdict::of(
                    false,
                    "llm_judge: not judged (`routeval grade --run` calls the judge)".into(),
                )
            }),
            Check::Pairwise { at, .. } => pairwise_verdict(at, judged),
            Check::All(checks) => {
                for check in checks {
                    let verdict = check.grade(answer, reference, judged);
                    if !verdict.pass {
                        return Verdict::of(false, format!("all: {}", verdict.detail));
                    }
                }
                Verdict::of(true, "all: every check passed".into())
            }
            Check::Any(checks) => {
                let mut failures = Vec::new();
                for check in checks {
                    let verdict = check.grade(answer, reference, judged);
                    if verdict.pass {
                        return Verdict::of(true, format!("any: {}", verdict.detail));
                    }
                    failures.push(verdict.detail);
                }
                Verdict::of(false, format!("any: none passed ({})", failures.join("; ")))
            }
            Check::Weighted { checks, threshold } => {
                weighted_verdict(checks, *threshold, answer, reference, judged)
            }
        }
    }
}

fn exact_verdict(answer: &str, reference: &str, case_sensitive: bool) -> Verdict {
    let pass = normalise(answer, case_sensitive) == normalise(reference, case_sensitive);
    Verdict::of(
        pass,
        if pass {
            "exact: equal".into()
        } else {
            "exact: differs from the reference".into()
        },
    )
}

fn choice_verdict(finder: &ChoiceFinder, answer: &str, reference: &str) -> Verdict {
    match (
        finder.find(answer),
        finder
            .find(reference)
            .or_else(|| reference.trim().chars().next()),
    ) {
        (None, _) => Verdict::of(false, "choice: the answer states no letter".into()),
        (Some(given), Some(expected)) if given == expected => {
            Verdict::of(true, format!("choice: {given}"))
        }
        (Some(given), expected) => Verdict::of(
            false,
            format!(
                "choice: answered {given}, expected {}",
                expected.map_or_else(|| "?".to_owned(), String::from)
            ),
        ),
    }
}

fn numeric_verdict(
    answer: &str,
    reference: &str,
    tolerance: f64,
    relative_tolerance: f64,
    marker: Option<&str>,
    compare: NumberComparison,
) -> Verdict {
    let Some(expected) = final_number(reference, marker) else {
        return Verdict::of(false, "numeric: the reference has no number".into());
    };
    let Some(given) = final_number(answer, marker) else {
        return Verdict::of(false, "numeric: the answer has no number".into());
    };
    let pass = match compare {
        NumberComparison::Text => given == expected,
        NumberComparison::Value => match (value(&given), value(&expected)) {
            (Some(given), Some(expected)) => {
                (given - expected).abs() <= tolerance.max(relative_tolerance * expected.abs())
            }
            _ => false,
        },
    };
    Verdict::of(
        pass,
        if pass {
            format!("numeric: {given}")
        } else {
            format!("numeric: answered {given}, expected {expected}")
        },
    )
}

fn json_schema_verdict(validator: &jsonschema::Validator, answer: &str) -> Verdict {
    match serde_json::from_str::<serde_json::Value>(json_of(answer)) {
        Err(error) => Verdict::of(
            false,
            format!("json_schema: the answer is not JSON: {error}"),
        ),
        Ok(value) => match validator.validate(&value) {
            Ok(()) => Verdict::of(true, "json_schema: conforms".into()),
            Err(error) => Verdict::of(
                false,
                format!("json_schema: at \"{}\": {error}", error.instance_path()),
            ),
        },
    }
}

/// The weighted share of passing checks, against `threshold`.
fn weighted_verdict(
    checks: &[(f64, Check)],
    threshold: f64,
    answer: &str,
    reference: Option<&str>,
    judged: Judged<'_>,
) -> Verdict {
    let total: f64 = checks.iter().map(|(weight, _)| weight).sum();
    let mut passed = 0.0;
    let mut failures = Vec::new();
    for (weight, check) in checks {
        let verdict = check.grade(answer, reference, judged);
        if verdict.pass {
            passed += weight;
        } else {
            failures.push(verdict.detail);
        }
    }
    let score = passed / total;
    Verdict {
        pass: score >= threshold,
        score,
        detail: format!(
            "weighted: {score:.3} against {threshold}{}",
            if failures.is_empty() {
                String::new()
            } else {
                format!(" ({})", failures.join("; "))
            }
        ),
    }
}

/// A pairwise check from its two judgements (MT-Bench's rule: the answer
/// loses only when it loses in both orders; orders that disagree are a
/// tie). Each judgement's `pass` says the graded answer was not worse in
/// that order; a judgement that failed or was unreadable fails the check.
fn pairwise_verdict(at: &str, judged: Judged<'_>) -> Verdict {
    if let Some(base) = judged(&format!("{at}{PAIRWISE_BASE}")) {
        return base;
    }
    let (Some(first), Some(second)) = (
        judged(&format!("{at}{PAIRWISE_FIRST}")),
        judged(&format!("{at}{PAIRWISE_SECOND}")),
    ) else {
        return Verdict::of(
            false,
            "llm_pairwise: not judged (no answer of the strongest tier to compare with, or not `routeval grade --run`)".into(),
        );
    };
    for verdict in [&first, &second] {
        if !verdict.detail.starts_with("pairwise:") {
            return Verdict::of(false, verdict.detail.clone());
        }
    }
    let detail = match (first.pass, second.pass) {
        (true, true) => "llm_pairwise: as good as the strongest tier's answer in both orders",
        (false, false) => "llm_pairwise: worse than the strongest tier's answer in both orders",
        _ => "llm_pairwise: the orders disagree (position bias): a tie",
    };
    Verdict::of(first.pass || second.pass, detail.to_owned())
}

impl Rubric {
    /// Grades `answer` against the prompt's `reference`; `llm_judge` checks
    /// fail as not judged.
    pub fn grade(&self, answer: &str, reference: Option<&str>) -> Verdict {
        self.grade_judged(answer, reference, &|_| None)
    }

    /// The prompts of the rubric's `llm_judge` checks for one answer, each
    /// with where its check sits.
    pub fn judge_prompts(
        &self,
        question: &str,
        answer: &str,
        reference: Option<&str>,
    ) -> Vec<(String, Vec<Message>)> {
        self.judge_prompts_against(question, answer, reference, None)
    }

    /// [`Rubric::judge_prompts`], with `base` the strongest tier's answer to
    /// compare with for `llm_pairwise` checks (`None` for that answer itself).
    pub fn judge_prompts_against(
        &self,
        question: &str,
        answer: &str,
        reference: Option<&str>,
        base: Option<&str>,
    ) -> Vec<(String, Vec<Message>)> {
        let mut prompts = Vec::new();
        self.check
            .judge_prompts(question, answer, reference, base, &mut prompts);
        prompts
    }

    /// Grades `answer`, taking the `llm_judge` checks' verdicts from `judged`.
    pub fn grade_judged(
        &self,
        answer: &str,
        reference: Option<&str>,
        judged: Judged<'_>,
    ) -> Verdict {
        let verdict = self.check.grade(answer, reference, judged);
        Verdict {
            detail: format!("{}: {}", self.name, verdict.detail),
            ..verdict
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::rubric::load_rubrics;

    fn rubric(text: &str) -> Rubric {
        Rubric::from_toml(Path::new("r.toml"), text).unwrap()
    }

    fn error(text: &str) -> String {
        Rubric::from_toml(Path::new("r.toml"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn numeric_by_value_and_by_text() {
        let by_value = rubric("name = \"n\"\n[check.numeric]\nmarker = \"####\"\n");
        assert!(
            by_value
                .grade("so $20.00 in total\n#### $20.00", Some("#### 20"))
                .pass
        );
        assert!(!by_value.grade("#### 21", Some("#### 20")).pass);
        let by_text =
            rubric("name = \"n\"\n[check.numeric]\nmarker = \"####\"\ncompare = \"text\"\n");
        let verdict = by_text.grade("#### 20.00", Some("#### 20"));
        assert!(!verdict.pass);
        assert_eq!(verdict.detail, "n: numeric: answered 20.00, expected 20");
        assert!(by_text.grade("it is 1,200 apples", Some("#### 1200")).pass);
        let relative = rubric("name = \"n\"\n[check.numeric]\nrelative_tolerance = 0.01\n");
        assert!(relative.grade("about 1005", Some("1000")).pass);
        assert!(!relative.grade("about 1011", Some("1000")).pass);
        assert!(!relative.grade("no idea", Some("1000")).pass);
    }

    #[test]
    fn exact_choice_regex_and_containment() {
        assert!(
            rubric("name = \"e\"\n[check.exact]\n")
                .grade("  Paris\n", Some("paris"))
                .pass
        );
        assert!(
            !rubric("name = \"e\"\n[check.exact]\ncase_sensitive = true\n")
                .grade("paris", Some("Paris"))
                .pass
        );
        let choice = rubric("name = \"c\"\n[check.choice]\n");
        assert!(choice.grade("The answer is (B).", Some("B")).pass);
        assert!(!choice.grade("The answer is (C).", Some("B")).pass);
        assert!(!choice.grade("I am not sure.", Some("B")).pass);
        let regex = rubric("name = \"r\"\n[check.regex]\npattern = '\\d{3}-\\d{4}'\nfull = true\n");
        assert!(regex.grade("555-1234", None).pass);
        assert!(!regex.grade("call 555-1234", None).pass);
        assert!(
            rubric("name = \"c\"\n[check.contains]\ntext = \"Refund\"\n")
                .grade("your refund is on its way", None)
                .pass
        );
        assert!(
            !rubric("name = \"c\"\n[check.not_contains]\ntext = \"guarantee\"\n")
                .grade("We GUARANTEE it", None)
                .pass
        );
    }

    #[test]
    fn json_schema_checks_structure() {
        let rubric = rubric(
            "name = \"j\"\n[check.json_schema]\nschema = '{\"type\": \"object\", \"required\": [\"refund\"], \"properties\": {\"refund\": {\"type\": \"number\"}}}'\n",
        );
        assert!(rubric.grade("{\"refund\": 12.5}", None).pass);
        assert!(
            rubric
                .grade(
                    "Here you go:\n```json\n{\"refund\": 3}\n```\nAnything else?",
                    None
                )
                .pass
        );
        let wrong_type = rubric.grade("{\"refund\": \"twelve\"}", None);
        assert!(!wrong_type.pass);
        assert!(
            wrong_type
                .detail
                .starts_with("j: json_schema: at \"/refund\":"),
            "{}",
            wrong_type.detail
        );
        let not_json = rubric.grade("refund: 12", None);
        assert!(!not_json.pass && not_json.detail.contains("the answer is not JSON"));
        assert!(
            error("name = \"x\"\n[check.json_schema]\nschema = '{\"type\": 12}'\n")
                .contains("not a valid JSON Schema")
        );
        assert!(
            error("name = \"x\"\n[check.json_schema]\n").contains("give schema or schema_file")
        );
    }

    #[test]
    fn compositions() {
        let all = rubric(
            "name = \"a\"\n[check.all]\nchecks = [{ contains = { text = \"refund\" } }, { not_contains = { text = \"sorry\" } }]\n",
        );
        assert!(all.grade("refund issued", None).pass);
        let failed = all.grade("sorry, refund issued", None);
        assert!(!failed.pass);
        assert_eq!(failed.detail, "a: all: not_contains: \"sorry\" found");
        let any = rubric(
            "name = \"a\"\n[check.any]\nchecks = [{ exact = {} }, { contains = { text = \"42\" } }]\n",
        );
        assert!(any.grade("it is 42", Some("forty-two")).pass);
        let weighted = rubric(
            "name = \"w\"\n[check.weighted]\nthreshold = 0.6\nchecks = [\n\
             { weight = 3, check = { contains = { text = \"refund\" } } },\n\
             { weight = 1, check = { contains = { text = \"thanks\" } } },\n\
             { weight = 1, check = { contains = { text = \"order\" } } },\n]\n",
        );
        let verdict = weighted.grade("your refund", None);
        assert!(verdict.pass);
        assert!((verdict.score - 0.6).abs() < 1e-12);
        assert!(!weighted.grade("thanks for the order", None).pass);
    }

    #[test]
    fn bad_rubrics_name_the_file_and_the_problem() {
        assert!(
            error("name = \"x\"\nweight = 2\n[check.exact]\n").starts_with(
                "r.toml: TOML parse error at line 2, column 1: unknown field `weight`"
            )
        );
        assert!(
            error("name = \"x\"\n[check.numeric]\ntolerence = 1\n").contains(
                "line 3, column 1: unexpected keys in table: tolerence, available keys: tolerance"
            )
        );
        assert!(
            error("name = \"x\"\n[check.regex]\npattern = \"(unclosed\"\n")
                .starts_with("r.toml: check.regex: pattern does not compile")
        );
        assert_eq!(
            error("name = \"x\"\n[check.all]\nchecks = []\n"),
            "r.toml: check.all: needs at least one check"
        );
        assert!(error("name = \"x\"\n[check.sentiment]\n").contains("unknown variant `sentiment`"));
    }

    #[test]
    fn shipped_rubrics_load() {
        let rubrics = load_rubrics(&Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics")).unwrap();
        assert!(
            rubrics.contains_key("gsm8k")
                && rubrics.contains_key("mmlu")
                && rubrics.contains_key("exact")
        );
    }
}
