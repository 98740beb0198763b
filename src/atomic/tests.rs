//! The one way to write a file, held to what it promises: nothing half
//! written, nothing replaced that routeval did not write.

use super::*;

#[test]
fn failed_write_leaves_no_file_behind() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("out.json");
    let result = write_atomically(&path, |file| {
        file.write_all(b"half")?;
        anyhow::bail!("interrupted")
    });
    assert!(result.is_err());
    assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 0);
}

#[test]
fn replaces_the_destination_whole() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("out.json");
    std::fs::write(&path, "old").unwrap();
    write_bytes_atomically(&path, b"new").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 1);
}

#[test]
fn symbolic_links_and_directories_are_refused() {
    let directory = tempfile::tempdir().unwrap();
    let target = directory.path().join("target");
    std::fs::write(&target, "keep").unwrap();
    let link = directory.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let error = write_bytes_atomically(&link, b"new").unwrap_err();
    assert!(error.to_string().contains("a symbolic link"), "{error}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    let error = write_bytes_atomically(directory.path(), b"new").unwrap_err();
    assert!(error.to_string().contains("a directory"), "{error}");
}

const DOCUMENT: OutputKind = OutputKind::new(
    "a test document",
    Replaces::Document {
        keys: &["schema_version", "rows"],
        kind: Some("test"),
    },
);

#[test]
fn an_output_that_is_an_input_is_refused_under_any_spelling() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("results.csv");
    std::fs::write(&input, "id\n").unwrap();
    let spelled_otherwise = directory.path().join(".").join("results.csv");
    let error = check_outputs(
        &[Output::new(&spelled_otherwise, "--out", &DOCUMENT)],
        &[Named::new(&input, "--results")],
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: is also an input (--results); write the output to another path (--out)",
            spelled_otherwise.display()
        )
    );
    let fresh = directory.path().join("new.json");
    check_outputs(
        &[Output::new(&fresh, "--out", &DOCUMENT)],
        &[Named::new(&input, "--results")],
    )
    .unwrap();
    let error = check_outputs(
        &[
            Output::new(&fresh, "--out", &DOCUMENT),
            Output::new(&fresh, "--scored-out", &DOCUMENT),
        ],
        &[],
    )
    .unwrap_err();
    assert!(error.to_string().contains("two outputs"), "{error}");
}

#[test]
fn only_routeval_output_of_the_same_kind_is_replaced() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("out.json");
    let check = || check_outputs(&[Output::new(&path, "--out", &DOCUMENT)], &[]);
    for (content, replaceable) in [
        (r#"{"schema_version": 1, "kind": "test", "rows": []}"#, true),
        (
            r#"{"schema_version": 1, "kind": "other", "rows": []}"#,
            false,
        ),
        (r#"{"schema_version": 1, "rows": []}"#, false),
        (r#"{"kind": "test", "rows": []}"#, false),
        ("notes of mine", false),
        ("", false),
    ] {
        std::fs::write(&path, content).unwrap();
        assert_eq!(check().is_ok(), replaceable, "{content}: {:?}", check());
    }
    std::fs::write(&path, "notes of mine").unwrap();
    assert_eq!(
        check().unwrap_err().to_string(),
        format!(
            "{}: exists and is not a test document routeval wrote; routeval replaces only its own output of the same kind: remove it or write to another path (--out)",
            path.display()
        )
    );
}

#[test]
fn signed_configs_and_signatures_are_never_replaced() {
    let directory = tempfile::tempdir().unwrap();
    let config = directory.path().join("route-config.v1.json");
    let signature = directory.path().join("route-config.v1.json.minisig");
    // Even content that looks like the output's own kind.
    let lookalike = r#"{"schema_version": 1, "kind": "test", "rows": []}"#;
    std::fs::write(&config, lookalike).unwrap();
    std::fs::write(&signature, lookalike).unwrap();
    for path in [&config, &signature] {
        let error = check_outputs(&[Output::new(path, "--out", &DOCUMENT)], &[]).unwrap_err();
        assert!(error.to_string().contains("never replaced"), "{error}");
    }
    let elsewhere = directory.path().join("renamed.sig");
    std::fs::write(
        &elsewhere,
        "untrusted comment: signature from minisign secret key\n",
    )
    .unwrap();
    let error = check_outputs(&[Output::new(&elsewhere, "--out", &DOCUMENT)], &[]).unwrap_err();
    assert!(error.to_string().contains("a signature"), "{error}");
}

#[test]
fn nothing_is_written_among_a_runs_files() {
    let directory = tempfile::tempdir().unwrap();
    let run = directory.path().join("run");
    std::fs::create_dir_all(run.join("parts")).unwrap();
    std::fs::write(
        run.join("manifest.json"),
        r#"{"schema_version": 2, "routeval_version": "0", "dataset": {}, "config": {}, "prompts": 1, "tiers": {}}"#,
    )
    .unwrap();
    let refused = |path: PathBuf| {
        let error = check_outputs(&[Output::new(&path, "--out", &DOCUMENT)], &[]).unwrap_err();
        assert!(error.to_string().contains("belongs to the run"), "{error}");
    };
    refused(run.join("manifest.json"));
    refused(run.join("responses.parquet"));
    refused(run.join("parts").join("part-new.parquet"));
    refused(run.join("new-folder").join("deeper").join("out.json"));
    // A new file of another command's beside the run's own is fine.
    check_outputs(
        &[Output::new(&run.join("graded.json"), "--out", &DOCUMENT)],
        &[],
    )
    .unwrap();
    check_outputs(
        &[Output::new(
            &directory.path().join("manifest.json"),
            "--out",
            &DOCUMENT,
        )],
        &[],
    )
    .unwrap();
}
