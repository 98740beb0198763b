//! The gate against the deployed config's cost: a costlier table fails
//! unless its change accepts the increase; a gate without a key chooses and
//! signs nothing; a renewal can keep the deployed table as it was signed.

use std::path::PathBuf;
use std::sync::OnceLock;

use routeval::routes::RouteConfig;
use routeval::schema::{GateReport, Rule};

use crate::common::{Workspace, example_results, example_routes, routeval, variant};

/// A workspace whose predictive table was gated and signed as version 1.
struct Deployed {
    workspace: Workspace,
    config: PathBuf,
}

impl Deployed {
    fn shared() -> &'static Deployed {
        static SHARED: OnceLock<Deployed> = OnceLock::new();
        SHARED.get_or_init(|| {
            let workspace = Workspace::new();
            workspace
                .gate(
                    &[example_routes("predictive.toml")],
                    "v1",
                    &["--target", "0.9"],
                )
                .code(0);
            let config = workspace.path("v1").join("route-config.v1.json");
            Deployed { workspace, config }
        })
    }

    /// The gate against the deployed config, into `out`.
    fn gate(&self, candidates: &[PathBuf], out: &str, extra: &[&str]) -> (i32, GateReport) {
        let mut flags = vec![
            "--target",
            "0.9",
            "--baseline",
            self.config.to_str().unwrap(),
        ];
        flags.extend_from_slice(extra);
        let code = self
            .workspace
            .gate(candidates, out, &flags)
            .get_output()
            .status
            .code()
            .unwrap();
        (code, self.workspace.report(out))
    }
}

fn candidate<'a>(report: &'a GateReport, suffix: &str) -> &'a routeval::schema::CandidateReport {
    report
        .candidates
        .iter()
        .find(|candidate| candidate.file.ends_with(suffix))
        .unwrap()
}

#[test]
fn a_table_costlier_than_the_deployed_config_fails_and_the_decision_leads_with_its_cost() {
    let deployed = Deployed::shared();
    let (code, report) = deployed.gate(&[example_routes("always-large.toml")], "large", &[]);
    assert_eq!(code, 1);
    assert_eq!(report.chosen, None);
    let large = candidate(&report, "always-large.toml");
    let change = large.cost_change.as_ref().unwrap();
    // Always-large against the calibrated predictive table on the same rows.
    assert!(
        change.mean_cost > 3.0 * change.baseline_mean_cost,
        "{change:?}"
    );
    assert_eq!(change.ceiling, 0.1);
    assert_eq!(change.ceiling_from, "--max-cost-increase");
    let failure = large
        .failures
        .iter()
        .find(|failure| failure.rule == Rule::CostIncrease)
        .unwrap();
    assert!(
        failure
            .message
            .contains("above the ceiling of +10% (--max-cost-increase)"),
        "{}",
        failure.message
    );
    let markdown =
        std::fs::read_to_string(deployed.workspace.path("large").join("gate-report.md")).unwrap();
    let decision = markdown
        .lines()
        .position(|line| line.starts_with("**Decision: no candidate passes.**"))
        .unwrap();
    assert!(
        decision <= 4,
        "the decision comes before anything else:\n{markdown}"
    );
    let line = &markdown.lines().nth(decision + 2).unwrap();
    let expected = format!(
        "- `always-large.toml`: Cost ${:.2} → ${:.2} per 1k requests against the deployed version 1 (+{:.0}%, ceiling +10%); rejected: costs ${:.2}",
        change.baseline_mean_cost * 1000.0,
        change.mean_cost * 1000.0,
        (change.mean_cost / change.baseline_mean_cost - 1.0) * 100.0,
        change.mean_cost * 1000.0,
    );
    assert!(line.starts_with(&expected), "{line}\n{expected}");
}

