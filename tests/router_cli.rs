//! `routeval router train`, `router score` and `evaluate` on prompts whose
//! wording predicts whether the small tier fails.

use serde_json::Value;

use crate::common::{Random, routeval};

/// JSON lines where prompts about integrals defeat the small tier and
/// greetings do not.
fn write_prompts(path: &std::path::Path, count: usize, seed: u64) {
    let mut random = Random::new(seed);
    let mut text = String::new();
    for index in 0..count {
        let hard = random.unit() < 0.4;
        let prompt = if hard {
            format!(
                "evaluate the integral of x^{} dx over a contour, case {index}",
                index % 7
            )
        } else {
            format!("say hello politely to customer number {index}")
        };
        let small_ok = if hard {
            random.unit() < 0.1
        } else {
            random.unit() < 0.95
        };
        let row = serde_json::json!({
            "id": format!("p{index}"),
            "slice": if index % 2 == 0 { "a" } else { "b" },
            "score": 0.0,
            "small_ok": small_ok,
            "large_ok": random.unit() < 0.97,
            "cost_small": 0.0004,
            "cost_large": 0.008,
            "prompt": prompt,
        });
        text.push_str(&row.to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn evaluate(path: &std::path::Path) -> Value {
    evaluate_with(path, &[])
}

fn evaluate_with(path: &std::path::Path, extra: &[&str]) -> Value {
    let output = routeval()
        .args(["evaluate", "--json", "--results"])
        .arg(path)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_router_learns_which_prompts_need_the_large_tier() {
    let directory = tempfile::tempdir().unwrap();
    let (train, fresh) = (
        directory.path().join("train.jsonl"),
        directory.path().join("fresh.jsonl"),
    );
    write_prompts(&train, 1500, 1);
    write_prompts(&fresh, 500, 2);
    let (model, scored) = (
        directory.path().join("router.bin"),
        directory.path().join("scored.parquet"),
    );
    routeval()
        .args(["router", "train", "--results"])
        .arg(&train)
        .arg("--out")
        .arg(&model)
        .arg("--scored-out")
        .arg(&scored)
        .assert()
        .code(0);

    // Constant scores separate nothing: APGR 0.5. Cross-fitted scores do.
    let before = evaluate(&train);
    assert!((before["router"]["apgr"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    let after = evaluate(&scored);
    assert_eq!(after["schema_version"], 1);
    assert!(after["router"]["apgr"].as_f64().unwrap() > 0.75, "{after}");
    assert!((after["random"]["apgr"].as_f64().unwrap() - 0.5).abs() < 0.1);
    assert!(after["oracle"]["apgr"].as_f64().unwrap() > after["router"]["apgr"].as_f64().unwrap());

    // The full model scores prompts it never saw.
    let rescored = directory.path().join("fresh-scored.parquet");
    routeval()
        .args(["router", "score", "--router"])
        .arg(&model)
        .arg("--results")
        .arg(&fresh)
        .arg("--out")
        .arg(&rescored)
        .assert()
        .code(0);
    assert!(evaluate(&rescored)["router"]["apgr"].as_f64().unwrap() > 0.75);
}

#[test]
fn a_table_without_prompts_is_an_input_error() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("graded.csv");
    crate::common::write_csv(&path, &crate::common::synthetic_rows(&["s"], 20, 3));
    let output = routeval()
        .args(["router", "train", "--out"])
        .arg(directory.path().join("router.bin"))
        .arg("--results")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("missing column \"prompt\" with the prompts (--prompt-col)"),
        "{stderr}"
    );
    assert!(!directory.path().join("router.bin").exists());
}

fn evaluate_column(path: &std::path::Path, column: &str) -> f64 {
    evaluate_with(path, &["--score-col", column])["router"]["apgr"]
        .as_f64()
        .unwrap()
}

#[test]
fn scores_can_go_into_a_column_of_their_own() {
    let directory = tempfile::tempdir().unwrap();
    let train = directory.path().join("train.jsonl");
    write_prompts(&train, 600, 3);
    let scored = |name: &str, extra: &[&str]| {
        let out = directory.path().join(name);
        routeval()
            .args(["router", "train", "--results"])
            .arg(&train)
            .arg("--out")
            .arg(directory.path().join("router.bin"))
            .arg("--scored-out")
            .arg(&out)
            .args(extra)
            .assert()
            .code(0);
        out
    };
    let in_score = scored("in-score.parquet", &[]);
    let beside = scored("beside.parquet", &["--into", "router_score"]);
    let router = evaluate_column(&in_score, "score");
    assert!(router > 0.75);
    assert_eq!(evaluate_column(&beside, "router_score"), router);
    // The results' own (constant) score is kept.
    assert!((evaluate_column(&beside, "score") - 0.5).abs() < 1e-9);

    routeval()
        .args(["router", "train", "--into", "large_ok", "--results"])
        .arg(&train)
        .arg("--out")
        .arg(directory.path().join("x.bin"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "for '--into <NAME>': \"large_ok\" is a column of the graded-results table",
        ));
    assert!(!directory.path().join("x.bin").exists());
}

#[test]
fn an_external_routers_scores_join_by_id() {
    let directory = tempfile::tempdir().unwrap();
    let train = directory.path().join("train.jsonl");
    write_prompts(&train, 400, 4);
    // The external router knows which prompts are integrals; its file lists
    // the ids in another order.
    let rows: Vec<Value> = std::fs::read_to_string(&train)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut external = String::from("id,p_strong\n");
    for row in rows.iter().rev() {
        let hard = row["prompt"].as_str().unwrap().contains("integral");
        external.push_str(&format!(
            "{},{}\n",
            row["id"].as_str().unwrap(),
            if hard { 0.9 } else { 0.1 }
        ));
    }
    let scores = directory.path().join("external.csv");
    std::fs::write(&scores, &external).unwrap();
    let join = |scores: &std::path::Path, out: &str| {
        let mut command = routeval();
        command
            .args([
                "router",
                "join",
                "--scores-col",
                "p_strong",
                "--into",
                "external",
            ])
            .arg("--results")
            .arg(&train)
            .arg("--scores")
            .arg(scores)
            .arg("--out")
            .arg(directory.path().join(out));
        command
    };
    join(&scores, "joined.parquet")
        .assert()
        .code(0)
        .stdout(predicates::str::contains("joined 400 scores"));
    let joined = directory.path().join("joined.parquet");
    assert!(evaluate_column(&joined, "external") > 0.75);
    assert!((evaluate_column(&joined, "score") - 0.5).abs() < 1e-9);

    // A missing id and a repeated one are named; nothing is written.
    let short = directory.path().join("short.csv");
    let without_p7: String = external
        .lines()
        .filter(|line| !line.starts_with("p7,"))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&short, without_p7).unwrap();
    join(&short, "short.parquet")
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "short.csv: no score for id \"p7\"",
        ));
    let twice = directory.path().join("twice.csv");
    std::fs::write(&twice, format!("{external}p7,0.5\n")).unwrap();
    let first = external
        .lines()
        .position(|line| line.starts_with("p7,"))
        .unwrap()
        + 1;
    join(&twice, "twice.parquet")
        .assert()
        .code(2)
        .stderr(predicates::str::contains(format!(
            "twice.csv: line 402, column \"id\": duplicate id \"p7\", first seen at line {first}"
        )));
    assert!(!directory.path().join("short.parquet").exists());
    assert!(!directory.path().join("twice.parquet").exists());
}
