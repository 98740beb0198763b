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

/// What LiteLLM, with the export's own `router_settings` and every
/// deployment made to fail, says of calls to `model`: `failed N before the
/// cooldown` or `never cooled down`; `None` without `ROUTEVAL_TEST_PYTHON`.
pub fn cooldown_of(export: &Path, model: &str) -> Option<String> {
    let python = crate::common::test_python(&format!(
        "failing {model} of {} in LiteLLM",
        export.display()
    ))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litellm_cooldown.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(export)
        .arg(model)
        .env("LITELLM_LOG", "CRITICAL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(stdout.lines().last().unwrap_or_default().to_owned())
}
