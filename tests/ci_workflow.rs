//! The GitHub Actions workflows routeval ships, run as shipped: a scratch
//! repository laid out as ci/README.md says, the workflow and the install
//! action copied in with only the env lines the README says to set, and
//! each trigger run through the test runner (`common::actions`). The
//! routeval build is the binary under test, installed by a stand-in for
//! `cargo install` that first checks the pinned commit exists in
//! routeval's repository.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::json;

use crate::common::actions::{Conclusion, Event, Runner, WorkflowRun, git};
use crate::common::python_named_by;
use crate::common::{example_results, routeval};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Python whose `duckdb` CLI makes the scratch repository's Parquet
/// files (and that setup-python stands for); `None` when skipped.
fn workflow_python() -> Option<PathBuf> {
    python_named_by("ROUTEVAL_TEST_WORKFLOW_PYTHON", "the shipped workflows")
        .map(|python| PathBuf::from(python).parent().unwrap().to_owned())
}

fn duckdb(bin: &Path, directory: &Path, sql: &str) {
    let output = Command::new(bin.join("duckdb"))
        .args(["-c", sql])
        .current_dir(directory)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "duckdb {sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The workflow with the env lines ci/README.md step 2 says to set.
fn configured(name: &str) -> String {
    let text = std::fs::read_to_string(repo().join("ci").join(name)).unwrap();
    let head = git(repo(), &["rev-parse", "HEAD"]).trim().to_owned();
    let configured = text
        .replace(
            "ROUTEVAL_GIT: \"\" ",
            &format!("ROUTEVAL_GIT: \"{}\" ", repo().display()),
        )
        .replace("ROUTEVAL_REF: \"\" ", &format!("ROUTEVAL_REF: \"{head}\" "));
    assert_ne!(
        configured, text,
        "{name} has the env lines README step 2 names"
    );
    configured
}

/// A team's repository of route tables, and the runner its workflows run on.
struct Team {
    directory: tempfile::TempDir,
    repository: PathBuf,
    runner: Runner,
    /// What the `cargo install` stand-in was asked, one line a call.
    installs: PathBuf,
    key: PathBuf,
}

impl Team {
    /// An empty repository set up as ci/README.md says, before the first
    /// deployed config: tables, graded results, the public key, the
    /// workflow and the install action.
    fn new(python: &Path) -> Team {
        // `python`: the bin directory of the workflows' Python.
        let directory = tempfile::tempdir().unwrap();
        let repository = directory.path().join("routes-repo");
        for sub in [
            "routes",
            "graded",
            ".github/workflows",
            ".github/actions/install-routeval",
        ] {
            std::fs::create_dir_all(repository.join(sub)).unwrap();
        }
        git(&repository, &["init", "-q", "-b", "main"]);
        for table in ["predictive.toml", "always-large.toml"] {
            std::fs::copy(
                repo().join("datasets/example/routes").join(table),
                repository.join("routes").join(table),
            )
            .unwrap();
        }
        // Half the example's rows calibrate; the other half is fresh traffic
        // from the same population.
        let csv = example_results();
        duckdb(
            python,
            &repository,
            &format!(
                "COPY (SELECT * FROM read_csv_auto('{0}') WHERE CAST(split_part(id, '-', 2) AS INTEGER) % 2 = 0) TO 'graded/graded.parquet' (FORMAT parquet);
                 COPY (SELECT * FROM read_csv_auto('{0}') WHERE CAST(split_part(id, '-', 2) AS INTEGER) % 2 = 1) TO 'graded/fresh.parquet' (FORMAT parquet);",
                csv.display()
            ),
        );
        let key = directory.path().join("routeval.key");
        routeval()
            .args(["keygen", "--out"])
            .arg(&key)
            .assert()
            .code(0);
        std::fs::copy(
            key.with_extension("key.pub"),
            repository.join("routeval.pub"),
        )
        .unwrap();
        std::fs::write(
            repository.join(".github/workflows/routeval.yml"),
            configured("routeval.yml"),
        )
        .unwrap();
        std::fs::copy(
            repo().join("ci/install-routeval/action.yml"),
            repository.join(".github/actions/install-routeval/action.yml"),
        )
        .unwrap();
        std::fs::write(repository.join("README.md"), "Our route tables.\n").unwrap();
        git(&repository, &["add", "-A"]);
        git(&repository, &["commit", "-qm", "route tables"]);

        let tools = directory.path().join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        let installs = directory.path().join("installs.log");
        let cargo = tools.join("cargo");
        std::fs::write(
            &cargo,
            format!(
                "#!/bin/bash\n# Stands for cargo install: the pin must name a commit of the repository.\nset -e\necho \"$*\" >> '{log}'\n[ \"$1 $2 $3\" = 'install --locked --git' ] && [ \"$5\" = --rev ] && [ \"$7\" = routeval ] || {{ echo \"cargo: unexpected $*\" >&2; exit 101; }}\ngit -C \"$4\" cat-file -e \"$6^{{commit}}\" || {{ echo \"error: revision $6 not found in $4\" >&2; exit 101; }}\nmkdir -p \"$HOME/.cargo/bin\"\ncp '{binary}' \"$HOME/.cargo/bin/routeval\"\n",
                log = installs.display(),
                binary = crate::common::binary().display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut runner = Runner::new(&directory.path().join("runner"));
        runner.path = vec![tools];
        runner.python_bin = Some(python.to_owned());
        runner.secrets.insert(
            "ROUTEVAL_SIGNING_KEY".into(),
            json!(std::fs::read_to_string(&key).unwrap().trim_end()),
        );
        Team {
            directory,
            repository,
            runner,
            installs,
            key,
        }
    }

    fn head(&self) -> String {
        git(&self.repository, &["rev-parse", "HEAD"])
            .trim()
            .to_owned()
    }

    /// A pull request of `change` on a branch off main: its event.
    fn pull_request(
        &mut self,
        branch: &str,
        change: impl FnOnce(&Path),
        fork: bool,
    ) -> WorkflowRun {
        let base = self.head();
        git(&self.repository, &["checkout", "-q", "-b", branch]);
        change(&self.repository);
        git(&self.repository, &["add", "-A"]);
        git(&self.repository, &["commit", "-qm", branch]);
        let head = self.head();
        git(&self.repository, &["checkout", "-q", "main"]);
        let event = Event {
            name: "pull_request",
            sha: head.clone(),
            payload: json!({"pull_request": {
                "number": 12,
                "base": {"sha": base},
                "head": {"sha": head, "repo": {"fork": fork}},
            }}),
            from_fork: fork,
        };
        self.runner
            .run(&self.repository, ".github/workflows/routeval.yml", &event)
    }

    /// Merges `branch` into main and runs the push.
    fn merge(&mut self, branch: &str) -> WorkflowRun {
        let before = self.head();
        git(&self.repository, &["merge", "-q", "--ff-only", branch]);
        let event = Event {
            name: "push",
            sha: self.head(),
            payload: json!({"before": before, "after": self.head()}),
            from_fork: false,
        };
        self.runner
            .run(&self.repository, ".github/workflows/routeval.yml", &event)
    }

    fn scheduled(&mut self) -> WorkflowRun {
        self.scheduled_run(".github/workflows/routeval.yml")
    }

    fn scheduled_run(&mut self, workflow: &str) -> WorkflowRun {
        let event = Event {
            name: "schedule",
            sha: self.head(),
            payload: json!({"schedule": "on its cron"}),
            from_fork: false,
        };
        self.runner.run(&self.repository, workflow, &event)
    }

    /// `workflow_dispatch` of `workflow` on main, with `inputs`.
    fn dispatch(&mut self, workflow: &str, inputs: serde_json::Value) -> WorkflowRun {
        let event = Event {
            name: "workflow_dispatch",
            sha: self.head(),
            payload: json!({ "inputs": inputs }),
            from_fork: false,
        };
        self.runner.run(&self.repository, workflow, &event)
    }

    /// Commits `files` (path in the repository, content) to main.
    fn commit(&self, message: &str, files: &[(&str, &[u8])]) {
        for (path, content) in files {
            let path = self.repository.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        git(&self.repository, &["add", "-A"]);
        git(&self.repository, &["commit", "-qm", message]);
    }

    fn installs(&self) -> usize {
        std::fs::read_to_string(&self.installs)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }
}

/// A change that replaces `from` with `to` in the file at `path`, which
/// must hold it.
fn edit(path: &'static str, from: &'static str, to: &'static str) -> impl FnOnce(&Path) {
    move |repository: &Path| {
        let path = repository.join(path);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{} has no {from:?}", path.display());
        std::fs::write(path, text.replace(from, to)).unwrap();
    }
}

/// Copies the signed config of `artifact` to deployed/ under the name the
/// workflow reads, its signature beside it (ci/README.md, step 4).
fn promote(artifact: &Path, version: u64) -> impl FnOnce(&Path) {
    let config = artifact.join(format!("dist/route-config.v{version}.json"));
    move |repository: &Path| {
        std::fs::create_dir_all(repository.join("deployed")).unwrap();
        std::fs::copy(&config, repository.join("deployed/route-config.json")).unwrap();
        std::fs::copy(
            config.with_extension("json.minisig"),
            repository.join("deployed/route-config.json.minisig"),
        )
        .unwrap();
    }
}

/// A team through its first run: the first pull request gates with no
/// deployed config, the merge signs version 1, and the pull request that
/// deploys it is checked. Made once; each test works on a copy.
struct Deployed {
    team: Mutex<Team>,
    first_pr: WorkflowRun,
    first_merge: WorkflowRun,
    promotion: WorkflowRun,
    installs_after_first_run: usize,
}

fn deployed() -> Option<&'static Deployed> {
    static SHARED: OnceLock<Option<Deployed>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let python = workflow_python()?;
            let mut team = Team::new(&python);
            let first_pr = team.pull_request(
                "tune",
                edit(
                    "routes/predictive.toml",
                    "# A router sends",
                    "# Our router sends",
                ),
                false,
            );
            let installs_after_first_run = team.installs();
            let first_merge = team.merge("tune");
            let signed = first_merge.artifact(&format!("routeval-signed-{}", team.head()));
            let promotion = team.pull_request("deploy-v1", promote(&signed, 1), false);
            team.merge("deploy-v1");
            Some(Deployed {
                team: Mutex::new(team),
                first_pr,
                first_merge,
                promotion,
                installs_after_first_run,
            })
        })
        .as_ref()
}

#[test]
fn the_first_run_gates_without_a_deployed_config_signs_on_merge_and_checks_the_deploy() {
    let Some(deployed) = deployed() else { return };
    let gate = deployed.first_pr.job("gate");
    assert_eq!(gate.conclusion, Conclusion::Success, "{gate:?}");
    assert!(
        gate.summary
            .contains("**Decision: `predictive.toml` passes every rule.**")
            && gate
                .summary
                .contains("Not signed: this gate ran without `--key`"),
        "{}",
        gate.summary
    );
    // The first run built routeval once and cached it at once.
    assert_eq!(deployed.installs_after_first_run, 1);
    let sign = deployed.first_merge.job("sign");
    assert_eq!(sign.conclusion, Conclusion::Success, "{sign:?}");
    assert!(
        sign.summary.contains("Signed as version 1"),
        "{}",
        sign.summary
    );
    let promotion = deployed.promotion.job("gate");
    assert_eq!(promotion.conclusion, Conclusion::Success, "{promotion:?}");
    assert!(
        promotion.summary.contains("against the deployed version 1"),
        "{}",
        promotion.summary
    );
    // Later jobs restored the build instead of compiling again.
    let team = deployed
        .team
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(team.installs(), 1);
}

/// The deployed team's repository on a fresh clone, with its own runner
/// state: each scenario starts from the same main.
fn team_on_main() -> Option<std::sync::MutexGuard<'static, Team>> {
    deployed().map(|deployed| {
        deployed
            .team
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    })
}

