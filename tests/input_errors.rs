//! Bad input: one line on stderr naming the file, column and row, exit code
//! 2, and no output written.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use crate::common::{
    HEADER, csv_line, record_batch, routeval, synthetic_rows, write_parquet_batch,
};

/// A CSV with a valid header and rows, where `edit` may rewrite line `line`
/// (1-based, the header is line 1).
fn csv_with(edit: impl Fn(usize, String) -> String) -> String {
    let rows = synthetic_rows(&["s"], 6, 9);
    let mut lines = vec![HEADER.to_owned()];
    lines.extend(rows.iter().map(csv_line));
    let edited: Vec<String> = lines
        .into_iter()
        .enumerate()
        .map(|(index, line)| edit(index + 1, line))
        .collect();
    edited.join("\n") + "\n"
}

fn replace_field(line: String, field: usize, value: &str) -> String {
    let mut fields: Vec<&str> = line.split(',').collect();
    fields[field] = value;
    fields.join(",")
}

const TARGET: &[&str] = &["--target", "0.9"];

/// Runs calibrate on `file` with `--out` and checks the failure contract.
fn assert_rejected(directory: &Path, file: &str, flags: &[&str], expected: &str) {
    let out = directory.join("calibration.json");
    let output = routeval()
        .arg("calibrate")
        .args(flags)
        .arg("--results")
        .arg(directory.join(file))
        .arg("--out")
        .arg(&out)
        .current_dir(directory)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{file}: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{file}: one line, got {stderr:?}"
    );
    assert!(
        stderr.contains(expected),
        "{file}: expected {expected:?} in {stderr:?}"
    );
    assert!(!out.exists(), "{file}: nothing may be written");
    assert!(
        output.stdout.is_empty(),
        "{file}: nothing printed on stdout"
    );
}

#[test]
fn bad_csv_cells_name_file_line_and_column() {
    let directory = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "nan.csv",
            csv_with(|line, text| if line == 4 { replace_field(text, 2, "NaN") } else { text }),
            "nan.csv: line 4, column \"score\": score must be finite, found NaN",
        ),
        (
            "inf.csv",
            csv_with(|line, text| if line == 3 { replace_field(text, 2, "-inf") } else { text }),
            "inf.csv: line 3, column \"score\": score must be finite, found -inf",
        ),
        (
            "negative.csv",
            csv_with(|line, text| if line == 2 { replace_field(text, 6, "-0.1") } else { text }),
            "negative.csv: line 2, column \"cost_large\": cost must be a finite, non-negative number of USD, found -0.1",
        ),
        (
            "huge.csv",
            csv_with(|line, text| if line == 5 { replace_field(text, 5, "2e9") } else { text }),
            "huge.csv: line 5, column \"cost_small\": cost 2000000000 USD exceeds the per-call limit",
        ),
        (
            "duplicate.csv",
            csv_with(|line, text| if line == 6 { replace_field(text, 0, "s-1") } else { text }),
            "duplicate.csv: line 6, column \"id\": duplicate id \"s-1\", first seen at line 3",
        ),
        (
            "no-slice.csv",
            csv_with(|line, text| if line == 7 { replace_field(text, 1, "") } else { text }),
            "no-slice.csv: line 7, column \"slice\": missing value",
        ),
        (
            "blank-slice.csv",
            csv_with(|line, text| if line == 7 { replace_field(text, 1, "  ") } else { text }),
            "blank-slice.csv: line 7, column \"slice\": empty value",
        ),
        (
            "flag.csv",
            csv_with(|line, text| if line == 2 { replace_field(text, 3, "yes") } else { text }),
            "flag.csv: line 2, column \"small_ok\": expected true or false, found \"yes\"",
        ),
        (
            "word.csv",
            csv_with(|line, text| if line == 3 { replace_field(text, 2, "high") } else { text }),
            "word.csv: line 3, column \"score\": expected a number, found \"high\"",
        ),
        (
            "short.csv",
            csv_with(|line, text| if line == 3 { text.rsplit_once(',').unwrap().0.to_owned() } else { text }),
            "short.csv: line 3: 8 fields where the header has 9",
        ),
        (
            "missing.csv",
            csv_with(|line, text| if line == 1 { text.replace(",large_ok", ",large") } else { text }),
            "missing.csv: missing column \"large_ok\"",
        ),
        (
            "case.csv",
            csv_with(|line, text| if line == 1 { text.replace(",score,", ",Score,") } else { text }),
            "case.csv: missing column \"score\"; found \"Score\", names are case-sensitive",
        ),
        ("header-only.csv", format!("{HEADER}\n"), "header-only.csv: the file has no rows"),
        ("empty.csv", String::new(), "empty.csv: the file has no rows"),
        (
            "bad.jsonl",
            "{\"id\": \"a\"}\n{not json\n".to_owned(),
            "bad.jsonl: line 2: not a JSON object",
        ),
        (
            "typed.jsonl",
            "{\"id\":\"a\",\"slice\":\"s\",\"score\":\"0.5\",\"small_ok\":true,\"large_ok\":true,\"cost_small\":0,\"cost_large\":0}\n".to_owned(),
            "typed.jsonl: line 1, column \"score\": expected a number, found \"0.5\"",
        ),
        (
            "gap.jsonl",
            "{\"id\":\"a\",\"slice\":\"s\",\"score\":0.5,\"small_ok\":true,\"large_ok\":true,\"cost_small\":0,\"cost_large\":0}\n\n{\"id\":\"b\",\"slice\":\"s\",\"small_ok\":true,\"large_ok\":true,\"cost_small\":0,\"cost_large\":0}\n".to_owned(),
            "gap.jsonl: line 3, column \"score\": missing value",
        ),
        ("notes.txt", "hello\n".to_owned(), "notes.txt: unknown file format"),
        ("broken.parquet", "PAR1 but not really".to_owned(), "broken.parquet: not a readable Parquet file"),
    ];
    for (file, contents, expected) in cases {
        std::fs::write(directory.path().join(file), contents).unwrap();
        assert_rejected(directory.path(), file, TARGET, expected);
    }
}

