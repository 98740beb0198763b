//! The labelling loop from traffic: records with prompts sampled per slice
//! across the score range, de-duplicated and redacted, run through
//! serve-sim, and graded by the reference-free pairwise rubric, whose
//! two orders cancel the judge's position bias.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use routeval::upstream_sim::SimSettings;

use crate::common::routeval;
use crate::common::{Tuning, base_url, repo, run_command, start_sim, write_config, write_dataset};

/// Records of the `count` prompts of `write_dataset` (each asked twice, the
/// second time with a key pasted in), with scores spread over [0, 1).
fn write_records(dataset: &Path, out: &Path) {
    let mut lines = Vec::new();
    for (index, line) in std::fs::read_to_string(dataset)
        .unwrap()
        .lines()
        .enumerate()
    {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let prompt = row["prompt"].as_str().unwrap();
        for copy in 0..2 {
            lines.push(
                serde_json::json!({
                    "id": format!("rec-{index}-{copy}"),
                    "timestamp": 1_764_504_000_000u64 + index as u64 * 1000 + copy,
                    "slice": row["slice"],
                    "route": "small",
                    "status": "ok",
                    "score": (index % 50) as f64 / 50.0,
                    "messages": [
                        {"role": "system", "content": "You are a support assistant."},
                        {"role": "user", "content": prompt},
                    ],
                })
                .to_string(),
            );
        }
    }
    // One more whose prompt carries a secret.
    lines.push(
        serde_json::json!({
            "id": "rec-secret", "timestamp": 1_764_600_000_000u64, "slice": "billing",
            "route": "small", "status": "ok", "score": 0.99,
            "prompt": "My api_key=sk-live-abcdefghijklmnopqrstuvwx stopped working",
        })
        .to_string(),
    );
    std::fs::write(out, lines.join("\n") + "\n").unwrap();
}