#[test]
fn a_good_pull_request_is_green_and_says_what_it_costs() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    let run = team.pull_request(
        "resilient-mini",
        edit(
            "routes/predictive.toml",
            "base_url = \"https://example-eu.openai.azure.com/openai/v1\"",
            "base_url = \"https://example-eu-2.openai.azure.com/openai/v1\"",
        ),
        false,
    );
    let gate = run.job("gate");
    assert_eq!(gate.conclusion, Conclusion::Success, "{gate:?}");
    assert!(
        gate.summary
            .contains("**Decision: `predictive.toml` passes every rule.** Cost $")
            && gate
                .summary
                .contains("against the deployed version 1 (+0%, ceiling +10%)"),
        "{}",
        gate.summary
    );
    assert!(
        run.artifact("routeval-12")
            .join("dist/gate-report.json")
            .is_file()
    );
    assert!(
        !run.artifact("routeval-12")
            .join("dist/.routeval-gate.lock")
            .exists(),
        "the gate's lock stays out of the artifact"
    );
}

#[test]
fn a_pull_request_that_changes_no_routes_passes_without_gating() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    let run = team.pull_request(
        "docs",
        |repository| {
            std::fs::write(repository.join("README.md"), "Our tables, documented.\n").unwrap();
        },
        false,
    );
    let gate = run.job("gate");
    assert_eq!(gate.conclusion, Conclusion::Success);
    assert!(gate.summary.contains("nothing to gate"), "{}", gate.summary);
    assert_eq!(gate.step("Gate, without signing"), Conclusion::Skipped);
}

