//! The safety pass through the CLI: routeval never writes over an input, a
//! symbolic link, a FIFO or a device; the demo clears only its own
//! directory; signed configs are never replaced; checks that used to pass
//! wrongly now refuse; stdout failures and hostile slice names are handled.

use std::path::{Path, PathBuf};

use predicates::prelude::*;

use crate::common::{Row, example_results, routeval, synthetic_rows, write_csv};
use crate::common::{Workspace, example_routes, variant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Asserts exit 2 with one stderr line containing `expected`.
fn refused(assert: assert_cmd::assert::Assert, expected: &str) {
    let output = assert.get_output();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
}

fn results_copy(directory: &Path) -> (PathBuf, Vec<u8>) {
    let path = directory.join("results.csv");
    std::fs::copy(example_results(), &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// `routeval calibrate` of `results`, printing to stdout.
fn calibrate(results: &Path) -> assert_cmd::assert::Assert {
    routeval()
        .args(["calibrate", "--target", "0.5", "--results"])
        .arg(results)
        .assert()
}

fn calibrate_into(results: &Path, out: &Path) -> assert_cmd::assert::Assert {
    routeval()
        .args(["calibrate", "--target", "0.9", "--results"])
        .arg(results)
        .arg("--out")
        .arg(out)
        .assert()
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let directory = tempfile::tempdir().unwrap();
    let (results, before) = results_copy(directory.path());
    refused(
        calibrate_into(&results, &results),
        "is also an input (--results)",
    );
    // Another spelling of the same file is the same file.
    let spelled = directory.path().join(".").join("results.csv");
    refused(
        calibrate_into(&results, &spelled),
        "is also an input (--results)",
    );
    let router = directory.path().join("router.bin");
    refused(
        routeval()
            .args(["router", "train", "--results"])
            .arg(&results)
            .arg("--out")
            .arg(&router)
            .arg("--scored-out")
            .arg(&results)
            .assert(),
        "is also an input (--results)",
    );
    refused(
        routeval()
            .args(["drift", "--config", "deployed.json", "--results"])
            .arg(&results)
            .arg("--out")
            .arg(&results)
            .assert(),
        "is also an input (--results)",
    );
    refused(
        routeval()
            .args(["import", "generic", "--input"])
            .arg(&results)
            .arg("--out")
            .arg(&results)
            .assert(),
        "is also an input (--input)",
    );
    assert_eq!(std::fs::read(&results).unwrap(), before);
    assert!(!router.exists(), "nothing half-written");
}

#[cfg(unix)]
#[test]
fn links_fifos_devices_and_directories_are_never_written() {
    let directory = tempfile::tempdir().unwrap();
    let (results, _) = results_copy(directory.path());
    let target = directory.path().join("precious.txt");
    std::fs::write(&target, "keep me").unwrap();
    let link = directory.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(calibrate_into(&results, &link), "is a symbolic link");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());

    let fifo = directory.path().join("fifo.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    refused(calibrate_into(&results, &fifo), "is a FIFO");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &std::fs::symlink_metadata(&fifo).unwrap().file_type()
    ));

    // A null device of our own (not /dev/null: were the check to fail, the
    // machine's would be replaced).
    let device = directory.path().join("null.json");
    let made = std::process::Command::new("mknod")
        .arg(&device)
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    if made.success() {
        refused(calibrate_into(&results, &device), "is a device");
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(
            &std::fs::symlink_metadata(&device).unwrap().file_type()
        ));
    } else {
        eprintln!("skipped the device case: mknod needs root");
    }
    refused(calibrate_into(&results, directory.path()), "is a directory");

    // Every output is checked, then staged, before any is written.
    let router = directory.path().join("router.bin");
    let output = routeval()
        .args(["router", "train", "--results"])
        .arg(&results)
        .arg("--out")
        .arg(&router)
        .args(["--scored-out", "/proc/routeval-cannot-write-here.parquet"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(!router.exists(), "the router was written without its table");
}

#[test]
fn the_demo_refuses_any_directory_it_did_not_make() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    std::fs::create_dir_all(data.join("routes")).unwrap();
    for entry in std::fs::read_dir(repo().join("datasets/demo")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), data.join(entry.file_name())).unwrap();
        }
    }
    let user_file = directory.path().join("notes.txt");
    std::fs::write(&user_file, "mine").unwrap();
    let demo = |out: &Path, cwd: &Path| {
        routeval()
            .current_dir(cwd)
            .arg("demo")
            .arg("--data")
            .arg(&data)
            .arg("--rubrics")
            .arg(repo().join("rubrics"))
            .arg("--out")
            .arg(out)
            .assert()
    };
    let nested = directory.path().join("work");
    std::fs::create_dir_all(&nested).unwrap();
    refused(
        demo(Path::new("."), directory.path()),
        "holds the current directory",
    );
    refused(
        demo(Path::new(".."), &nested),
        "holds the current directory",
    );
    refused(
        demo(&directory.path().join("data"), &nested),
        "holds the demo's input",
    );
    let mine = directory.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("results.csv"), "precious").unwrap();
    refused(
        demo(&mine, &nested),
        "was not made by the demo (no .routeval-demo); the demo clears only its own directory: give a new or empty --out\n",
    );

    assert_eq!(std::fs::read_to_string(&user_file).unwrap(), "mine");
    assert_eq!(
        std::fs::read_to_string(mine.join("results.csv")).unwrap(),
        "precious"
    );
    assert!(data.join("prompts.jsonl").exists());
    assert!(nested.exists());
}

