//! routeval turns labelled prompts into route-table thresholds a platform team
//! can trust: it calibrates the threshold of a tier router or cascade per slice
//! of traffic so that quality meets a target at the lowest cost, optionally with
//! a statistical guarantee.
//!
//! The code stands on floors, each using only what stands below it
//! (docs/architecture.md draws them, and a test holds the code to it):
//!
//! - [`cli`]: parses flags into each stage's typed options and prints.
//! - The stages, side by side, never importing one another: [`run`],
//!   [`grade`], [`calibrate`], [`gate`], [`drift`], [`report`], [`replay`],
//!   [`sample`], [`simulate`], [`evaluate`], [`router`], [`import`],
//!   [`serve`] (the signed config in the request path) and [`upstream_sim`]
//!   (the embedded OpenAI-compatible simulated upstream `serve-sim` runs).
//! - The kernel: [`policy`], what a policy does to a row and a route table
//!   to graded rows, and [`router_model`], the built-in learned router's
//!   model.
//! - Contracts and clients: [`routes`] (route tables and the signed route
//!   config), [`records`] (one record per request), [`client`] (the
//!   endpoint client) and [`rubric`] (rubrics and what an answer means).
//! - The tables and versioned documents stages exchange: [`schema`].
//! - Ground: [`stats`], [`atomic`], [`digest`], [`clock`], [`events`],
//!   [`exit_codes`],
//!   [`terminal`], [`markdown`], [`version`], [`units`].

pub mod atomic;
pub mod calibrate;
pub mod cli;
pub mod client;
pub mod clock;
pub mod digest;
pub mod drift;
pub mod evaluate;
pub mod events;
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
pub mod router_model;
pub mod routes;
pub mod rubric;
pub mod run;
pub mod sample;
pub mod schema;
pub mod serve;
pub mod simulate;
pub mod stats;
pub mod terminal;
mod toml_message;
pub mod units;
pub mod upstream_sim;
pub mod version;
