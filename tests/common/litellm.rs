//! A LiteLLM export loaded into a real LiteLLM `Router`.

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
