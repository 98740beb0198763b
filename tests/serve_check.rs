//! `routeval serve --check` through the binary: what a deploy runs before
//! it points serve at a new config. It loads what a start would and says
//! what would be served, or refuses with the one line a start would give,
//! for every reason a start refuses; it listens on nothing and writes
//! nothing.

use std::path::Path;
use std::process::Command;

use crate::common::{Pipeline, signed_single, write_keys};

/// `serve --check` of `config`, with the test keys, records in
/// `directory/records`.
fn check(config: &Path, directory: &Path) -> Command {
    let pipeline = Pipeline::shared();
    let keys = directory.join("keys.toml");
    if !keys.exists() {
        write_keys(&keys);
    }
    let mut command = pipeline.serve_demo(config, &keys, &directory.join("records"));
    command.arg("--check");
    command
}

fn refused(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn serve_check_says_what_would_be_served_and_refuses_what_a_start_would() {
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, "http://127.0.0.1:9/v1", "check", None);
    let directory = tempfile::tempdir().unwrap();
    let output = check(&config, directory.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let said = String::from_utf8(output.stdout).unwrap();
    assert!(
        said.starts_with("ok: serve would start on support-assistant (")
            && said.contains("version 1")
            && said.contains("3 keys"),
        "{said}"
    );
    // Nothing written: not even the records directory.
    assert!(!directory.path().join("records").exists());

    // A route's key variable that is not set.
    let stderr = refused(check(&config, directory.path()).env_remove("ROUTEVAL_SIM_KEY"));
    assert!(
        stderr.contains("ROUTEVAL_SIM_KEY") && stderr.contains("api_key_env"),
        "{stderr}"
    );
    // A config whose signature does not hold.
    let tampered = directory.path().join("tampered.json");
    let mut signed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    signed["version"] = 9.into();
    std::fs::write(&tampered, signed.to_string()).unwrap();
    std::fs::copy(
        config.with_extension("json.minisig"),
        tampered.with_extension("json.minisig"),
    )
    .unwrap();
    refused(&mut check(&tampered, directory.path()));
    // A keys file that is not one.
    std::fs::write(directory.path().join("keys.toml"), "[[keys]]\nsha256 = 1\n").unwrap();
    let stderr = refused(&mut check(&config, directory.path()));
    assert!(stderr.contains("keys.toml"), "{stderr}");
    // A volume's root, mounted as the records directory: its lost+found is
    // the filesystem's own, and the directory is taken as empty.
    write_keys(&directory.path().join("keys.toml"));
    let foreign = directory.path().join("records");
    std::fs::create_dir_all(foreign.join("lost+found")).unwrap();
    let output = check(&config, directory.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // A records directory serve did not make.
    std::fs::write(foreign.join("notes.txt"), "not serve's").unwrap();
    let stderr = refused(&mut check(&config, directory.path()));
    assert!(stderr.contains("records"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(&foreign).unwrap().count(),
        2,
        "nothing written beside the operator's files"
    );
}
