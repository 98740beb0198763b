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
    let output = routeval()
        .args(["evaluate", "--json", "--results"])
        .arg(path)
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