#[test]
fn unreadable_paths_are_named() {
    let directory = tempfile::tempdir().unwrap();
    assert_rejected(
        directory.path(),
        "absent.csv",
        TARGET,
        "absent.csv: cannot read:",
    );
    std::fs::create_dir(directory.path().join("folder.csv")).unwrap();
    assert_rejected(
        directory.path(),
        "folder.csv",
        TARGET,
        "folder.csv: cannot read:",
    );
}

#[test]
fn commands_that_read_rubrics_name_the_flag_outside_a_checkout() {
    // The run and dataset named are there (the rubrics are what is
    // missing); each is refused before the rubrics when it is not.
    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir(empty.path().join("r")).unwrap();
    std::fs::write(empty.path().join("d.jsonl"), "").unwrap();
    let commands: [&[&str]; 2] = [
        &["grade", "--run", "r", "--out", "g.parquet"],
        &["serve-sim", "--dataset", "d.jsonl"],
    ];
    for command in commands {
        let output = routeval()
            .current_dir(empty.path())
            .args(command)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command:?}: {stderr}");
        assert!(
            stderr
                .starts_with("error: rubrics: no such directory (--rubrics, ./rubrics by default;"),
            "{command:?}: {stderr}"
        );
    }
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 2);
}

#[test]
fn bad_parquet_columns_name_type_and_row() {
    let directory = tempfile::tempdir().unwrap();
    let batch = record_batch(&synthetic_rows(&["s"], 5, 10));

    let text_scores: ArrayRef = Arc::new(StringArray::from(vec!["0.1"; 5]));
    let mut columns = batch.columns().to_vec();
    columns[2] = text_scores;
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|field| field.as_ref().clone())
        .collect();
    fields[2] = Field::new("score", DataType::Utf8, false);
    let mistyped = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    write_parquet_batch(&directory.path().join("mistyped.parquet"), &mistyped);
    assert_rejected(
        directory.path(),
        "mistyped.parquet",
        TARGET,
        "mistyped.parquet: column \"score\" has type Utf8, expected f64",
    );

    let mut rows = synthetic_rows(&["s"], 5, 10);
    rows[1].score = f64::NAN;
    write_parquet_batch(&directory.path().join("nan.parquet"), &record_batch(&rows));
    assert_rejected(
        directory.path(),
        "nan.parquet",
        TARGET,
        "nan.parquet: row 2, column \"score\": score must be finite, found NaN",
    );
}

#[test]
fn out_of_range_flags_are_usage_errors() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("ok.csv"), csv_with(|_, text| text)).unwrap();
    let cases = [
        (
            vec!["--target", "2"],
            "invalid value '2' for '--target <Q>': 2: a target is above 0 and at most 1",
        ),
        (
            vec!["--target", "0.9", "--confidence", "0"],
            "invalid value '0' for '--confidence <C>': 0: a confidence is between 0 and 1",
        ),
        (
            vec!["--target", "0.9", "--holdout", "1"],
            "invalid value '1' for '--holdout <F>': 1: a fraction is between 0 and 1",
        ),
        (
            vec!["--target", "0.9", "--holdout", "0.999999999"],
            "slice \"s\" has no calibration rows once --holdout 0.999999999 is set aside",
        ),
    ];
    for (flags, expected) in cases {
        assert_rejected(directory.path(), "ok.csv", &flags, expected);
    }
}