#[test]
fn a_worse_table_is_red_and_always_large_is_not_signed_in_its_place() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    let run = team.pull_request(
        "cheaper",
        edit(
            "routes/predictive.toml",
            "thresholds_from_calibration = true",
            "thresholds = { \"*\" = 0.95 }",
        ),
        false,
    );
    let gate = run.job("gate");
    assert_eq!(gate.conclusion, Conclusion::Failure);
    let summary = &gate.summary;
    assert!(
        summary.contains("**Decision: no candidate passes.**"),
        "{summary}"
    );
    let large = summary
        .lines()
        .find(|line| line.starts_with("- `always-large.toml`: Cost $"))
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        large.contains("ceiling +10%); rejected: costs $"),
        "{large}"
    );
    let predictive = summary
        .lines()
        .find(|line| line.starts_with("- `predictive.toml`:"))
        .unwrap();
    assert!(predictive.contains("rejected"), "{predictive}");
}

#[test]
fn a_pull_request_from_a_fork_gates_without_secrets() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    let run = team.pull_request(
        "fork-tune",
        edit(
            "routes/always-large.toml",
            "# Every request",
            "# Each request",
        ),
        true,
    );
    let gate = run.job("gate");
    assert_eq!(gate.conclusion, Conclusion::Success, "{gate:?}");
    assert!(
        gate.summary
            .contains("**Decision: `predictive.toml` passes every rule.**"),
        "{}",
        gate.summary
    );
}

