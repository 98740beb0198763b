//! `routeval import`: public benchmark outcomes as graded-results tables, so
//! teams can calibrate before they have run anything. RouteLLM's MMLU
//! responses (one file per subject, the subject as slice), RouteLLM's GSM8K
//! responses (regraded with a rubric against GSM8K's reference answers),
//! MT-Bench judgments (a judge score at or above a bar is acceptable, the
//! question's category the slice), and any table through a column mapping.
//! Prices come from flags or a price file; scores from the built-in router,
//! cross-fitted, or from another file joined by id.

mod build;
mod engine;
mod prices;
mod sources;

pub use build::{ImportedRow, ScoreSource, build_table};
pub use engine::{Benchmark, ImportOptions, PriceSource, import};
pub use prices::Prices;
pub use sources::{mt_bench, routellm_gsm8k, routellm_mmlu};