#[test]
fn sampled_prompts_run_and_grade_pairwise_with_both_orders() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 150);
    let records = directory.path().join("records.jsonl");
    write_records(&dataset, &records);
    let sampled = directory.path().join("sampled.jsonl");
    let output = routeval()
        .args(["sample", "--per-slice", "20", "--seed", "3", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(&sampled)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&sampled)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut per_slice: BTreeMap<String, Vec<&serde_json::Value>> = BTreeMap::new();
    for row in &rows {
        per_slice
            .entry(row["slice"].as_str().unwrap().to_owned())
            .or_default()
            .push(row);
    }
    assert_eq!(per_slice.len(), 3);
    for (slice, rows) in &per_slice {
        assert_eq!(rows.len(), 20, "{slice}");
        // Across the score range: both ends of it are represented.
        let scores: Vec<f64> = rows
            .iter()
            .map(|row| row["score"].as_f64().unwrap())
            .collect();
        assert!(
            scores.iter().any(|score| *score < 0.2),
            "{slice}: {scores:?}"
        );
        assert!(
            scores.iter().any(|score| *score >= 0.8),
            "{slice}: {scores:?}"
        );
    }
    // De-duplicated by prompt: each prompt once, though recorded twice.
    let prompts: BTreeSet<String> = rows.iter().map(|row| row["messages"].to_string()).collect();
    assert_eq!(prompts.len(), rows.len());
    for row in &rows {
        assert!(row["reference"].is_null() && row["rubric"] == "pairwise");
        assert!(row["record_id"].as_str().unwrap().starts_with("rec-"));
        let keys = crate::common::keys(row);
        assert!(
            !keys.contains("route") && !keys.contains("status"),
            "{keys:?}"
        );
    }
    // The same seed draws the same set; another seed another.
    let again = directory.path().join("again.jsonl");
    routeval()
        .args(["sample", "--per-slice", "20", "--seed", "3", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(&again)
        .assert()
        .success();
    assert_eq!(
        std::fs::read(&again).unwrap(),
        std::fs::read(&sampled).unwrap()
    );
    // Secrets never reach the labelling set.
    let secret = directory.path().join("secret.jsonl");
    routeval()
        .args(["sample", "--per-slice", "200", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(&secret)
        .assert()
        .success()
        .stdout(predicates::str::contains("1 secrets redacted"));
    let text = std::fs::read_to_string(&secret).unwrap();
    assert!(
        text.contains("api_key=[redacted]") && !text.contains("sk-live"),
        "{text}"
    );

    // Run the sample on serve-sim (which knows the references) and grade it
    // with the pairwise rubric through the sim's judge.
    let sim = start_sim(&dataset, SimSettings::default());
    let config = write_config(
        directory.path(),
        &base_url(&sim),
        &Tuning {
            verifier: false,
            ..Tuning::default()
        },
    );
    let text = std::fs::read_to_string(&config).unwrap();
    let judge = format!(
        "[judge]\nbase_url = \"{}\"\nmodel = \"sim-verifier-2026-11-01\"\nprice_input_per_mtok = 0.1\nprice_output_per_mtok = 0.4\n",
        base_url(&sim)
    );
    std::fs::write(&config, text.replace("[run]", &format!("{judge}\n[run]"))).unwrap();
    let out = directory.path().join("run");
    run_command(&config, &sampled, &out, &directory.path().join("cache"))
        .assert()
        .success();
    let graded = directory.path().join("graded.parquet");
    let output = routeval()
        .args(["grade", "--rubrics"])
        .arg(repo().join("rubrics"))
        .arg("--run")
        .arg(&out)
        .arg("--out")
        .arg(&graded)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let table = routeval::schema::read_graded(
        &graded,
        &routeval::schema::ReadOptions {
            carry_extra: true,
            score_optional: true,
            ..Default::default()
        },
    )
    .unwrap();
    let responses = routeval::schema::read_all_responses(&out.join("responses.parquet")).unwrap();
    let reference = |id: &str| -> String {
        let index: usize = id
            .trim_start_matches("rec-")
            .split('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        (index + index % 7).to_string()
    };
    let (mut right_passed, mut right) = (0, 0);
    let (mut wrong_failed, mut wrong) = (0, 0);
    let mut disagreements = 0;
    let batch = &table.batches[0];
    let details = batch
        .extra
        .iter()
        .find(|(field, _)| field.name() == "detail")
        .unwrap()
        .1
        .clone();
    let details = arrow::array::AsArray::as_string::<i32>(details.as_ref());
    for index in 0..batch.num_rows() {
        let id = batch.id.value(index);
        let answer = |tier: routeval::schema::CallTier| {
            responses
                .iter()
                .find(|row| row.id == id && row.tier == tier)
                .and_then(|row| row.text.clone())
                .unwrap()
        };
        let small_right = answer(routeval::schema::CallTier::SMALL) == reference(id);
        let large_right = answer(routeval::schema::CallTier::LARGE) == reference(id);
        assert!(batch.large_ok.value(index), "the base passes by definition");
        disagreements += usize::from(details.value(index).contains("orders disagree"));
        if small_right {
            right += 1;
            right_passed += usize::from(batch.small_ok.value(index));
        } else if large_right {
            wrong += 1;
            wrong_failed += usize::from(!batch.small_ok.value(index));
        }
    }
    // A right answer is never worse than the base in both orders, whatever
    // the judge's bias; a wrong one against a right base fails unless the
    // judge's first-position bias (30% of judgements) split the orders.
    assert_eq!(right_passed, right, "{right_passed} of {right}");
    assert!(wrong > 5, "{wrong}");
    assert!(wrong_failed * 10 >= wrong * 5, "{wrong_failed} of {wrong}");
    assert!(disagreements > 0, "the sim's judge has a position bias");
    assert!(
        stdout.contains(&format!(
            "pairwise: {disagreements} comparisons whose two orders disagreed"
        )),
        "{stdout}"
    );
}

#[test]
fn which_record_keeps_a_repeated_prompt_does_not_depend_on_the_file_order() {
    let directory = tempfile::tempdir().unwrap();
    // Forty prompts, each asked three times from different tenants.
    let lines: Vec<String> = (0..120)
        .map(|index| {
            let slice = ["billing", "legal", "sales"][index as usize % 3];
            serde_json::json!({
                "id": format!("req-{index:03}"),
                "timestamp": 1_764_504_000_000u64 + index,
                "slice": slice,
                "route": "mini",
                "status": "ok",
                "score": (index % 17) as f64 / 17.0,
                "prompt": format!("How do I change plan number {}?", index / 3),
            })
            .to_string()
        })
        .collect();
    let forward = directory.path().join("forward.jsonl");
    std::fs::write(&forward, lines.join("\n") + "\n").unwrap();
    let backward = directory.path().join("backward.jsonl");
    let reversed: Vec<&String> = lines.iter().rev().collect();
    std::fs::write(
        &backward,
        reversed
            .iter()
            .map(|line| line.as_str())
            .collect::<Vec<_>>()
            .join("\n")
            + "\n",
    )
    .unwrap();
    let sample = |records: &Path, out: &str| {
        let out = directory.path().join(out);
        routeval()
            .args(["sample", "--per-slice", "40", "--seed", "9", "--records"])
            .arg(records)
            .arg("--out")
            .arg(&out)
            .assert()
            .success()
            .stdout(predicates::str::contains("80 duplicates"));
        std::fs::read_to_string(out).unwrap()
    };
    let (one, other) = (sample(&forward, "a.jsonl"), sample(&backward, "b.jsonl"));
    assert_eq!(one.lines().count(), 40, "one record per prompt");
    assert_eq!(one, other);
}
