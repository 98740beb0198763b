//! routeval's integration tests, compiled as one binary: the CLI as users run
//! it, on files written by the tests themselves.

mod common;

mod architecture;
mod audit_draw;
mod calibrate_cli;
mod calibrate_guarantee;
mod calibrate_json;
mod ci_workflow;
mod demo_cli;
mod demo_dataset;
mod drift_cli;
mod evaluate_cli;
mod familywise;
mod gate_cli;
mod gate_regression;
mod import_cli;
mod input_errors;
mod input_formats;
mod install;
mod judge_error;
mod kernel_consistency;
mod litellm_export;
mod progress_events;
mod real_data;
mod records_drift;
mod records_replay;
mod replay_replicas;
mod report_cli;
mod router_cli;
mod run_cli;
mod safety_files;
mod safety_outputs;
mod safety_run;
mod sample_pairwise;
mod schema_docs;
mod serve_cli;
mod serve_k8s;
mod serve_resilience;
mod signing;
mod sim_cli;
mod simulate_cli;
mod snapshots;
mod tiers_cli;
mod tiers_run;
