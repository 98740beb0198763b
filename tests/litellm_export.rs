//! The LiteLLM export carries out what was signed, or is not written. Each
//! export is loaded into a real LiteLLM `Router` (from
//! `ROUTEVAL_TEST_PYTHON`, a Python with `litellm`, `pyyaml` and `scipy`,
//! which `.ci/run` sets up) and a mock completion is routed through every
//! model name and every fallback chain.

use std::path::Path;

use crate::common::{Workspace, example_routes, loads_into_litellm};

#[test]
fn a_predictive_export_sends_the_logical_model_to_serve() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &[
                "--target",
                "0.9",
                "--serve-url",
                "http://routeval-serve.internal:8090/v1",
            ],
        )
        .code(0);
    let emitted = workspace.report("dist").emitted.unwrap();
    let export = emitted.litellm.expect("an export with --serve-url");
    let text = std::fs::read_to_string(&export).unwrap();
    // The logical model is routeval serve, which carries the thresholds out.
    let logical = text
        .split("  - model_name: ")
        .find(|entry| entry.starts_with("\"support-fast\"\n"))
        .unwrap();
    assert!(
        logical.contains("model: \"openai/support-fast\""),
        "{logical}"
    );
    assert!(logical.contains("api_base: \"http://routeval-serve.internal:8090/v1\""));
    assert!(logical.contains("api_key: \"os.environ/ROUTEVAL_SERVE_KEY\""));
    assert!(logical.contains(&format!("routeval_config_sha256: \"{}\"", emitted.sha256)));
    // Each route stays a deployment of its own, for direct access and
    // fallbacks; serve unreachable falls back to the strongest route.
    assert!(text.contains("api_base: \"https://example-eu.openai.azure.com/openai/v1\""));
    assert!(text.contains("api_key: \"os.environ/OPENAI_API_KEY\""));
    assert!(text.contains("- \"support-fast\": [\"support-fast/large\"]"));
    assert!(text.contains("\"support-fast/large\": [\"support-fast/large-backup\"]"));
    // Retries at one layer: serve's.
    assert!(text.contains("  num_retries: 0\n"));
    assert!(!text.contains("sk-"), "a key in the export");
    loads_into_litellm(Path::new(&export));
}

#[test]
fn a_single_route_exports_without_serve() {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("always-large.toml")],
            "dist",
            &["--target", "0.9"],
        )
        .code(0);
    let export = workspace.report("dist").emitted.unwrap().litellm.unwrap();
    let text = std::fs::read_to_string(&export).unwrap();
    assert!(!text.contains("routeval serve"));
    assert!(text.contains("  - model_name: \"support-fast\"\n"));
    loads_into_litellm(Path::new(&export));
}