#[test]
fn a_pull_request_that_replaces_the_deployed_config_must_succeed_it() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    // Another version 1, validly signed with the team's key.
    let rogue = team.directory.path().join("rogue");
    routeval()
        .arg("gate")
        .arg("--candidates")
        .arg(team.repository.join("routes/always-large.toml"))
        .arg("--results")
        .arg(team.repository.join("graded/graded.parquet"))
        .args(["--target", "0.9", "--key"])
        .arg(&team.key)
        .arg("--out")
        .arg(rogue.join("dist"))
        .assert()
        .code(0);
    let run = team.pull_request("rogue", promote(&rogue, 1), false);
    let gate = run.job("gate");
    assert_eq!(gate.conclusion, Conclusion::Failure);
    assert_eq!(
        gate.step("A replaced deployed config succeeds the base branch's"),
        Conclusion::Failure
    );
    assert!(
        gate.errors
            .iter()
            .any(|error| error.contains("verification failed")),
        "{:?}",
        gate.errors
    );
    assert!(
        gate.summary.contains("The gate did not reach a decision"),
        "{}",
        gate.summary
    );
}

#[test]
fn scheduled_drift_is_green_on_unchanged_traffic_and_red_with_reasons_on_drifted() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    let run = team.scheduled();
    let drift = run.job("drift");
    assert_eq!(drift.conclusion, Conclusion::Success, "{drift:?}");
    // The drift verdicts, then the report's summary.
    let verdicts = drift.summary.find("## routeval drift: ");
    let report = drift.summary.find("## Scheduled drift check");
    assert!(
        verdicts.is_some() && report.is_some() && verdicts < report,
        "{}",
        drift.summary
    );
    // Not due: the deployed config verifies a week from now.
    let renew = run.job("renew");
    assert_eq!(renew.conclusion, Conclusion::Success, "{renew:?}");
    assert!(
        renew.summary.contains("no renewal due"),
        "{}",
        renew.summary
    );
    // The small model fails the technical slice's middle: fresh traffic drifts.
    let python = workflow_python().unwrap();
    let fresh = team.repository.join("graded/fresh.parquet");
    duckdb(
        &python,
        &team.repository,
        "COPY (SELECT * REPLACE (CASE WHEN slice = 'technical' AND score > 0.2 THEN false ELSE small_ok END AS small_ok) FROM 'graded/fresh.parquet') TO 'graded/drifted.parquet' (FORMAT parquet);",
    );
    std::fs::rename(team.repository.join("graded/drifted.parquet"), &fresh).unwrap();
    git(&team.repository, &["commit", "-qam", "fresh traffic"]);
    let run = team.scheduled();
    git(&team.repository, &["reset", "-q", "--hard", "HEAD~1"]);
    let drift = run.job("drift");
    assert_eq!(drift.conclusion, Conclusion::Failure);
    assert!(
        drift.summary.contains("technical"),
        "the drifted slice is named: {}",
        drift.summary
    );
}

