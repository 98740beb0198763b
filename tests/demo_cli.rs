//! `routeval demo`: the whole pipeline on the embedded endpoint, as README's
//! first command runs it.

use crate::common::routeval;

#[test]
fn the_demo_runs_every_stage_and_signs_a_verified_config() {
    // From a directory with no checkout in it: the demo carries its inputs.
    let directory = tempfile::tempdir().unwrap();
    let empty = directory.path().join("anywhere");
    std::fs::create_dir_all(&empty).unwrap();
    let out = directory.path().join("runs");
    let report = directory.path().join("report");
    let assert = routeval()
        .current_dir(&empty)
        .args(["demo", "--out"])
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    for stage in [
        "== run",
        "== grade",
        "== router train",
        "== calibrate (predictive, 90% guarantee)",
        "== gate",
        "== verify",
        "== report",
    ] {
        assert!(stdout.contains(stage), "{stage} missing from:\n{stdout}");
    }
    assert!(stdout.contains("verified "), "{stdout}");
    assert!(stdout.contains("signed route config: "), "{stdout}");
    // What it ran is there to read, byte for byte the repository's.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for input in [
        "datasets/demo/prompts.jsonl",
        "datasets/demo/routes/cascade.toml",
        "rubrics/prompts/verifier.toml",
    ] {
        assert_eq!(
            std::fs::read(out.join("inputs").join(input)).unwrap(),
            std::fs::read(root.join(input)).unwrap(),
            "{input}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "the demo wrote into the current directory"
    );
    let responses =
        routeval::schema::read_all_responses(&out.join("run/responses.parquet")).unwrap();
    assert_eq!(
        responses.len(),
        1500,
        "300 prompts × small, mid, large, and the verifier of small and of mid"
    );
    assert!(
        responses.iter().any(|row| row.attempts > 1),
        "the fault profile made no call retry"
    );
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "the report has no charts");
    let gate: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate/gate-report.json")).unwrap()).unwrap();
    let candidates = gate["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 4);
    let candidate = |file: &str| {
        candidates
            .iter()
            .find(|candidate| candidate["file"].as_str().unwrap().ends_with(file))
            .unwrap()
    };
    let predictive = candidate("/predictive.toml");
    let cascade = candidate("/cascade.toml");
    // The three-tier candidate serves every request from one of its three
    // tiers, scored on the same rows as the two-tier ones.
    let three = candidate("/predictive-three-tier.toml");
    let served: Vec<f64> = three["overall"]["served"]
        .as_array()
        .unwrap()
        .iter()
        .map(|share| share.as_f64().unwrap())
        .collect();
    assert_eq!(served.len(), 3);
    assert!(
        (served.iter().sum::<f64>() - 1.0).abs() < 1e-9,
        "{served:?}"
    );
    assert_eq!(three["overall"]["n"], predictive["overall"]["n"]);
    // Each policy escalates by its own score: the router's and the
    // verifier's rank rows differently, so the two escalate different shares.
    assert_ne!(
        predictive["overall"]["escalation_rate"],
        cascade["overall"]["escalation_rate"]
    );
    // Routes on an OpenAI-compatible endpoint export as such.
    let export = out.join("gate/route-config.v1.litellm.yaml");
    let text = std::fs::read_to_string(&export).unwrap();
    assert!(
        text.contains("api_base: \"http://127.0.0.1:8089/v1\""),
        "{text}"
    );
    assert!(!text.contains("routeval-sim/"), "{text}");
    crate::common::loads_into_litellm(&export);

    // The demo writes nothing at the top of its directory it would not
    // clear, and the next demo clears that and nothing else.
    let outputs = routeval::cli::DEMO_OUTPUTS;
    let entries = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let written = entries();
    for name in &written {
        assert!(
            name == routeval::cli::DEMO_MARKER || outputs.contains(&name.as_str()),
            "the demo wrote {name}, which the next demo would not clear"
        );
    }
    // Every output and the marker, but `report/`: --report put it elsewhere.
    assert!(!written.contains(&"report".to_owned()));
    assert_eq!(written.len(), outputs.len(), "{written:?}");
    std::fs::write(out.join("notes.md"), "my notes on the demo").unwrap();
    // One of the demo's names made a link to a folder of the user's: the
    // link goes, never what it points at.
    let elsewhere = directory.path().join("my-keys");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("prod.key"), "precious").unwrap();
    std::fs::remove_dir_all(out.join("keys")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("keys")).unwrap();
    std::fs::create_dir_all(out.join("experiments")).unwrap();
    std::fs::write(out.join("experiments/try.toml"), "mine").unwrap();
    routeval()
        .current_dir(root)
        .args(["demo", "--out"])
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(out.join("notes.md")).unwrap(),
        "my notes on the demo"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("experiments/try.toml")).unwrap(),
        "mine"
    );
    assert_eq!(entries().len(), written.len() + 2);
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("prod.key")).unwrap(),
        "precious"
    );
    assert!(
        !std::fs::symlink_metadata(out.join("keys"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn with_out_alone_everything_goes_under_it_and_its_own_faults_are_no_error() {
    let directory = tempfile::tempdir().unwrap();
    let cwd = directory.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = directory.path().join("d");
    let assert = routeval()
        .current_dir(&cwd)
        .args(["demo", "--out"])
        .arg(&out)
        .assert()
        .success();
    let output = assert.get_output();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(out.join("report/report.html").is_file(), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "report: {}",
            out.join("report/report.html").display()
        )),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "wrote into the cwd"
    );
    // A flag the demo does not take is never suggested, and faults the
    // demo injects are a note, not an error.
    assert!(!stderr.contains("--retry-errors"), "{stderr}");
    assert!(
        !stderr.lines().any(|line| line.starts_with("error")),
        "{stderr}"
    );
    if stdout.contains("== run --retry-errors") {
        assert!(stderr.contains("the demo sends them again"), "{stderr}");
    }
    assert!(
        stdout.contains("its routes call http://127.0.0.1:8089/v1: start `routeval serve-sim"),
        "{stdout}"
    );
    hinted_serve_sim_starts(&stdout, &cwd);
}

/// The closing hint's serve-sim command, run as printed from the same
/// directory outside a checkout (on a free port rather than 8089, which
/// other tests may hold): it starts and serves the demo's prompts.
fn hinted_serve_sim_starts(stdout: &str, cwd: &std::path::Path) {
    let hinted = stdout
        .split("start `routeval serve-sim")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no serve-sim command in {stdout}"));
    let (mut child, first) = crate::common::first_line(
        std::process::Command::new(crate::common::binary())
            .current_dir(cwd)
            .arg("serve-sim")
            .args(hinted.split_whitespace())
            .args(["--listen", "127.0.0.1:0"])
            .stderr(std::process::Stdio::piped()),
    );
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert!(
        first.starts_with("serving ") && first.contains(" prompts on http://127.0.0.1:"),
        "{hinted}: {first}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_data_directory_that_is_not_there_is_named_and_nothing_is_written() {
    let directory = tempfile::tempdir().unwrap();
    routeval()
        .current_dir(directory.path())
        .args(["demo", "--data", "my-demo"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "my-demo: no such directory (--data)",
        ));
    assert_eq!(
        std::fs::read_dir(directory.path()).unwrap().count(),
        0,
        "nothing written"
    );
}
