//! The one rule for every writer, through the CLI: an existing file is
//! replaced only when it is routeval's own output of the same kind; a signed
//! config, its signature and a run's files are never replaced; every refusal
//! is one line naming the file, exit 2, and the file is left as it was.

use std::path::{Path, PathBuf};

use crate::common::deployed;
use crate::common::example_routes;
use crate::common::flowing;
use crate::common::run_command;
use crate::common::{example_results, routeval};
use crate::common::{table_with_fallback, write_day};

/// Asserts exit 2 with one stderr line naming `path` and containing
/// `expected`, and that `path` still holds `before`.
fn refused_and_kept(output: std::process::Output, path: &Path, before: &[u8], expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&path.display().to_string()) && stderr.contains(expected),
        "expected {} and {expected:?} in {stderr}",
        path.display()
    );
    assert_eq!(std::fs::read(path).unwrap(), before, "{}", path.display());
}

fn succeeded(what: &str, output: &std::process::Output) {
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A writer of one kind of output: the command that writes it, given
/// `--out` last.
struct Writer {
    name: &'static str,
    args: Vec<std::ffi::OsString>,
}

impl Writer {
    fn new(name: &'static str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Writer {
        Writer {
            name,
            args: args.iter().map(|arg| arg.as_ref().to_owned()).collect(),
        }
    }

    fn command(&self, out: &Path) -> std::process::Output {
        routeval()
            .args(&self.args)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    }
}

fn writers(directory: &Path) -> Vec<Writer> {
    let records = directory.join("day.jsonl");
    write_day(&records);
    let routes = table_with_fallback(directory);
    let prompts = directory.join("prompts.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|index| {
            serde_json::json!({
                "id": format!("r-{index}"),
                "timestamp": 1_764_504_000_000u64 + index * 1000,
                "slice": "support",
                "route": "primary",
                "status": 200,
                "prompt": format!("question number {index}"),
            })
            .to_string()
        })
        .collect();
    std::fs::write(&prompts, lines.join("\n") + "\n").unwrap();
    let trace = directory.join("trace.jsonl");
    let requests: Vec<String> = (0..50)
        .map(|index| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 1024, \"output_length\": 64, \"hash_ids\": [{}, {}]}}",
                index * 100,
                index % 3,
                index
            )
        })
        .collect();
    std::fs::write(&trace, requests.join("\n") + "\n").unwrap();
    let results = example_results();
    vec![
        Writer::new(
            "replay replicas",
            &[
                &"replay",
                &"replicas",
                &"--replicas",
                &"2",
                &"--trace",
                &trace,
            ],
        ),
        Writer::new(
            "calibrate",
            &[&"calibrate", &"--target", &"0.9", &"--results", &results],
        ),
        Writer::new(
            "replay hedge",
            &[&"replay", &"hedge", &"--records", &records],
        ),
        Writer::new(
            "replay fallback",
            &[
                &"replay",
                &"fallback",
                &"--records",
                &records,
                &"--routes",
                &routes,
                &"--route",
                &"primary",
                &"--fallback",
                &"backup",
            ],
        ),
        Writer::new(
            "sample",
            &[&"sample", &"--records", &prompts, &"--per-slice", &"3"],
        ),
        Writer::new(
            "records import",
            &[
                &"records", &"import", &"--from", &"generic", &"--input", &records,
            ],
        ),
        Writer::new("simulate", &[&"simulate", &"--requests", &"200"]),
    ]
}

#[test]
fn every_writer_replaces_its_own_output_and_nothing_else() {
    let directory = tempfile::tempdir().unwrap();
    let writers = writers(directory.path());
    let written: Vec<PathBuf> = writers
        .iter()
        .map(|writer| {
            let out = directory
                .path()
                .join(format!("{}.out", writer.name.replace(' ', "-")));
            succeeded(writer.name, &writer.command(&out));
            // Written again, it replaces what it wrote before.
            succeeded(writer.name, &writer.command(&out));
            assert!(out.exists(), "{}", writer.name);
            out
        })
        .collect();
    let notes = directory.path().join("notes.txt");
    std::fs::write(&notes, "my notes").unwrap();
    for writer in &writers {
        refused_and_kept(
            writer.command(&notes),
            &notes,
            b"my notes",
            "routeval replaces only its own output of the same kind",
        );
        // Another writer's output is not this one's, however much like it.
        for other in &written {
            if other.file_stem().unwrap().to_string_lossy() == writer.name.replace(' ', "-") {
                continue;
            }
            let before = std::fs::read(other).unwrap();
            refused_and_kept(
                writer.command(other),
                other,
                &before,
                "routeval replaces only its own output of the same kind",
            );
        }
    }
    // A report's two pages are its own kind too.
    let report = |out: &Path| {
        routeval()
            .arg("report")
            .arg("--results")
            .arg(example_results())
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let pages = directory.path().join("report");
    succeeded("report", &report(&pages));
    succeeded("report", &report(&pages));
    let mine = directory.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("summary.md"), "# my summary").unwrap();
    refused_and_kept(
        report(&mine),
        &mine.join("summary.md"),
        b"# my summary",
        "is not a report summary routeval wrote",
    );
    assert!(!mine.join("report.html").exists(), "nothing half-written");
    // Pages an earlier version wrote, before they carried a mark, are still
    // known as the report's own.
    let earlier = directory.path().join("earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::write(
        earlier.join("report.html"),
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>routeval report</title><style>body{}</style></head><body><h1>routeval report</h1><p>Graded results <code>graded.csv</code>: 3200 rows, sha256 <code>ab</code>. Generated by routeval 0.1.0.</p></body></html>\n",
    )
    .unwrap();
    std::fs::write(
        earlier.join("summary.md"),
        "## routeval report\n\n`graded.csv`: 3200 rows. Full report with charts: `earlier/report.html`.\n",
    )
    .unwrap();
    succeeded("report over an earlier version's", &report(&earlier));
    assert!(
        std::fs::read_to_string(earlier.join("summary.md"))
            .unwrap()
            .starts_with("<!-- routeval report summary -->")
    );
}

