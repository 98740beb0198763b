//! Grading: whether each answer was acceptable, by rubrics a reviewer can
//! read (`rubrics/*.toml`). This part of the `grade` stage is the rubric
//! engine: exact, multiple-choice, numeric, regex, containment and JSON
//! Schema checks and their `all`/`any`/`weighted` compositions; and the
//! reject scores of cascades, from a verifier's verdict or self-consistency.

mod extract;
mod judge;
mod rubric;
mod run;
mod verifier;

pub use extract::{ChoiceFinder, final_number};
pub use judge::{Judging, judge_all, judgement_verdict};
pub use rubric::{
    CheckSpec, Judged, NumberComparison, Rubric, RubricError, RubricFile, Verdict, WeightedSpec,
    load_rubrics,
};
pub use run::{GradeRunError, GradedRun, Grading, JudgeRequest, Judgements, ScoreSource};
pub use verifier::{TokenChoice, self_consistency, verdict_score};
