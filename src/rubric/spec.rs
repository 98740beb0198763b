//! A rubric as its file writes it (`rubrics/NAME.toml`, strict): its checks
//! and their compositions, before they are compiled.

use std::path::PathBuf;

use serde::Deserialize;

/// A rubric file as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RubricFile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub check: CheckSpec,
}

/// How numbers are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumberComparison {
    /// Equal within the tolerances.
    #[default]
    Value,
    /// The final number as written (thousands separators removed) equals the
    /// reference's: the exact-match convention of GSM8K graders, under which
    /// `20.00` does not answer `20`.
    Text,
}

/// One check, as written; checks nest through `all`, `any` and `weighted`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CheckSpec {
    /// The answer equals the reference, ignoring case and runs of white space.
    Exact {
        #[serde(default)]
        case_sensitive: bool,
    },
    /// The multiple-choice letter the answer states equals the reference's.
    Choice {
        #[serde(default = "default_letters")]
        letters: String,
    },
    /// The answer's final number matches the reference's final number.
    Numeric {
        #[serde(default = "default_tolerance")]
        tolerance: f64,
        #[serde(default)]
        relative_tolerance: f64,
        /// Text after which the final answer is stated, such as `####`.
        #[serde(default)]
        marker: Option<String>,
        #[serde(default)]
        compare: NumberComparison,
    },
    /// The answer matches a regular expression (anywhere, or whole with `full`).
    Regex {
        pattern: String,
        #[serde(default)]
        full: bool,
    },
    Contains {
        text: String,
        #[serde(default)]
        case_sensitive: bool,
    },
    /// The answer is JSON (a fenced code block is unwrapped) that conforms to
    /// a JSON Schema, given inline as `schema` or in `schema_file` (relative to
    /// the rubric file).
    JsonSchema {
        #[serde(default)]
        schema: Option<String>,
        #[serde(default)]
        schema_file: Option<PathBuf>,
    },
    NotContains {
        text: String,
        #[serde(default)]
        case_sensitive: bool,
    },
    /// A judge model decides, from the question, the answer, the reference
    /// and `criteria`, with the prompt `rubrics/prompts/<template>.toml`; the
    /// endpoint is `[judge]` of the run's config (`routeval grade --run`).
    LlmJudge {
        #[serde(default = "default_judge_template")]
        template: String,
        criteria: String,
    },
    /// A judge model compares the answer with the strongest tier's answer to
    /// the same prompt, by `criteria`, in both orders (MT-Bench's pairwise
    /// judging): the answer fails only when the strongest tier's wins in
    /// both; the strongest tier's own answer is the comparison's base and
    /// passes. For prompts without a reference (`routeval sample`).
    LlmPairwise {
        #[serde(default = "default_pairwise_template")]
        template: String,
        criteria: String,
    },
    All {
        checks: Vec<CheckSpec>,
    },
    Any {
        checks: Vec<CheckSpec>,
    },
    /// Passes when the weighted share of passing checks reaches `threshold`.
    Weighted {
        checks: Vec<WeightedSpec>,
        threshold: f64,
    },
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedSpec {
    pub weight: f64,
    pub check: CheckSpec,
}

fn default_letters() -> String {
    "ABCD".to_owned()
}

fn default_judge_template() -> String {
    "judge".to_owned()
}

fn default_pairwise_template() -> String {
    "pairwise".to_owned()
}

fn default_tolerance() -> f64 {
    1e-6
}