#[test]
fn a_signed_config_is_never_overwritten() {
    let workspace = Workspace::new();
    let candidates = [example_routes("predictive.toml")];
    workspace
        .gate(&candidates, "dist", &["--target", "0.9"])
        .code(0);
    let config = workspace.path("dist").join("route-config.v1.json");
    let signed = std::fs::read(&config).unwrap();
    let report = std::fs::read(workspace.path("dist").join("gate-report.json")).unwrap();
    refused(
        workspace.gate(&candidates, "dist", &["--target", "0.85"]),
        "signed route configs are never overwritten",
    );
    assert_eq!(std::fs::read(&config).unwrap(), signed);
    assert_eq!(
        std::fs::read(workspace.path("dist").join("gate-report.json")).unwrap(),
        report,
        "nothing else was written either"
    );
    // With the deployed config as its baseline, the gate writes the next
    // version beside it.
    workspace
        .gate(
            &candidates,
            "dist",
            &["--target", "0.9", "--baseline", config.to_str().unwrap()],
        )
        .code(0);
    assert!(workspace.path("dist").join("route-config.v2.json").exists());
    assert_eq!(std::fs::read(&config).unwrap(), signed);
}

#[test]
fn constraints_naming_unknown_slices_are_refused() {
    let workspace = Workspace::new();
    let constraints = workspace.write("constraints.toml", "[biling]\nregions = [\"us-east-1\"]\n");
    let flags = [
        "--target",
        "0.9",
        "--constraints",
        constraints.to_str().unwrap(),
    ];
    refused(
        workspace.gate(&[example_routes("predictive.toml")], "dist", &flags),
        "constraints name slice \"biling\", which the results do not have",
    );
    assert!(!workspace.path("dist").exists());
    let typo_in_table = variant(&workspace, "typo.toml", |text| {
        text + "\n[constraints.sale]\nroutes = [\"mini\"]\n"
    });
    refused(
        workspace.gate(&[typo_in_table], "dist", &["--target", "0.9"]),
        "constraints name slice \"sale\"",
    );
    let mut allowed = flags.to_vec();
    allowed.push("--allow-unknown-slices");
    workspace
        .gate(&[example_routes("predictive.toml")], "dist", &allowed)
        .code(0);
}

