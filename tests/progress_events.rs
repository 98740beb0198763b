//! `--progress json`: a run against serve-sim reports every tier's plan,
//! its progress and its end as versioned JSON lines on stderr, each key
//! documented; `--progress none` prints nothing on stderr, and stdout is the
//! same either way.

use std::collections::BTreeMap;

use routeval::upstream_sim::SimSettings;
use serde_json::Value;

use crate::common::{Tuning, base_url, run_command, start_sim, write_config, write_dataset};

fn run_with(progress: &str) -> (String, String) {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 40);
    let sim = start_sim(&dataset, SimSettings::default());
    let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
    let out = directory.path().join("run");
    let output = run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .args(["--progress", progress])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_run_reports_each_tier_as_json_lines() {
    let (stdout, stderr) = run_with("json");
    let events: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    assert!(!events.is_empty());
    let mut lanes: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
    for event in &events {
        assert_eq!(event["schema_version"], 1, "{event}");
        assert_eq!(event["stage"], "run", "{event}");
        let lane = event["lane"].as_str().unwrap_or_default().to_owned();
        match event["event"].as_str().unwrap() {
            "planned" => {
                let total = event["total"].as_u64().unwrap();
                assert!(lanes.insert(lane, (total, 0, false)).is_none(), "{event}");
            }
            "progress" => {
                let (total, done, finished) = lanes.get_mut(&lane).expect("planned first");
                assert!(!*finished, "{event}");
                let now = event["done"].as_u64().unwrap();
                assert!(now >= *done && now <= *total, "{event}");
                assert_eq!(event["total"].as_u64(), Some(*total));
                *done = now;
            }
            "finished" => lanes.get_mut(&lane).expect("planned first").2 = true,
            other => panic!("a run without faults says nothing else: {other} {event}"),
        }
    }
    assert_eq!(
        lanes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["large", "small", "verifier"]
    );
    for (lane, (total, done, finished)) in &lanes {
        assert_eq!((*total, *done, *finished), (40, 40, true), "{lane}");
    }
    let objects: Vec<&Value> = events.iter().collect();
    let missing = crate::common::undocumented_keys("## Progress events", &objects);
    assert!(missing.is_empty(), "undocumented: {missing:?}");

    let (quiet_stdout, quiet_stderr) = run_with("none");
    assert_eq!(quiet_stderr, "");
    // The summary's table is the same whatever progress shows; only the
    // output path and the time differ between the two runs.
    let table = |text: &str| text.lines().take(5).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(table(&stdout), table(&quiet_stdout));
}
