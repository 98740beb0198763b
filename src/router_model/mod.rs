//! The built-in learned router for predictive routing: logistic regressions
//! on hashed word n-grams of the prompt plus the slice, predicting that each
//! tier's answer is not acceptable, scoring the quality gained by escalating.
//! Training cross-fits, so the scores
//! it writes into a graded table never come from a model that saw the row's
//! label; new prompts are scored by the model trained on every row.

mod crossfit;
mod features;
mod model;
mod table;

pub use crossfit::{LabelledPrompt, cross_fit, fold_of, small_failure_only};
pub use features::{FEATURES_VERSION, Features, featurise};
pub use model::{Classifier, Outcome, ROUTER_OUTPUT, Router, Training, stored_score};
pub use table::{PromptError, labelled_prompts, with_scores};