#[test]
fn thresholds_naming_unknown_slices_are_refused() {
    let workspace = Workspace::new();
    let typo = variant(&workspace, "typo-threshold.toml", |text| {
        text.replace(
            "thresholds_from_calibration = true",
            "[policy.predictive.thresholds]\n\"*\" = 0.6\nbiling = 0.9\nlegal = 0.5",
        )
    });
    refused(
        workspace.gate(std::slice::from_ref(&typo), "dist", &["--target", "0.5"]),
        "the policy gives slice \"biling\" thresholds or a route of its own, but the results do not have it",
    );
    assert!(!workspace.path("dist").exists());
    let right = variant(&workspace, "right-threshold.toml", |text| {
        text.replace(
            "thresholds_from_calibration = true",
            "[policy.predictive.thresholds]\n\"*\" = 0.6\nbilling = 0.9\nlegal = 0.5",
        )
    });
    workspace
        .gate(&[right], "dist", &["--target", "0.5"])
        .code(0);
    workspace
        .gate(
            &[typo],
            "dist-allowed",
            &["--target", "0.5", "--allow-unknown-slices"],
        )
        .code(0);
}

#[test]
fn signing_flags_are_bounded_and_the_clock_is_not_an_environment_variable() {
    let workspace = Workspace::new();
    let candidates = [example_routes("predictive.toml")];
    for (flags, message) in [
        (
            vec!["--ttl-days", "0"],
            "invalid value '0' for '--ttl-days <DAYS>': 0 is not in 1..=3650",
        ),
        (
            vec!["--ttl-days", "100000000"],
            "invalid value '100000000' for '--ttl-days <DAYS>': 100000000 is not in 1..=3650",
        ),
        (
            vec!["--dataset-sha256", "not-a-digest"],
            "error: invalid value 'not-a-digest' for '--dataset-sha256 <HEX>': \"not-a-digest\": a sha256 is 64 hexadecimal digits",
        ),
    ] {
        let mut all = vec!["--target", "0.9"];
        all.extend(flags);
        refused(workspace.gate(&candidates, "refused", &all), message);
    }
    assert!(!workspace.path("refused").exists());

    // Signed now (no --at), valid for 30 days.
    routeval()
        .args(["gate", "--target", "0.9", "--candidates"])
        .args(&candidates)
        .arg("--results")
        .arg(example_results())
        .arg("--calibration")
        .arg(workspace.path("calibration.json"))
        .arg("--key")
        .arg(workspace.path("routeval.key"))
        .arg("--out")
        .arg(workspace.path("now"))
        .env("ROUTEVAL_NOW", "2000-01-01T00:00:00Z")
        .assert()
        .code(0);
    let config = workspace.path("now").join("route-config.v1.json");
    let parsed: routeval::routes::RouteConfig =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert!(
        parsed.created_at.as_str() > "2026-01-01",
        "ROUTEVAL_NOW set the signing clock: {}",
        parsed.created_at
    );
    let verify = || {
        let mut command = routeval();
        command
            .arg("verify")
            .arg(&config)
            .arg("--pubkey")
            .arg(workspace.path("routeval.key.pub"));
        command
    };
    // The variable no longer moves the clock past the expiry.
    verify()
        .env("ROUTEVAL_NOW", "2099-01-01T00:00:00Z")
        .assert()
        .code(0);
    // --at does, and says so.
    verify()
        .args(["--at", "2099-01-01T00:00:00Z"])
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("expired at").and(predicate::str::contains(
                "(as of 2099-01-01T00:00:00Z, --at)",
            )),
        );
}

