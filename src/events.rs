//! What a stage says while it works: typed events, emitted as they happen
//! and drawn by whichever [`Reporter`] the command line chose (progress bars
//! on stderr, JSON lines for CI logs, or nothing). A stage never draws, and
//! never polls its own counters for someone else to draw.
//!
//! With `--progress json` each event is one line on stderr, an object with
//! `schema_version` and `event` and the fields below; docs/schema.md
//! documents them and a test pins the keys.

use serde::Serialize;

/// The version of the JSON lines of `--progress json`.
pub const EVENTS_SCHEMA_VERSION: u32 = 1;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A lane of work (a tier's calls, the judge's) and the units planned.
    Planned {
        stage: &'static str,
        lane: String,
        total: u64,
    },
    /// A unit of a lane finished: the lane's counts so far.
    Progress {
        stage: &'static str,
        lane: String,
        done: u64,
        total: u64,
        errors: u64,
        /// Why the latest failed unit failed (a run's `error_kind`).
        last_error: Option<String>,
        retries: u64,
        cached: u64,
        cost_usd: f64,
    },
    /// A lane is done.
    Finished { stage: &'static str, lane: String },
    /// A line a person should read: a resumed run, a file moved aside, a
    /// clock set by a flag, calls that failed.
    Message {
        stage: &'static str,
        level: Level,
        text: String,
    },
}

/// How much a [`Event::Message`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Note,
    Warning,
    Error,
}

impl Level {
    /// The prefix of the line on a terminal: `note: `, `warning: `, `error: `.
    pub fn prefix(self) -> &'static str {
        match self {
            Level::Note => "note: ",
            Level::Warning => "warning: ",
            Level::Error => "error: ",
        }
    }
}

/// Whoever draws the events. Called from any thread, as events happen.
pub trait Reporter: Send + Sync + std::fmt::Debug {
    fn report(&self, event: Event);
}

/// A reporter that draws nothing: for tests and library callers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Reporter for Silent {
    fn report(&self, _event: Event) {}
}
