//! Replays of recorded traffic through the second router in the request
//! path, the one that picks a replica of a self-hosted model: `replicas`
//! simulates a pool under each replica-routing policy and calibrates the
//! cache-aware router's load guard. Reads a trace ([`trace`]) or a run
//! ([`from_run`]); writes a versioned document that `report` renders.

pub mod from_run;
pub mod replicas;
pub mod trace;

pub use from_run::RunArrivals;
pub use replicas::{
    Objective, PolicySpec, Pool, ReplayDocument, Source, calibrate, render_calibration,
    render_policies, replay,
};
pub use trace::{Request, TraceError, for_each_request};