#[test]
fn documents_of_unknown_schema_versions_are_refused() {
    let workspace = Workspace::new();
    let text = std::fs::read_to_string(workspace.path("calibration.json")).unwrap();
    let future = workspace.write(
        "future.json",
        &text.replacen(
            &format!(
                "\"schema_version\": {}",
                routeval::schema::CALIBRATION_SCHEMA_VERSION
            ),
            "\"schema_version\": 99",
            1,
        ),
    );
    assert_ne!(text, std::fs::read_to_string(&future).unwrap());
    refused(
        workspace.gate_on(
            &example_results(),
            &[example_routes("predictive.toml")],
            std::slice::from_ref(&future),
            "dist",
            &["--target", "0.9"],
        ),
        &format!(
            "schema_version 99 is not one this routeval reads (1 to {})",
            routeval::schema::CALIBRATION_SCHEMA_VERSION
        ),
    );
    refused(
        routeval()
            .arg("report")
            .arg("--results")
            .arg(example_results())
            .arg("--calibration")
            .arg(&future)
            .arg("--out")
            .arg(workspace.path("report"))
            .assert(),
        "schema_version 99 is not one this routeval reads",
    );
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &["--target", "0.9"],
        )
        .code(0);
    let config = workspace.path("dist").join("route-config.v1.json");
    let text = std::fs::read_to_string(&config).unwrap();
    let future_config = workspace.write(
        "future-config.json",
        &text.replacen("routeval.route-config/4", "routeval.route-config/9", 1),
    );
    refused(
        routeval()
            .arg("drift")
            .arg("--config")
            .arg(&future_config)
            .arg("--results")
            .arg(example_results())
            .assert(),
        "schema_version \"routeval.route-config/9\" is not one this routeval reads",
    );
    let report = std::fs::read_to_string(workspace.path("dist").join("gate-report.json")).unwrap();
    let future_report = workspace.write(
        "future-report.json",
        &report.replacen(
            &format!(
                "\"schema_version\": {}",
                routeval::schema::GATE_REPORT_SCHEMA_VERSION
            ),
            "\"schema_version\": 99",
            1,
        ),
    );
    assert!(
        std::fs::read_to_string(&future_report)
            .unwrap()
            .contains("\"schema_version\": 99")
    );
    refused(
        routeval()
            .arg("report")
            .arg("--results")
            .arg(example_results())
            .arg("--gate")
            .arg(&future_report)
            .arg("--out")
            .arg(workspace.path("report"))
            .assert(),
        "schema_version 99 is not one this routeval reads",
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_stdout_that_cannot_be_written_is_an_error() {
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full");
    if full().is_err() {
        assert!(std::env::var_os("CI").is_none(), "/dev/full is missing");
        eprintln!("skipped: no /dev/full");
        return;
    }
    let (workspace, config) = crate::common::deployed();
    let results = example_results();
    let commands: Vec<Vec<std::ffi::OsString>> = vec![
        vec![
            "calibrate".into(),
            "--target".into(),
            "0.9".into(),
            "--results".into(),
            results.clone().into(),
        ],
        vec![
            "evaluate".into(),
            "--json".into(),
            "--results".into(),
            results.clone().into(),
        ],
        vec![
            "simulate".into(),
            "--requests".into(),
            "200".into(),
            "--compare".into(),
        ],
        vec![
            "drift".into(),
            "--json".into(),
            "--config".into(),
            config.clone().into(),
            "--results".into(),
            results.clone().into(),
        ],
        vec![
            "verify".into(),
            config.into(),
            "--pubkey".into(),
            workspace.path("routeval.key.pub").into(),
        ],
    ];
    for arguments in commands {
        let output = std::process::Command::new(crate::common::binary())
            .args(&arguments)
            .stdout(full().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(
            stderr.contains("cannot write to stdout"),
            "{arguments:?}: {stderr}"
        );
    }
}

#[test]
fn slice_names_cannot_break_the_markdown_a_reviewer_reads() {
    let directory = tempfile::tempdir().unwrap();
    let hostile = "a|b <img src=x onerror=alert(1)>";
    let mut rows: Vec<Row> = synthetic_rows(&["plain"], 300, 5);
    for row in synthetic_rows(&["hostile"], 300, 6) {
        rows.push(Row {
            id: format!("h-{}", row.id),
            slice: hostile.to_owned(),
            ..row
        });
    }
    let results = directory.path().join("results.csv");
    write_csv(&results, &rows);
    let calibration = directory.path().join("calibration.json");
    routeval()
        .args(["calibrate", "--target", "0.5", "--results"])
        .arg(&results)
        .arg("--out")
        .arg(&calibration)
        .assert()
        .code(0);
    let key = directory.path().join("k.key");
    routeval()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .assert()
        .code(0);
    let table = directory.path().join("table.toml");
    let text = std::fs::read_to_string(example_routes("predictive.toml")).unwrap();
    std::fs::write(&table, text).unwrap();
    routeval()
        .args([
            "gate",
            "--target",
            "0.5",
            "--allow-unknown-slices",
            "--candidates",
        ])
        .arg(&table)
        .arg("--results")
        .arg(&results)
        .arg("--calibration")
        .arg(&calibration)
        .arg("--key")
        .arg(&key)
        .arg("--out")
        .arg(directory.path().join("gate"))
        .assert()
        .code(0);
    routeval()
        .arg("report")
        .arg("--results")
        .arg(&results)
        .arg("--calibration")
        .arg(&calibration)
        .arg("--out")
        .arg(directory.path().join("report"))
        .assert()
        .code(0);
    for markdown in [
        directory.path().join("report").join("summary.md"),
        directory.path().join("gate").join("gate-report.md"),
    ] {
        let text = std::fs::read_to_string(&markdown).unwrap();
        assert!(!text.contains("<img"), "{}: {text}", markdown.display());
        assert!(!text.contains("a|b"), "{}: {text}", markdown.display());
        // Every table row still has the header's number of cells.
        for block in text.split("\n\n").filter(|block| block.starts_with('|')) {
            let cells = |line: &str| line.replace("\\|", "").matches('|').count();
            let lines: Vec<&str> = block.lines().collect();
            for line in &lines {
                assert_eq!(
                    cells(line),
                    cells(lines[0]),
                    "{}: {line}",
                    markdown.display()
                );
            }
        }
    }
    let summary =
        std::fs::read_to_string(directory.path().join("report").join("summary.md")).unwrap();
    assert!(
        summary.contains("a\\|b &lt;img src=x onerror=alert(1)&gt;"),
        "{summary}"
    );
}

#[test]
fn validation_is_the_same_in_every_stage() {
    let directory = tempfile::tempdir().unwrap();
    // A negative latency: calibrate refuses it as gate and drift do.
    let text = std::fs::read_to_string(example_results()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let fields: Vec<&str> = lines[3].split(',').collect();
    let mut changed: Vec<String> = fields.iter().map(|field| (*field).to_owned()).collect();
    changed[9] = "-5".to_owned();
    lines[3] = changed.join(",");
    let negative = directory.path().join("negative.csv");
    std::fs::write(&negative, lines.join("\n") + "\n").unwrap();
    refused(
        calibrate(&negative),
        "line 4, column \"small_ms\": latency must be a finite, non-negative number of ms, found -5",
    );
    // A key given twice in a JSON line, as a column twice in CSV.
    let twice = directory.path().join("twice.jsonl");
    std::fs::write(
        &twice,
        "{\"id\":\"a\",\"slice\":\"s\",\"score\":0.1,\"small_ok\":true,\"large_ok\":true,\"cost_small\":1,\"cost_large\":2}\n{\"id\":\"b\",\"slice\":\"s\",\"score\":0.2,\"score\":0.9,\"small_ok\":true,\"large_ok\":true,\"cost_small\":1,\"cost_large\":2}\n",
    )
    .unwrap();
    refused(
        calibrate(&twice),
        "line 2: not a JSON object: key \"score\" appears more than once",
    );
    // Bytes that are not UTF-8 are named by line.
    let binary = directory.path().join("binary.jsonl");
    std::fs::write(
        &binary,
        b"{\"id\":\"a\",\"slice\":\"s\",\"score\":0.1,\"small_ok\":true,\"large_ok\":true,\"cost_small\":1,\"cost_large\":2}\n{\"id\":\"\xff\"}\n",
    )
    .unwrap();
    refused(calibrate(&binary), "binary.jsonl: line 2: not UTF-8 text");
    let results = example_results();
    let train = |extra: &[&str]| {
        routeval()
            .args(["router", "train", "--results"])
            .arg(&results)
            .arg("--out")
            .arg(directory.path().join("r.bin"))
            .args(extra)
            .assert()
    };
    refused(
        train(&["--into", ""]),
        "for '--into <NAME>': a column name cannot be empty",
    );
    refused(
        train(&["--folds", "18446744073709551615"]),
        "for '--folds <K>': 18446744073709551615: folds are from 2 to 100",
    );
    assert!(!directory.path().join("r.bin").exists());
    refused(
        routeval()
            .args([
                "simulate",
                "--input-tokens",
                "18446744073709551615",
                "--out",
            ])
            .arg(directory.path().join("sim.parquet"))
            .assert(),
        "--input-tokens makes a call cost more than 1e6 USD",
    );
    assert!(!directory.path().join("sim.parquet").exists());
}

#[test]
fn error_messages_name_the_file_and_the_flag() {
    let directory = tempfile::tempdir().unwrap();
    let scores = directory.path().join("scores.csv");
    std::fs::write(&scores, b"id,router_score\nbilling-0000,\xff\xfe\n").unwrap();
    refused(
        routeval()
            .args([
                "router",
                "join",
                "--scores-col",
                "router_score",
                "--results",
            ])
            .arg(example_results())
            .arg("--scores")
            .arg(&scores)
            .arg("--out")
            .arg(directory.path().join("joined.parquet"))
            .assert(),
        "scores.csv",
    );
    refused(
        routeval()
            .args(["import", "generic", "--map", "score=nosuch", "--input"])
            .arg(example_results())
            .arg("--out")
            .arg(directory.path().join("imported.parquet"))
            .assert(),
        "column \"score\" collides with the column renamed by --map",
    );
    // The example results with a prompt column, for the router.
    let text = std::fs::read_to_string(example_results()).unwrap();
    let with_prompts: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(index, line)| {
            if index == 0 {
                format!("{line},prompt")
            } else {
                let id = line.split(',').next().unwrap();
                format!("{line},question about {id}")
            }
        })
        .collect();
    let prompted = directory.path().join("prompted.csv");
    std::fs::write(&prompted, with_prompts.join("\n") + "\n").unwrap();
    let truncated = directory.path().join("router.bin");
    routeval()
        .args(["router", "train", "--results"])
        .arg(&prompted)
        .arg("--out")
        .arg(&truncated)
        .assert()
        .code(0);
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let output = routeval()
        .args(["router", "score", "--router"])
        .arg(&truncated)
        .arg("--results")
        .arg(&prompted)
        .arg("--out")
        .arg(directory.path().join("scored.parquet"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("router.bin") && stderr.contains("cut short"),
        "{stderr}"
    );
}

#[test]
fn a_baseline_must_verify_name_the_same_logical_model_and_leave_room_for_a_version() {
    use routeval::routes::{RouteConfig, load_secret, sign, signature_path};
    let workspace = Workspace::new();
    let candidates = [example_routes("predictive.toml")];
    workspace
        .gate(&candidates, "deployed", &["--target", "0.9"])
        .code(0);
    let deployed = workspace.path("deployed").join("route-config.v1.json");
    let signed = std::fs::read(&deployed).unwrap();
    let baseline_gate = |baseline: &Path, out: &str| {
        workspace.gate(
            &candidates,
            out,
            &["--target", "0.9", "--baseline", baseline.to_str().unwrap()],
        )
    };
    // Edited to be another logical model's, and so unsigned.
    let mut value: serde_json::Value = serde_json::from_slice(&signed).unwrap();
    value["table"]["logical_model"] = "support-slow".into();
    let edited = workspace.path("edited/route-config.v1.json");
    std::fs::create_dir_all(edited.parent().unwrap()).unwrap();
    std::fs::write(&edited, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    std::fs::copy(signature_path(&deployed), signature_path(&edited)).unwrap();
    refused(
        baseline_gate(&edited, "from-edited"),
        "(--baseline must be a config signed with",
    );
    assert!(!workspace.path("from-edited").exists());
    // Signed, by the right key, but of another logical model.
    let other = variant(&workspace, "other-model.toml", |text| {
        text.replace(
            "logical_model = \"support-fast\"",
            "logical_model = \"support-slow\"",
        )
    });
    workspace
        .gate(&[other], "other", &["--target", "0.9"])
        .code(0);
    refused(
        baseline_gate(
            &workspace.path("other").join("route-config.v1.json"),
            "from-other",
        ),
        "routes logical model \"support-fast\", but --baseline",
    );
    // Signed by another key.
    routeval()
        .args(["keygen", "--out"])
        .arg(workspace.path("other.key"))
        .assert()
        .code(0);
    let resign = |bytes: &[u8], key: &str, path: &Path| {
        let config: RouteConfig = serde_json::from_slice(bytes).unwrap();
        let sha256 = routeval::digest::sha256_hex(bytes);
        let secret = load_secret(&workspace.path(key)).unwrap();
        let signature = sign(&secret, bytes, &config.trusted_comment(&sha256)).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        std::fs::write(signature_path(path), signature).unwrap();
    };
    let other_key = workspace.path("other-key/route-config.v1.json");
    resign(&signed, "other.key", &other_key);
    refused(
        baseline_gate(&other_key, "from-other-key"),
        "(--baseline must be a config signed with",
    );
    // Signed, at the last version there is: the next one would wrap to 0.
    let mut last: RouteConfig = serde_json::from_slice(&signed).unwrap();
    last.version = u64::MAX;
    let final_version = workspace.path("last/route-config.v18446744073709551615.json");
    resign(
        &serde_json::to_vec_pretty(&last).unwrap(),
        "routeval.key",
        &final_version,
    );
    refused(
        baseline_gate(&final_version, "from-last"),
        "version 18446744073709551615 is the last a config can have (--baseline)",
    );
    assert!(!workspace.path("from-last").exists());
    // The deployed config itself is a baseline, and verify checks the chain
    // with the previous config's own signature.
    baseline_gate(&deployed, "next").code(0);
    let next = workspace.path("next").join("route-config.v2.json");
    let public = workspace.path("routeval.key.pub");
    let verify = |previous: &Path| {
        routeval()
            .arg("verify")
            .arg(&next)
            .arg("--pubkey")
            .arg(&public)
            .arg("--previous")
            .arg(previous)
            .assert()
    };
    verify(&deployed).code(0);
    let forged = workspace.path("forged/route-config.v1.json");
    std::fs::create_dir_all(forged.parent().unwrap()).unwrap();
    let mut forged_bytes = signed.clone();
    forged_bytes.push(b'\n');
    std::fs::write(&forged, &forged_bytes).unwrap();
    std::fs::copy(signature_path(&deployed), signature_path(&forged)).unwrap();
    verify(&forged)
        .code(predicates::ord::gt(0))
        .stderr(predicate::str::contains("--previous:"));
}

#[cfg(target_os = "linux")]
#[test]
fn a_gate_killed_at_any_step_of_its_commit_completes_on_the_next_run() {
    let strace = std::path::PathBuf::from("/usr/bin/strace");
    assert!(
        strace.exists(),
        "this test kills the gate with strace: apt-get install strace"
    );
    let workspace = Workspace::new();
    let candidates = [example_routes("predictive.toml")];
    let gate_args = |out: &Path| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["gate".into(), "--candidates".into()];
        args.extend(candidates.iter().map(Into::into));
        args.extend([
            "--results".into(),
            example_results().into(),
            "--calibration".into(),
            workspace.path("calibration.json").into(),
            "--key".into(),
            workspace.path("routeval.key").into(),
            "--target".into(),
            "0.9".into(),
            // So the export is written, and its commit killed too.
            "--serve-url".into(),
            "http://127.0.0.1:8090/v1".into(),
            "--out".into(),
            out.into(),
        ]);
        args
    };
    let binary = crate::common::binary();
    // The four renames (signature, export, both reports), then the link
    // that puts the config in place.
    let kills = [
        "inject=rename:signal=KILL:when=1",
        "inject=rename:signal=KILL:when=2",
        "inject=rename:signal=KILL:when=3",
        "inject=rename:signal=KILL:when=4",
        "inject=link,linkat:signal=KILL",
    ];
    for (index, kill) in kills.iter().enumerate() {
        let out = workspace.path(&format!("killed-{index}"));
        let killed = std::process::Command::new(&strace)
            .args([
                "-f",
                "-qq",
                "-o",
                "/dev/null",
                "-e",
                "trace=rename,link,linkat",
                "-e",
                kill,
            ])
            .arg(&binary)
            .args(gate_args(&out))
            .output()
            .unwrap();
        assert!(!killed.status.success(), "{kill}: not killed");
        let config = out.join("route-config.v1.json");
        assert!(
            !config.exists(),
            "{kill}: the config landed before the rest"
        );
        let rerun = routeval().args(gate_args(&out)).output().unwrap();
        assert_eq!(
            rerun.status.code(),
            Some(0),
            "{kill}: {}",
            String::from_utf8_lossy(&rerun.stderr)
        );
        routeval()
            .arg("verify")
            .arg(&config)
            .arg("--pubkey")
            .arg(workspace.path("routeval.key.pub"))
            .assert()
            .code(0);
        for file in [
            "route-config.v1.json.minisig",
            "route-config.v1.litellm.yaml",
            "gate-report.json",
        ] {
            assert!(out.join(file).exists(), "{kill}: {file} missing");
        }
        // And once complete, never again.
        refused(
            routeval().args(gate_args(&out)).assert(),
            "signed route configs are never overwritten",
        );
    }
    // A file of the signature's name that no gate wrote is left alone.
    let foreign = workspace.path("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("route-config.v1.json.minisig"), "mine").unwrap();
    refused(
        routeval().args(gate_args(&foreign)).assert(),
        "exists and is not what a gate of version 1 leaves",
    );
    assert_eq!(
        std::fs::read_to_string(foreign.join("route-config.v1.json.minisig")).unwrap(),
        "mine"
    );
}

#[test]
fn two_gates_into_one_directory_never_both_sign_a_version() {
    let workspace = Workspace::new();
    let binary = crate::common::binary();
    for trial in 0..8 {
        let out = workspace.path(&format!("race-{trial}"));
        let spawn = || {
            std::process::Command::new(&binary)
                .arg("gate")
                .arg("--candidates")
                .arg(example_routes("predictive.toml"))
                .arg("--results")
                .arg(example_results())
                .arg("--calibration")
                .arg(workspace.path("calibration.json"))
                .arg("--key")
                .arg(workspace.path("routeval.key"))
                .args(["--target", "0.9", "--out"])
                .arg(&out)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (first, second) = (spawn(), spawn());
        let outputs = [
            first.wait_with_output().unwrap(),
            second.wait_with_output().unwrap(),
        ];
        let signed = outputs
            .iter()
            .filter(|output| String::from_utf8_lossy(&output.stdout).contains("emitted"))
            .count();
        assert_eq!(
            signed, 1,
            "trial {trial}: {signed} gates said they signed v1"
        );
        assert!(
            outputs.iter().any(|output| output.status.code() == Some(2)),
            "trial {trial}"
        );
    }
}