#[test]
fn renewal_when_due_signs_the_next_version_without_quadrupling_cost() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    // The team deployed a config that lives three days.
    let short = team.directory.path().join("short");
    let calibration = team.directory.path().join("calibration-for-short.json");
    routeval()
        .args([
            "calibrate",
            "--target",
            "0.9",
            "--confidence",
            "0.95",
            "--results",
        ])
        .arg(team.repository.join("graded/graded.parquet"))
        .arg("--out")
        .arg(&calibration)
        .assert()
        .code(0);
    routeval()
        .arg("gate")
        .arg("--candidates")
        .arg(team.repository.join("routes/predictive.toml"))
        .arg("--results")
        .arg(team.repository.join("graded/graded.parquet"))
        .arg("--calibration")
        .arg(&calibration)
        .args([
            "--target",
            "0.9",
            "--confidence",
            "0.95",
            "--ttl-days",
            "3",
            "--baseline",
        ])
        .arg(team.repository.join("deployed/route-config.json"))
        .arg("--pubkey")
        .arg(team.repository.join("routeval.pub"))
        .arg("--key")
        .arg(&team.key)
        .arg("--out")
        .arg(short.join("dist"))
        .assert()
        .code(0);
    promote(&short, 2)(&team.repository);
    git(&team.repository, &["add", "-A"]);
    git(&team.repository, &["commit", "-qm", "deploy v2"]);
    let run = team.scheduled();
    git(&team.repository, &["reset", "-q", "--hard", "HEAD~1"]);
    let renew = run.job("renew");
    assert_eq!(renew.conclusion, Conclusion::Success, "{renew:?}");
    let report: routeval::schema::GateReport = serde_json::from_str(
        &std::fs::read_to_string(
            run.artifact("routeval-renewal-4242")
                .join("renewal/gate-report.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let chosen = report.chosen.clone().unwrap();
    assert!(!chosen.ends_with("always-large.toml"), "{chosen}");
    let change = report
        .candidates
        .iter()
        .find(|candidate| candidate.file == chosen)
        .unwrap()
        .cost_change
        .clone()
        .unwrap();
    assert!(change.increase.unwrap() <= 0.1, "{change:?}");
    assert_eq!(report.emitted.unwrap().version, 3);
    // The way back to v2 is signed with it, and shipped without the lock.
    let renewal = run.artifact("routeval-renewal-4242").join("renewal");
    assert!(renewal.join("rollback/route-config.v4.json").is_file());
    assert!(
        renewal
            .join("rollback/route-config.v4.json.minisig")
            .is_file()
    );
    assert!(!renewal.join("rollback/.routeval-gate.lock").exists());
}

#[test]
fn every_shipped_workflow_lints_clean_and_matches_github_schemas() {
    let Some(node_modules) = std::env::var_os("ROUTEVAL_TEST_NODE_MODULES") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "the workflow lint: ROUTEVAL_TEST_NODE_MODULES is not set; .ci/run sets it"
        );
        eprintln!("skipped the workflow lint: ROUTEVAL_TEST_NODE_MODULES is not set");
        return;
    };
    let files = [
        "ci/routeval.yml",
        "ci/records-drift.yml",
        "ci/shard-matrix.yml",
        "ci/install-routeval/action.yml",
    ];
    let output = Command::new("node")
        .arg(repo().join("tests/fixtures/lint_workflows.cjs"))
        .args(files.iter().map(|file| repo().join(file)))
        .env("NODE_PATH", node_modules)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_records_query_ci_ships_is_the_one_the_docs_explain() {
    let shipped = std::fs::read_to_string(repo().join("ci/records-aggregate.sql")).unwrap();
    let docs = std::fs::read_to_string(repo().join("docs/records-sql.md")).unwrap();
    assert!(docs.contains(&format!("```sql\n{shipped}```")), "{shipped}");
}

/// The deployed config's records of the example's rows over the last hour,
/// as serve writes them, made Parquet as a warehouse export is: `shift`
/// added to the technical slice's router scores.
fn records_of_the_last_hour(team: &Team, python: &Path, shift: f64) -> Vec<u8> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (_, records) = crate::common::records_from_results(
        &team.repository.join("deployed/route-config.json"),
        &example_results(),
        "technical",
        shift,
        now_ms - 3_600_000,
    );
    let scratch = team.directory.path().join(format!("records-{shift}"));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("records.jsonl"), records.join("\n") + "\n").unwrap();
    duckdb(
        python,
        &scratch,
        "COPY (SELECT *, 'stop' AS finish_reason FROM read_json_auto('records.jsonl')) TO 'records.parquet' (FORMAT parquet);",
    );
    std::fs::read(scratch.join("records.parquet")).unwrap()
}

