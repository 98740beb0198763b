//! routeval as users install it runs the main job from an empty directory,
//! with no checkout beside it: the wheel `.ci/run` builds (maturin,
//! `bindings = "bin"`) installed into a fresh venv, and `cargo install
//! --locked --path .`. `.ci/run` names the installed binaries in
//! `ROUTEVAL_INSTALLED` and `ROUTEVAL_CARGO_INSTALLED`; without them the
//! tests say they were skipped, and under `CI` they fail.

use std::process::Command;

#[test]
fn the_installed_wheel_runs_the_demo_from_an_empty_directory() {
    demo_from_an_empty_directory("ROUTEVAL_INSTALLED", "the wheel");
}

#[test]
fn the_cargo_installed_binary_runs_the_demo_from_an_empty_directory() {
    demo_from_an_empty_directory("ROUTEVAL_CARGO_INSTALLED", "cargo install");
}

fn demo_from_an_empty_directory(variable: &str, what: &str) {
    let Some(installed) = std::env::var_os(variable) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{variable} is not set; .ci/run installs routeval by {what}"
        );
        eprintln!("skipped the binary of {what}: {variable} is not set");
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
