//! The LiteLLM export is deployable as written: each export is loaded into a
//! real LiteLLM `Router` (from `ROUTEVAL_TEST_PYTHON`, a Python with
//! `litellm`, `pyyaml` and `scipy`, which `.ci/run` sets up) and a mock completion is
//! routed through every model name and every fallback chain.

use std::path::Path;

/// Loads `export` into LiteLLM; skipped without `ROUTEVAL_TEST_PYTHON`,
/// a failure under CI.
pub fn loads_into_litellm(export: &Path) {
    let Some(python) =
        crate::common::test_python(&format!("loading {} into LiteLLM", export.display()))
    else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litellm_load.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(export)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "LiteLLM refused {}:\n{stdout}\n{stderr}",
        export.display()
    );
    assert!(stdout.contains("model names"), "{stdout}");
}

#[test]
fn the_example_export_routes_every_model_and_fallback_in_litellm() {
    let (_workspace, config) = crate::drift_cli::deployed();
    let export = Path::new(&config).with_file_name("route-config.v1.litellm.yaml");
    let text = std::fs::read_to_string(&export).unwrap();
    assert!(text.contains("api_base: \"https://example-eu.openai.azure.com/openai/v1\""));
    assert!(text.contains("api_key: \"os.environ/OPENAI_API_KEY\""));
    assert!(!text.contains("sk-"), "a key in the export");
    loads_into_litellm(&export);
}
