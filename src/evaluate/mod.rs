//! `routeval evaluate`: how well a file's scores separate the prompts that
//! need the large tier, by RouteLLM's metrics (APGR, CPT: the kernel's
//! [`crate::policy::routing_quality`]), against a random router and the
//! oracle.

mod engine;

pub use engine::{EvaluateOptions, evaluate, render};
