//! routeval as users install it: the wheel `.ci/run` builds (maturin,
//! `bindings = "bin"`), installed into a fresh venv, runs the main job from
//! an empty directory, with no checkout beside it. `.ci/run` names the
//! installed binary in `ROUTEVAL_INSTALLED`; without it the test says it
//! was skipped, and under `CI` it fails.

use std::process::Command;

#[test]
fn the_installed_wheel_runs_the_demo_from_an_empty_directory() {
    let Some(installed) = std::env::var_os("ROUTEVAL_INSTALLED") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "ROUTEVAL_INSTALLED is not set; .ci/run builds and installs the wheel"
        );
        eprintln!("skipped the installed wheel: ROUTEVAL_INSTALLED is not set");
        return;
    };
    let empty = tempfile::tempdir().unwrap();
    let output = Command::new(&installed)
        .arg("demo")
        .current_dir(empty.path())
        .env_remove("ROUTEVAL_DATA")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // It names what it signed and where the report is, and both are there.
    let config = empty.path().join("runs/demo/gate/route-config.v1.json");
    let report = empty.path().join("reports/demo/report.html");
    assert!(stdout.contains("route-config.v1.json"), "{stdout}");
    assert!(stdout.contains("reports/demo"), "{stdout}");
    assert!(config.exists() && report.exists(), "{stdout}");
    // The inputs it ran came out of the binary, beside its outputs.
    assert!(
        empty
            .path()
            .join("runs/demo/inputs/datasets/demo/prompts.jsonl")
            .exists()
    );
}
