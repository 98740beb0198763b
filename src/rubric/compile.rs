//! A rubric's file and checks as written (`spec`) compiled into the rubric
//! that grades (`checks::Check`): every pattern, schema, template and
//! reference checked once, at load, so a bad one is reported before
//! anything is graded, naming where it sits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;

use super::checks::{Check, Rubric, RubricError};
use super::extract::ChoiceFinder;
use super::spec::{CheckSpec, RubricFile, WeightedSpec};
use crate::rubric::PromptTemplate;

impl Rubric {
    pub fn from_toml(path: &Path, text: &str) -> Result<Rubric, RubricError> {
        let invalid = |message: String| RubricError::Invalid {
            path: path.to_owned(),
            message,
        };
        let file: RubricFile = toml::from_str(text)
            .map_err(|error| invalid(crate::toml_message::one_line(&error.to_string())))?;
        if file.name.trim().is_empty() {
            return Err(invalid("name is empty".to_owned()));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let check = compile(&file.check, "check", base).map_err(invalid)?;
        Ok(Rubric {
            name: file.name,
            description: file.description,
            path: path.to_owned(),
            check,
        })
    }

    pub fn load(path: &Path) -> Result<Rubric, RubricError> {
        let text = std::fs::read_to_string(path).map_err(|source| RubricError::Io {
            path: path.to_owned(),
            source,
        })?;
        Rubric::from_toml(path, &text)
    }
}

/// Every `*.toml` rubric in `directory`, by name.
pub fn load_rubrics(directory: &Path) -> Result<BTreeMap<String, Rubric>, RubricError> {
    let entries = std::fs::read_dir(directory).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            RubricError::Missing {
                path: directory.to_owned(),
            }
        } else {
            RubricError::Io {
                path: directory.to_owned(),
                source,
            }
        }
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "toml")
        })
        .collect();
    paths.sort();
    let mut rubrics: BTreeMap<String, Rubric> = BTreeMap::new();
    for path in paths {
        let rubric = Rubric::load(&path)?;
        if let Some(other) = rubrics.get(&rubric.name) {
            return Err(RubricError::Duplicate {
                path,
                name: rubric.name,
                other: other.path.clone(),
            });
        }
        rubrics.insert(rubric.name.clone(), rubric);
    }
    Ok(rubrics)
}

pub(super) fn compile(spec: &CheckSpec, at: &str, base: &Path) -> Result<Check, String> {
    let nested = |checks: &[CheckSpec], kind: &str| -> Result<Vec<Check>, String> {
        if checks.is_empty() {
            return Err(format!("{at}.{kind}: needs at least one check"));
        }
        checks
            .iter()
            .enumerate()
            .map(|(index, check)| compile(check, &format!("{at}.{kind}.checks[{index}]"), base))
            .collect()
    };
    Ok(match spec {
        CheckSpec::LlmJudge { template, criteria } => judge(at, base, template, criteria)?,
        CheckSpec::LlmPairwise { template, criteria } => pairwise(at, base, template, criteria)?,
        CheckSpec::Exact { case_sensitive } => Check::Exact {
            case_sensitive: *case_sensitive,
        },
        CheckSpec::Choice { letters } => Check::Choice {
            finder: ChoiceFinder::new(letters)
                .map_err(|message| format!("{at}.choice: {message}"))?,
        },
        CheckSpec::Numeric {
            tolerance,
            relative_tolerance,
            marker,
            compare,
        } => {
            if !(tolerance.is_finite()
                && *tolerance >= 0.0
                && relative_tolerance.is_finite()
                && *relative_tolerance >= 0.0)
            {
                return Err(format!(
                    "{at}.numeric: tolerances must be finite and non-negative"
                ));
            }
            Check::Numeric {
                tolerance: *tolerance,
                relative_tolerance: *relative_tolerance,
                marker: marker.clone().filter(|marker| !marker.is_empty()),
                compare: *compare,
            }
        }
        CheckSpec::Regex { pattern, full } => regex(at, pattern, *full)?,
        CheckSpec::Contains {
            text,
            case_sensitive,
        }
        | CheckSpec::NotContains {
            text,
            case_sensitive,
        } => Check::Contains {
            text: if *case_sensitive {
                text.clone()
            } else {
                text.to_lowercase()
            },
            case_sensitive: *case_sensitive,
            negate: matches!(spec, CheckSpec::NotContains { .. }),
        },
        CheckSpec::JsonSchema {
            schema,
            schema_file,
        } => json_schema(at, base, schema.as_deref(), schema_file.as_deref())?,
        CheckSpec::All { checks } => Check::All(nested(checks, "all")?),
        CheckSpec::Any { checks } => Check::Any(nested(checks, "any")?),
        CheckSpec::Weighted { checks, threshold } => weighted(at, base, checks, *threshold)?,
    })
}