#[test]
fn hourly_records_drift_is_green_on_steady_records_and_red_on_a_shifted_slice() {
    let Some(mut team) = team_on_main() else {
        return;
    };
    let python = workflow_python().unwrap();
    let workflow = configured("records-drift.yml");
    let query = std::fs::read(repo().join("ci/records-aggregate.sql")).unwrap();
    let steady = records_of_the_last_hour(&team, &python, 0.0);
    // The team's own step (a bucket sync) has put the records under records/.
    team.commit(
        "records drift",
        &[
            (
                ".github/workflows/routeval-records.yml",
                workflow.as_bytes(),
            ),
            ("records/aggregate.sql", &query),
            ("records/last-hour.parquet", &steady),
        ],
    );
    let run = team.scheduled_run(".github/workflows/routeval-records.yml");
    let job = run.job("drift-records");
    assert_eq!(job.conclusion, Conclusion::Success, "{job:?}");
    assert!(
        job.summary.contains("## Drift from request records: ok")
            && job.summary.contains("3200 requests in"),
        "{}",
        job.summary
    );
    let shifted = records_of_the_last_hour(&team, &python, 0.3);
    team.commit(
        "shifted records",
        &[("records/last-hour.parquet", &shifted)],
    );
    let run = team.scheduled_run(".github/workflows/routeval-records.yml");
    git(&team.repository, &["reset", "-q", "--hard", "HEAD~2"]);
    let job = run.job("drift-records");
    assert_eq!(job.conclusion, Conclusion::Failure);
    let table_row = job
        .summary
        .lines()
        .find(|line| line.starts_with("| technical |"))
        .unwrap_or_else(|| panic!("{}", job.summary));
    assert!(table_row.contains("recalibrate"), "{table_row}");
    for steady_slice in ["billing", "legal", "sales"] {
        let row = job
            .summary
            .lines()
            .find(|line| line.starts_with(&format!("| {steady_slice} |")))
            .unwrap();
        assert!(!row.contains("recalibrate"), "{row}");
    }
    assert!(
        run.artifact("routeval-records-drift-4242")
            .join("drift-records.json")
            .is_file()
    );
}