#[test]
fn a_table_that_accepts_the_increase_passes_and_so_does_a_wider_flag() {
    let deployed = Deployed::shared();
    let accepting = variant(&deployed.workspace, "accepting-large.toml", |_| {
        std::fs::read_to_string(example_routes("always-large.toml")).unwrap()
            + "\n[gate]\naccept_cost_increase = 4.0\n"
    });
    let (code, report) = deployed.gate(&[accepting], "accepted", &[]);
    assert_eq!(code, 0, "{report:?}");
    let change = candidate(&report, "accepting-large.toml")
        .cost_change
        .clone()
        .unwrap();
    assert_eq!(
        (change.ceiling, change.ceiling_from.as_str()),
        (4.0, "[gate] accept_cost_increase")
    );
    let (code, _) = deployed.gate(
        &[example_routes("always-large.toml")],
        "wider",
        &["--max-cost-increase", "4"],
    );
    assert_eq!(code, 0);
    // A table's own line is what the reviewer approves: it is checked.
    let invalid = variant(&deployed.workspace, "negative.toml", |text| {
        text + "\n[gate]\naccept_cost_increase = -1\n"
    });
    deployed
        .workspace
        .gate(&[invalid], "invalid", &["--target", "0.9"])
        .code(2)
        .stderr(predicates::str::contains(
            "gate.accept_cost_increase must be a number of at least 0",
        ));
}

#[test]
fn without_a_key_the_gate_chooses_and_reports_and_signs_nothing() {
    let deployed = Deployed::shared();
    let out = deployed.workspace.path("unsigned");
    let gate = || {
        let mut command = routeval();
        command
            .args(["gate", "--candidates"])
            .arg(example_routes("predictive.toml"))
            .arg(example_routes("always-large.toml"))
            .arg("--results")
            .arg(example_results())
            .arg("--calibration")
            .arg(deployed.workspace.path("calibration.json"))
            .args(["--target", "0.9", "--baseline"])
            .arg(&deployed.config)
            .arg("--out")
            .arg(&out);
        command
    };
    gate().assert().code(2).stderr(predicates::str::contains(
        "--baseline must verify; give the public key it was signed with as --pubkey",
    ));
    gate()
        .arg("--pubkey")
        .arg(deployed.workspace.path("routeval.key.pub"))
        .assert()
        .code(0);
    let report: GateReport =
        serde_json::from_str(&std::fs::read_to_string(out.join("gate-report.json")).unwrap())
            .unwrap();
    assert!(
        report
            .chosen
            .as_deref()
            .unwrap()
            .ends_with("predictive.toml")
    );
    assert_eq!((report.signed, report.emitted), (false, None));
    let written: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert_eq!(written.len(), 2, "only the reports: {written:?}");
    let markdown = std::fs::read_to_string(out.join("gate-report.md")).unwrap();
    assert!(
        markdown.contains("Not signed: this gate ran without `--key`"),
        "{markdown}"
    );
}

#[test]
fn a_renewal_keeps_the_deployed_table_while_it_still_passes() {
    let deployed = Deployed::shared();
    // A table that regresses against the deployed one, and always-large, too
    // costly: only the deployed table itself passes.
    let worse = variant(&deployed.workspace, "worse.toml", |text| {
        text.replace(
            "thresholds_from_calibration = true",
            "thresholds = { \"*\" = 0.95 }",
        )
    });
    let (code, report) = deployed.gate(
        &[worse, example_routes("always-large.toml")],
        "renewal",
        &["--include-baseline"],
    );
    assert_eq!(code, 0, "{report:?}");
    assert_eq!(
        report.chosen.as_deref(),
        Some(deployed.config.to_str().unwrap())
    );
    let renewed: RouteConfig = serde_json::from_str(
        &std::fs::read_to_string(
            deployed
                .workspace
                .path("renewal")
                .join("route-config.v2.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let before: RouteConfig =
        serde_json::from_str(&std::fs::read_to_string(&deployed.config).unwrap()).unwrap();
    assert_eq!(renewed.table, before.table);
    assert_eq!(renewed.serving, before.serving);
    assert_eq!(renewed.version, 2);
    // It needs a deployed config to keep.
    routeval()
        .args(["gate", "--include-baseline", "--candidates", "a.toml"])
        .args(["--results", "r.csv", "--target", "0.9", "--out", "o"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--baseline"));
}
