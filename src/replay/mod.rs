//! Replays of recorded traffic. `replicas`: the second router in the
//! request path, the one that picks a replica of a self-hosted model, a
//! pool simulated under each replica-routing policy, and the cache-aware
//! router's load guard calibrated; it reads a trace ([`trace`]) or a run
//! ([`from_run`]). `fallback` and `hedge`: the gateway's breakers,
//! fallbacks and hedged requests, replayed from request records. Each
//! writes a versioned document that `report` renders.

pub mod candidate;
pub mod fallback;
pub mod from_run;
pub mod hedge;
pub mod replicas;
pub mod trace;

pub use from_run::RunArrivals;
pub use replicas::{
    Objective, PolicySpec, Pool, ReplicasOptions, Requests, Search, Source, render_calibration,
    render_policies, render_replicas, replay, replay_replicas, search_settings,
};
pub use trace::{Request, for_each_request};