#[test]
fn signed_configs_and_their_signatures_are_never_replaced() {
    let (workspace, config) = deployed();
    let config = PathBuf::from(config);
    let signature = PathBuf::from(format!("{}.minisig", config.display()));
    let (config_bytes, signature_bytes) = (
        std::fs::read(&config).unwrap(),
        std::fs::read(&signature).unwrap(),
    );
    let writers = writers(workspace.path("").as_path());
    for writer in &writers {
        for (path, before) in [(&config, &config_bytes), (&signature, &signature_bytes)] {
            refused_and_kept(writer.command(path), path, before, "never replaced");
        }
    }
    // A gate's reports are its own kind: a user's file of that name stays.
    std::fs::create_dir_all(workspace.path("mine")).unwrap();
    let mine = workspace.path("mine").join("gate-report.md");
    std::fs::write(&mine, "## my review\n").unwrap();
    let output = workspace
        .gate(
            &[example_routes("predictive.toml")],
            "mine",
            &["--target", "0.9"],
        )
        .get_output()
        .clone();
    refused_and_kept(
        output,
        &mine,
        b"## my review\n",
        "is not a gate report routeval wrote",
    );
    assert!(!workspace.path("mine").join("route-config.v1.json").exists());
    let records = workspace.path("day.jsonl");
    let routes = workspace.path("routes.toml");
    for written in [&config, &signature] {
        let output = routeval()
            .args(["replay", "fallback", "--records"])
            .arg(&records)
            .arg("--routes")
            .arg(&routes)
            .args(["--route", "primary", "--fallback", "backup"])
            .args(["--calibrate", "--write-routes"])
            .arg(written)
            .output()
            .unwrap();
        let before = std::fs::read(written).unwrap();
        refused_and_kept(output, written, &before, "never replaced");
    }
    routeval()
        .arg("verify")
        .arg(&config)
        .args(["--at", "2026-11-30T00:00:00Z"])
        .arg("--pubkey")
        .arg(workspace.path("routeval.key.pub"))
        .assert()
        .code(0);
}

#[test]
fn a_runs_files_are_written_by_the_run_alone() {
    let directory = tempfile::tempdir().unwrap();
    let (_sim, dataset, config) = flowing(directory.path(), 12, 0, 0.0, 4);
    let run = directory.path().join("run");
    run_command(&config, &dataset, &run, &directory.path().join("cache"))
        .assert()
        .success();
    let manifest = run.join("manifest.json");
    let responses = run.join("responses.parquet");
    let (manifest_bytes, responses_bytes) = (
        std::fs::read(&manifest).unwrap(),
        std::fs::read(&responses).unwrap(),
    );
    let output = routeval()
        .args(["records", "import", "--from", "run", "--input"])
        .arg(&run)
        .arg("--out")
        .arg(&manifest)
        .output()
        .unwrap();
    refused_and_kept(output, &manifest, &manifest_bytes, "belongs to the run in");
    let output = routeval()
        .args(["replay", "replicas", "--replicas", "2", "--from-run"])
        .arg(&run)
        .arg("--out")
        .arg(&responses)
        .output()
        .unwrap();
    refused_and_kept(
        output,
        &responses,
        &responses_bytes,
        "belongs to the run in",
    );
    // Nor a new file among the run's parts, where the next resume would
    // take it for one of its own.
    let part = run.join("parts").join("part-extra.parquet");
    let output = routeval()
        .args(["simulate", "--requests", "50", "--out"])
        .arg(&part)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("belongs to the run in"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!part.exists());
    // Graded results beside the run's own files, as the README grades, may
    // be written and written again.
    let grade = || {
        routeval()
            .arg("grade")
            .arg("--run")
            .arg(&run)
            .arg("--dataset")
            .arg(&dataset)
            .arg("--rubrics")
            .arg(crate::common::repo().join("rubrics"))
            .arg("--out")
            .arg(run.join("graded.parquet"))
            .output()
            .unwrap()
    };
    succeeded("grade", &grade());
    succeeded("grade", &grade());
    assert_eq!(std::fs::read(&manifest).unwrap(), manifest_bytes);
    assert_eq!(std::fs::read(&responses).unwrap(), responses_bytes);
}