/// A dispatch of the sharded run at `shards` shards against serve-sim
/// answering one call in five with a 400 no retry can fix; the team is
/// kept for the artifacts in its directory.
fn sharded_run(shards: usize) -> Option<(Team, WorkflowRun, usize)> {
    let python = workflow_python()?;
    let mut team = Team::new(&python);
    let dataset = crate::common::write_dataset(team.directory.path(), 24);
    let sim = crate::common::start_sim(
        &dataset,
        routeval::upstream_sim::SimSettings {
            faults: routeval::upstream_sim::FaultProfile {
                bad_request: 0.2,
                ..Default::default()
            },
            require_key: Some("sk-team".to_owned()),
            ..Default::default()
        },
    );
    let config_directory = team.directory.path().join("config");
    std::fs::create_dir_all(&config_directory).unwrap();
    let config = crate::common::write_config(
        &config_directory,
        &crate::common::base_url(&sim),
        &crate::common::Tuning {
            verifier: false,
            key_env: Some("OPENAI_API_KEY"),
            ..Default::default()
        },
    );
    crate::common::copy_tree(&repo().join("rubrics"), &team.repository.join("rubrics"));
    team.commit(
        "a labelling run",
        &[
            (
                ".github/workflows/routeval-shards.yml",
                configured("shard-matrix.yml").as_bytes(),
            ),
            (
                "datasets/labelling.jsonl",
                &std::fs::read(&dataset).unwrap(),
            ),
            ("routeval.toml", &std::fs::read(&config).unwrap()),
        ],
    );
    team.runner
        .secrets
        .insert("OPENAI_API_KEY".into(), json!("sk-team"));
    let run = team.dispatch(
        ".github/workflows/routeval-shards.yml",
        json!({ "shards": shards.to_string() }),
    );
    drop(sim);
    Some((team, run, 24))
}

/// The answered and errored calls a run's manifest counts.
fn answered_and_errors(run_directory: &Path) -> (u64, u64) {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_directory.join("manifest.json")).unwrap())
            .unwrap();
    manifest["tiers"]
        .as_object()
        .unwrap()
        .values()
        .fold((0, 0), |(answered, errors), tier| {
            (
                answered + tier["answered"].as_u64().unwrap(),
                errors + tier["errors"].as_u64().unwrap(),
            )
        })
}

fn shards_keep_their_answers_and_merge(shards: usize) {
    let Some((_team, run, prompts)) = sharded_run(shards) else {
        return;
    };
    assert_eq!(
        run.job("plan").conclusion,
        Conclusion::Success,
        "{:?}",
        run.jobs
    );
    let runs: Vec<_> = run.jobs.iter().filter(|job| job.job == "run").collect();
    assert_eq!(runs.len(), shards, "one job a shard: {:?}", run.jobs);
    let (mut answered, mut errors) = (0, 0);
    for shard in 1..=shards {
        let uploaded = run.artifact(&format!("shard-{shard}"));
        let (shard_answered, shard_errors) = answered_and_errors(&uploaded);
        answered += shard_answered;
        errors += shard_errors;
        // A shard with failed calls fails its job, and still uploads what
        // it paid for.
        let job = &runs[shard - 1];
        let expected = if shard_errors > 0 {
            Conclusion::Failure
        } else {
            Conclusion::Success
        };
        assert_eq!(job.conclusion, expected, "shard {shard}: {job:?}");
    }
    assert!(errors > 0, "the endpoint refused some calls");
    let merge = run.job("merge");
    assert_eq!(merge.conclusion, Conclusion::Success, "{merge:?}");
    let merged = run.artifact("merged-run");
    assert_eq!(answered_and_errors(&merged), (answered, errors));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(merged.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["prompts"], prompts);
}

#[test]
fn two_shards_against_a_faulty_endpoint_keep_their_answers_and_merge() {
    shards_keep_their_answers_and_merge(2);
}

#[test]
fn four_shards_against_a_faulty_endpoint_keep_their_answers_and_merge() {
    shards_keep_their_answers_and_merge(4);
}