fn judge(at: &str, base: &Path, template: &str, criteria: &str) -> Result<Check, String> {
    if criteria.trim().is_empty() {
        return Err(format!("{at}.llm_judge: criteria is empty"));
    }
    let template = PromptTemplate::load(base, template)
        .map_err(|error| format!("{at}.llm_judge: {error:#}"))?;
    if !template.user.contains("{criteria}") {
        return Err(format!(
            "{at}.llm_judge: the template's user prompt must contain {{criteria}}"
        ));
    }
    Ok(Check::Judge {
        at: at.to_owned(),
        template: std::sync::Arc::new(template),
        criteria: criteria.to_owned(),
    })
}

fn pairwise(at: &str, base: &Path, template: &str, criteria: &str) -> Result<Check, String> {
    if criteria.trim().is_empty() {
        return Err(format!("{at}.llm_pairwise: criteria is empty"));
    }
    let template = PromptTemplate::load_requiring(
        base,
        template,
        &["{question}", "{answer_a}", "{answer_b}", "{criteria}"],
    )
    .map_err(|error| format!("{at}.llm_pairwise: {error:#}"))?;
    Ok(Check::Pairwise {
        at: at.to_owned(),
        template: std::sync::Arc::new(template),
        criteria: criteria.to_owned(),
    })
}

fn regex(at: &str, pattern: &str, full: bool) -> Result<Check, String> {
    let pattern = if full {
        format!("^(?:{pattern})$")
    } else {
        pattern.to_owned()
    };
    Ok(Check::Regex {
        regex: Regex::new(&pattern).map_err(|error| {
            let first = error
                .to_string()
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_owned();
            format!("{at}.regex: pattern does not compile: {first}")
        })?,
    })
}

fn json_schema(
    at: &str,
    base: &Path,
    schema: Option<&str>,
    schema_file: Option<&Path>,
) -> Result<Check, String> {
    let text = match (schema, schema_file) {
        (Some(schema), None) => schema.to_owned(),
        (None, Some(file)) => {
            let path = base.join(file);
            std::fs::read_to_string(&path).map_err(|error| {
                format!(
                    "{at}.json_schema.schema_file: cannot read {}: {error}",
                    path.display()
                )
            })?
        }
        _ => {
            return Err(format!(
                "{at}.json_schema: give schema or schema_file, not both or neither"
            ));
        }
    };
    let schema: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| format!("{at}.json_schema: the schema is not JSON: {error}"))?;
    let validator = jsonschema::validator_for(&schema)
        .map_err(|error| format!("{at}.json_schema: not a valid JSON Schema: {error}"))?;
    Ok(Check::JsonSchema {
        validator: std::sync::Arc::new(validator),
    })
}

fn weighted(
    at: &str,
    base: &Path,
    checks: &[WeightedSpec],
    threshold: f64,
) -> Result<Check, String> {
    if checks.is_empty() {
        return Err(format!("{at}.weighted: needs at least one check"));
    }
    if !(0.0..=1.0).contains(&threshold) {
        return Err(format!(
            "{at}.weighted.threshold must be in [0, 1], got {threshold}"
        ));
    }
    let mut compiled = Vec::new();
    for (index, weighted) in checks.iter().enumerate() {
        if !(weighted.weight.is_finite() && weighted.weight > 0.0) {
            return Err(format!(
                "{at}.weighted.checks[{index}].weight must be positive"
            ));
        }
        compiled.push((
            weighted.weight,
            compile(
                &weighted.check,
                &format!("{at}.weighted.checks[{index}].check"),
                base,
            )?,
        ));
    }
    Ok(Check::Weighted {
        checks: compiled,
        threshold,
    })
}
