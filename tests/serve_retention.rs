//! `serve --records-retain-days`: the records' rolled parts past the
//! retention are removed at start and after each roll, and nothing else in
//! the directory ever is: not a part still within it, not the journal, not
//! an operator's file, not a symlink named like a part.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::common::{
    Pipeline, ScriptedUpstream, Served, answers_hello, ask_with, log_events, served_records,
    signed_single, write_keys,
};

/// serve of `config` rolling a part per record, with `flags`.
fn serve(config: &Path, directory: &Path, flags: &[&str]) -> Served {
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    let mut command = Pipeline::shared().serve_demo(config, &keys, &directory.join("records"));
    command.args(["--roll-records", "1"]).args(flags);
    Served::start(&mut command)
}

/// Sets `path`'s modification time `days` days back (of the link itself,
/// for a symlink).
fn age(path: &Path, days: u32) {
    let status = Command::new("touch")
        .args(["-h", "-d", &format!("{days} days ago")])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn parts_past_the_retention_are_removed_and_nothing_else_is() {
    let upstream = ScriptedUpstream::start(answers_hello);
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), "retention", None);
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("records");
    let served = serve(&config, directory.path(), &[]);
    for id in ["first", "second"] {
        assert_eq!(ask_with(&served, id, "Hi", &[]), 200);
    }
    served.stop();
    let part = |number: u32| records.join(format!("part-{number:06}.parquet"));
    assert!(part(1).is_file() && part(2).is_file());
    // Part 1 is three days old; beside it, old files serve did not write.
    age(&part(1), 3);
    let notes = records.join("notes.txt");
    let backup = records.join("part-000001.parquet.bak");
    let link = records.join("part-000000.parquet");
    std::fs::write(&notes, "the operator's").unwrap();
    std::fs::copy(part(1), &backup).unwrap();
    std::os::unix::fs::symlink(&notes, &link).unwrap();
    for path in [&notes, &backup, &link] {
        age(path, 30);
    }

    let served = serve(&config, directory.path(), &["--records-retain-days", "2"]);
    assert_eq!(ask_with(&served, "third", "Hi", &[]), 200);
    let log = served.stop_with_log();
    let pruned = log_events(&log, "records_pruned");
    assert_eq!(pruned.len(), 1, "{log}");
    assert_eq!(pruned[0]["parts"], json!(["part-000001.parquet"]), "{log}");
    assert!(!part(1).exists());
    assert!(part(2).is_file() && part(3).is_file());
    for path in [&notes, &backup, &link] {
        assert!(
            std::fs::symlink_metadata(path).is_ok(),
            "{}",
            path.display()
        );
    }
    // What is left reads as the requests since: the second and the third.
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&backup).unwrap();
    let kept = served_records(&records, &["id", "tenant"]);
    assert_eq!(
        kept,
        vec![
            json!({"id": "second", "tenant": "demo"}),
            json!({"id": "third", "tenant": "demo"})
        ]
    );
}
