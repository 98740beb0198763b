//! routeval turns labelled prompts into route-table thresholds a platform team
//! can trust: it calibrates the threshold of a tier router or cascade per slice
//! of traffic so that quality meets a target at the lowest cost, optionally with
//! a statistical guarantee.
//!
//! The stages communicate through tables whose Arrow schemas live in
//! [`schema`]; each stage has its own folder:
//!
//! - [`import`]: public benchmark outcomes as graded results.
//! - [`grade`]: rubrics that decide whether an answer was acceptable.
//! - [`router`] and [`evaluate`]: the built-in learned router and how well a
//!   score separates the prompts that need the large tier.
//! - [`policy`]: the kernel every stage calls for what a policy does to a
//!   row: the tier that serves it, its cost, its outcome, its latency.
//! - [`calibrate`]: graded results in, per-slice thresholds out.
//! - [`gate`]: candidate [`routes`] tables scored on graded results; the
//!   cheapest that passes every rule becomes a signed route config.
//!
//! - [`drift`]: fresh graded traffic against a deployed config's thresholds.
//! - [`report`]: the HTML and Markdown a reviewer reads.
//! - [`sim`]: the embedded OpenAI-compatible simulated endpoint.
//! - [`simulate`]: graded results from a documented generative model.
//!
//! [`cli`] is the only module that knows about command-line parsing.

pub mod atomic;
pub mod calibrate;
pub mod cli;
pub mod client;
pub mod clock;
pub mod digest;
pub mod drift;
pub mod evaluate;
pub mod exit_codes;
pub mod gate;
pub mod grade;
pub mod import;
pub mod markdown;
pub mod policy;
pub mod records;
pub mod replay;
pub mod report;
pub mod router;
pub mod routes;
pub mod rubric;
pub mod run;
pub mod sample;
pub mod schema;
pub mod sim;
pub mod simulate;
pub mod stats;
pub mod terminal;
mod toml_message;
pub mod version;
