//! Breakers and fallback, replayed from a route's request records: each
//! recorded request of the primary route goes through a gateway policy (no
//! breaker; a breaker counting errors and 429s; one that also counts a
//! first token later than a deadline), and the user's wait, the requests
//! moved to the fallback route, the fallback's peak rate and the extra
//! requests sent are counted per policy. The fallback's latency is taken
//! from its own records (the one nearest in time) or a constant.
//!
//! The rules of DOMAIN.md hold: a request falls back only before its first
//! token (a recorded failure after its first token is a failure of every
//! policy, never a save), and an open breaker sends requests straight to
//! the fallback until one half-open probe tries the primary again.

mod engine;
mod records;
mod render;
mod replay;
mod search;

pub use engine::{FallbackOptions, FallbackReplay, fallback};
pub use records::{FallbackInputs, ROUTE_TABLE_OUTPUT, load_fallback_inputs};
pub use render::render_fallback;
pub use replay::{
    FallbackLatency, FallbackPolicy, PrimaryRequest, replay_fallback, standard_policies,
};
pub use search::{BreakerBounds, calibrate_breaker, candidate_deadlines};
