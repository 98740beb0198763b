//! A scratch workspace for gate-shaped tests: the example route tables,
//! variants of them, calibrations and gates run into it.

use std::path::{Path, PathBuf};

use routeval::schema::GateReport;

use super::{example_results, routeval};

/// A directory with a key pair and a calibration of the example results.
pub struct Workspace {
    pub directory: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        let workspace = Workspace {
            directory: tempfile::tempdir().unwrap(),
        };
        routeval()
            .args(["keygen", "--out"])
            .arg(workspace.path("routeval.key"))
            .assert()
            .code(0);
        routeval()
            .args(["calibrate", "--target", "0.9", "--results"])
            .arg(example_results())
            .arg("--out")
            .arg(workspace.path("calibration.json"))
            .assert()
            .code(0);
        workspace
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `routeval gate` with the example results, the calibration and the key.
    pub fn gate(
        &self,
        candidates: &[PathBuf],
        out: &str,
        extra: &[&str],
    ) -> assert_cmd::assert::Assert {
        self.gate_on(
            &example_results(),
            candidates,
            &[self.path("calibration.json")],
            out,
            extra,
        )
    }

    /// `routeval gate` with the key, on `results` with `calibrations`.
    pub fn gate_on(
        &self,
        results: &Path,
        candidates: &[PathBuf],
        calibrations: &[PathBuf],
        out: &str,
        extra: &[&str],
    ) -> assert_cmd::assert::Assert {
        routeval()
            .arg("gate")
            .arg("--candidates")
            .args(candidates)
            .arg("--results")
            .arg(results)
            .arg("--calibration")
            .args(calibrations)
            .arg("--key")
            .arg(self.path("routeval.key"))
            .arg("--rubrics")
            .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics"))
            .arg("--out")
            .arg(self.path(out))
            .args(extra)
            .args(["--at", "2026-11-29T12:00:00Z"])
            .assert()
    }

    pub fn report(&self, out: &str) -> GateReport {
        let text = std::fs::read_to_string(self.path(out).join("gate-report.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

pub fn example_routes(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("datasets/example/routes")
        .join(name)
}

/// A predictive table like the example's, with `edit` applied to its text.
pub fn variant(workspace: &Workspace, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(example_routes("predictive.toml")).unwrap();
    workspace.write(name, &edit(text))
}

/// The example's predictive table, escalating by `router_score`.
pub fn by_router(workspace: &Workspace) -> PathBuf {
    variant(workspace, "by-router.toml", |text| {
        text.replace(
            "[policy.predictive]\n",
            "[policy.predictive]\nscore = \"router_score\"\n",
        )
    })
}

/// The example results with a second score, `router_score`, beside `score`
/// (the reverse ranking, so the two escalate different rows), and the same
/// rows with that second score moved into `score`.
pub fn two_scores(workspace: &Workspace) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(example_results()).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let score_at = header.split(',').position(|name| name == "score").unwrap();
    let mut both = format!("{header},router_score\n");
    let mut moved = format!("{header}\n");
    for line in lines {
        let mut fields: Vec<String> = line.split(',').map(str::to_owned).collect();
        let router = format!("{:.3}", 1.0 - fields[score_at].parse::<f64>().unwrap());
        both.push_str(&format!("{line},{router}\n"));
        fields[score_at] = router;
        moved.push_str(&(fields.join(",") + "\n"));
    }
    (
        workspace.write("both.csv", &both),
        workspace.write("moved.csv", &moved),
    )
}

pub fn calibrate_into(results: &Path, score_col: &str, policy: &str, out: &Path) {
    routeval()
        .args(["calibrate", "--target", "0.9", "--policy", policy])
        .args(["--score-col", score_col, "--results"])
        .arg(results)
        .arg("--out")
        .arg(out)
        .assert()
        .code(0);
}
