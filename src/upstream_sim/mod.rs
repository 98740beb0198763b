//! `routeval serve-sim`: an OpenAI-compatible endpoint inside the binary, so
//! the demo, the tests and the benchmarks need no key and no network. Given a
//! dataset, it answers each prompt correctly with a probability that falls
//! with the prompt's difficulty and rises with the model's skill
//! (deterministically per seed), streams like a real server, and injects
//! faults at configured rates. It counts what it received, for tests.

mod answer;
mod faults;
mod server;
mod state;

pub use answer::{Knowledge, SimModel, answer_for, verdict_for};
pub use faults::{Fault, FaultProfile};
pub use server::{RunningSim, spawn};
pub use state::{SimSettings, Stats};
