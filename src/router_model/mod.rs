//! The built-in learned router for predictive routing: logistic regressions
//! on hashed word n-grams of the prompt plus the slice, predicting that each
//! tier's answer is not acceptable, scoring the quality gained by escalating.
//! Training splits the rows: the model is fitted on one part, and the
//! scores it writes are its own on the other part, the calibration part,
//! exactly what serve computes for a new prompt. The model file keeps the
//! prompts it was fitted on, so the gate can check that a certificate rests
//! on the deployed model's scores of prompts it never saw.

mod crossfit;
mod features;
mod model;
mod table;

pub use crossfit::{
    Folds, LabelledPrompt, Split, cross_fit, fold_of, in_calibration_part, small_failure_only,
    split_fit,
};
pub use features::{FEATURES_VERSION, Features, featurise};
pub use model::{
    Classifier, Outcome, ROUTER_FORMATS, ROUTER_OUTPUT, Router, Training, TrainingSet, stored_score,
};
pub use table::{PromptError, labelled_prompts, with_scores};
