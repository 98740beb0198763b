//! Rubrics a reviewer can read (`rubrics/*.toml`) and what an answer means
//! under them: the rubric engine (exact, multiple-choice, numeric, regex,
//! containment and JSON Schema checks and their `all`/`any`/`weighted`
//! compositions), the prompt templates of verifiers and judges, how a
//! judge's answer is read, and the reject score of a cascade from a
//! verifier's verdict or self-consistency. `run` and `grade` load them, and
//! serve-sim answers by them; none keeps its own copy.

mod checks;
mod compile;
mod extract;
mod judgement;
mod prompt;
mod spec;
mod verifier;

pub use checks::{Judged, PAIRWISE_BASE, Rubric, RubricError, Verdict};
pub use compile::load_rubrics;
pub use extract::{ChoiceFinder, final_number};
pub use judgement::{judgement_verdict, pairwise_judgement, verdict_for_check};
pub use prompt::PromptTemplate;
pub use spec::{CheckSpec, NumberComparison, RubricFile, WeightedSpec};
pub use verifier::{TokenChoice, self_consistency, verdict_score};