#[test]
fn a_missing_argument_is_named_on_the_one_line() {
    let output = routeval()
        .args([
            "replay",
            "fallback",
            "--records",
            "r.jsonl",
            "--route",
            "primary",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: the following required arguments were not provided: --fallback <ROUTE>"
    );
}

/// The completion scripts and the manual page come from the same clap
/// definitions: every command is in them, bash accepts its script, and
/// groff renders the page without a warning.
#[test]
fn completions_and_the_man_page_know_every_command() {
    let commands = [
        "demo",
        "run",
        "merge",
        "grade",
        "calibrate",
        "gate",
        "keygen",
        "verify",
        "drift",
        "report",
        "import",
        "router",
        "evaluate",
        "serve-sim",
        "simulate",
        "replay",
        "records",
        "sample",
        "completions",
        "man",
    ];
    let stdout = |args: &[&str]| {
        let output = routeval().args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let bash = stdout(&["completions", "bash"]);
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = stdout(&["completions", shell]);
        assert!(script.contains("max-regression"), "{shell}");
    }
    let man = stdout(&["man"]);
    assert!(man.contains(".TH routeval"), "{man:.200}");
    for command in commands {
        assert!(bash.contains(command), "bash completion lacks {command}");
        // roff writes a hyphen as `\-`.
        assert!(
            man.contains(&command.replace('-', "\\-")),
            "the man page lacks {command}"
        );
    }
    // A command's own page has its flags.
    let gate = stdout(&["man", "gate"]);
    assert!(
        gate.contains(".TH routeval-gate") && gate.contains("max\\-regression"),
        "{gate:.300}"
    );
    let fallback = stdout(&["man", "replay", "fallback"]);
    assert!(fallback.contains("write\\-routes"), "{fallback:.300}");
    let unknown = routeval().args(["man", "gait"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    let directory = tempfile::tempdir().unwrap();
    let script = directory.path().join("routeval.bash");
    std::fs::write(&script, &bash).unwrap();
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // Sourced, it registers the completion function for `routeval`.
    let sourced = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p routeval",
            script.display()
        ))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sourced.stdout).contains("routeval"),
        "{}",
        String::from_utf8_lossy(&sourced.stderr)
    );
    if let Ok(rendered) = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        let mut rendered = rendered;
        rendered
            .stdin
            .take()
            .unwrap()
            .write_all(man.as_bytes())
            .unwrap();
        let output = rendered.wait_with_output().unwrap();
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "groff: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The one line a usage error gets, and its exit code.
fn usage_error(args: &[&str], directory: &Path) -> (Option<i32>, String) {
    let output = routeval()
        .current_dir(directory)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_typo_keeps_clap_s_tip_on_the_one_line() {
    let directory = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (
            &["calibrate", "--result", "r.parquet"][..],
            "error: unexpected argument '--result' found (tip: a similar argument exists: '--results')\n",
        ),
        (
            &["calibrat"][..],
            "error: unrecognized subcommand 'calibrat' (tip: a similar subcommand exists: 'calibrate')\n",
        ),
    ] {
        assert_eq!(
            usage_error(args, directory.path()),
            (Some(2), expected.to_owned())
        );
    }
}

#[test]
fn a_negative_value_reaches_the_flag_s_own_check() {
    let directory = tempfile::tempdir().unwrap();
    let (code, stderr) = usage_error(
        &["calibrate", "--results", "r.parquet", "--target", "-0.1"],
        directory.path(),
    );
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "error: invalid value '-0.1' for '--target <Q>': -0.1: a target is above 0 and at most 1 (0.9)\n"
    );
}

#[test]
fn a_parquet_table_is_not_written_under_another_format_s_name() {
    let directory = tempfile::tempdir().unwrap();
    for (args, file) in [
        (
            &["simulate", "--requests", "50", "--out", "s.csv"][..],
            "s.csv",
        ),
        (
            &["grade", "--run", "missing-run", "--out", "g.jsonl"][..],
            "g.jsonl",
        ),
    ] {
        let (code, stderr) = usage_error(args, directory.path());
        assert_eq!(code, Some(2), "{stderr}");
        let extension = file.rsplit('.').next().unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("error: {file}: the name says .{extension}, but a graded-results table is a Parquet table; name it .parquet (--out)")),
            "{stderr}"
        );
        assert!(!directory.path().join(file).exists());
    }
    // The same table under a Parquet name is written.
    let (code, stderr) = usage_error(
        &["simulate", "--requests", "50", "--out", "s.parquet"],
        directory.path(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(directory.path().join("s.parquet").exists());
}

#[test]
fn outside_a_checkout_the_file_the_user_named_is_refused_before_the_rubrics() {
    let directory = tempfile::tempdir().unwrap();
    for (args, named) in [
        (
            &["serve-sim", "--dataset", "missing.jsonl"][..],
            "missing.jsonl",
        ),
        (
            &["grade", "--run", "missing-run", "--out", "g.parquet"][..],
            "missing-run",
        ),
    ] {
        let (code, stderr) = usage_error(args, directory.path());
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!("error: {named}: cannot read: "))
                && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
}
