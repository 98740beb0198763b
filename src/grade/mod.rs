//! `routeval grade`: whether each answer of a run was acceptable, by the
//! rubrics of [`crate::rubric`], with the judge's calls for `llm_judge`
//! checks, and the reject scores of cascades; writes the graded-results
//! table.

mod engine;
mod graded_table;
mod judge;
mod responses;

pub use engine::{GradeOptions, Graded, grade};
pub use judge::{Judging, judge_all};
pub use responses::{GradeRunError, GradedRun, Grading, JudgeRequest, Judgements, ScoreSource};
