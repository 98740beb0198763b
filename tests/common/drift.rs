//! A deployed config and synthetic traffic for drift-shaped tests.

use std::path::PathBuf;

use super::{Workspace, example_routes, routeval};

/// A deployed config for the example data, gated at target 0.9.
pub fn deployed() -> (Workspace, String) {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &["--target", "0.9"],
        )
        .code(0);
    let config = workspace.report("dist").emitted.unwrap().config;
    (workspace, config)
}

/// `count` slice names.
pub fn slice_names(count: usize) -> Vec<String> {
    (0..count).map(|index| format!("s{index:02}")).collect()
}

/// 1,000 synthetic rows a slice (seed 1) and the config gated on them with
/// thresholds calibrated at target 0.8, confidence 0.95, family-wise: the
/// population's later draws (other seeds) are traffic where nothing changed.
pub fn certified_synthetic(workspace: &Workspace, names: &[&str]) -> (PathBuf, String) {
    use crate::common::{synthetic_rows, write_csv};
    let baseline = workspace.path("baseline.csv");
    write_csv(&baseline, &synthetic_rows(names, 1000, 1));
    let calibration = workspace.path("calibration.json");
    routeval()
        .args([
            "calibrate",
            "--target",
            "0.8",
            "--confidence",
            "0.95",
            "--familywise",
        ])
        .arg("--results")
        .arg(&baseline)
        .arg("--out")
        .arg(&calibration)
        .assert()
        .code(0);
    workspace
        .gate_on(
            &baseline,
            &[example_routes("predictive.toml")],
            std::slice::from_ref(&calibration),
            "dist",
            &["--target", "0.8", "--allow-unknown-slices"],
        )
        .code(0);
    let config = workspace.report("dist").emitted.unwrap().config;
    (baseline, config)
}
