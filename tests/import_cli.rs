//! `routeval import`: public formats and mapped tables into graded results.

use routeval::schema::{ColumnNames, ReadOptions, read_graded};

use crate::common::routeval;

fn read_all(path: &std::path::Path) -> routeval::schema::GradedTable {
    let options = ReadOptions {
        names: ColumnNames::default(),
        carry_extra: true,
        details: true,
        score_optional: false,
        carry_read_only: false,
    };
    read_graded(path, &options).unwrap()
}

#[test]
fn generic_maps_columns_and_carries_the_rest() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("outcomes.csv");
    std::fs::write(
        &input,
        "id,tenant,p_hard,weak_ok,strong_ok,c_s,c_l,note\n\
         a,acme,0.2,true,true,0.001,0.02,first\n\
         b,acme,0.9,false,true,0.001,0.02,second\n",
    )
    .unwrap();
    let out = directory.path().join("graded.parquet");
    routeval()
        .args(["import", "generic", "--input"])
        .arg(&input)
        .args(["--map", "slice=tenant,score=p_hard,small_ok=weak_ok,large_ok=strong_ok,cost_small=c_s,cost_large=c_l", "--out"])
        .arg(&out)
        .assert()
        .code(0);
    let table = read_all(&out);
    let batch = &table.batches[0];
    assert_eq!(batch.slice.value(1), "acme");
    assert_eq!(batch.score.values().to_vec(), [0.2, 0.9]);
    assert!(!batch.small_ok.value(1) && batch.large_ok.value(1));
    assert_eq!(batch.cost_large.value(0), 0.02);
    let names: Vec<&str> = batch
        .extra
        .iter()
        .map(|(field, _)| field.name().as_str())
        .collect();
    assert_eq!(names, ["note"]);

    let output = routeval()
        .args(["import", "generic", "--input"])
        .arg(&input)
        .args(["--map", "difficulty=p_hard", "--out"])
        .arg(directory.path().join("x.parquet"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("for '--map <MAP>': \"difficulty\" is not a graded-results column")
    );
}

#[test]
fn mt_bench_judgments_with_a_price_file_and_joined_scores() {
    let directory = tempfile::tempdir().unwrap();
    let path = |name: &str| directory.path().join(name);
    std::fs::write(
        path("question.jsonl"),
        "{\"question_id\": 1, \"category\": \"math\", \"turns\": [\"2+2?\", \"and 3+3?\"]}\n\
         {\"question_id\": 2, \"category\": \"writing\", \"turns\": [\"a haiku\", \"shorter\"]}\n",
    )
    .unwrap();
    let mut judgments = String::new();
    for (question, turn, weak, strong) in [(1, 1, 9, 10), (1, 2, 3, 9), (2, 1, 8, 8), (2, 2, 7, 5)]
    {
        for (model, score) in [("weak", weak), ("strong", strong)] {
            judgments.push_str(&format!(
                "{{\"question_id\": {question}, \"turn\": {turn}, \"model\": \"{model}\", \"score\": {score}}}\n"
            ));
        }
    }
    std::fs::write(path("judgements.jsonl"), judgments).unwrap();
    std::fs::write(
        path("prices.toml"),
        "[models.weak]\nper_call = 0.001\n[models.strong]\nper_call = 0.03\n",
    )
    .unwrap();
    std::fs::write(
        path("scores.csv"),
        "id,p\nmt-bench-1-turn-1,0.1\nmt-bench-1-turn-2,0.8\nmt-bench-2-turn-1,0.3\nmt-bench-2-turn-2,0.6\n",
    )
    .unwrap();
    routeval()
        .args([
            "import",
            "mt-bench",
            "--small-model",
            "weak",
            "--large-model",
            "strong",
            "--pass-score",
            "8",
        ])
        .arg("--judgments")
        .arg(path("judgements.jsonl"))
        .arg("--questions")
        .arg(path("question.jsonl"))
        .arg("--prices")
        .arg(path("prices.toml"))
        .arg("--scores")
        .arg(path("scores.csv"))
        .args(["--scores-col", "p", "--out"])
        .arg(path("graded.parquet"))
        .assert()
        .code(0);
    let table = read_all(&path("graded.parquet"));
    let batch = &table.batches[0];
    let ids: Vec<&str> = batch.id.iter().map(Option::unwrap).collect();
    assert_eq!(
        ids,
        [
            "mt-bench-1-turn-1",
            "mt-bench-1-turn-2",
            "mt-bench-2-turn-1",
            "mt-bench-2-turn-2"
        ]
    );
    let small: Vec<bool> = (0..4).map(|index| batch.small_ok.value(index)).collect();
    let large: Vec<bool> = (0..4).map(|index| batch.large_ok.value(index)).collect();
    assert_eq!(small, [true, false, true, false]);
    assert_eq!(large, [true, true, true, false]);
    assert_eq!(batch.score.values().to_vec(), [0.1, 0.8, 0.3, 0.6]);
    assert_eq!(batch.cost_large.value(0), 0.03);
    assert_eq!(batch.slice.value(2), "writing");
    assert_eq!(batch.models[1].as_ref().unwrap().value(0), "strong");
    let prompt = batch
        .extra
        .iter()
        .find(|(field, _)| field.name() == "prompt")
        .unwrap();
    let prompt = prompt
        .1
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap();
    assert_eq!(prompt.value(1), "and 3+3?");

    // A score missing from the joined file is an input error naming the id.
    std::fs::write(path("partial.csv"), "id,p\nmt-bench-1-turn-1,0.1\n").unwrap();
    let output = routeval()
        .args([
            "import",
            "mt-bench",
            "--small-model",
            "weak",
            "--large-model",
            "strong",
            "--cost-small",
            "0",
            "--cost-large",
            "0",
        ])
        .arg("--judgments")
        .arg(path("judgements.jsonl"))
        .arg("--questions")
        .arg(path("question.jsonl"))
        .arg("--scores")
        .arg(path("partial.csv"))
        .args(["--scores-col", "p", "--out"])
        .arg(path("partial.parquet"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("no score for id \"mt-bench-1-turn-2\" (--scores)")
    );
    assert!(!path("partial.parquet").exists());
}

#[test]
fn outcomes_without_a_score_import_and_train_a_router_before_calibration() {
    let directory = tempfile::tempdir().unwrap();
    // The example outcomes with prompts and without any score column: the
    // usual state before a router is trained.
    let text = std::fs::read_to_string(crate::common::example_results()).unwrap();
    let lines: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(index, line)| {
            let mut cells: Vec<&str> = line.split(',').collect();
            cells.remove(2);
            let prompt = if index == 0 {
                "prompt".to_owned()
            } else {
                format!("question about {}", cells[0])
            };
            format!("{},{prompt}", cells.join(","))
        })
        .collect();
    assert!(lines[0].starts_with("id,slice,small_ok"));
    let outcomes = directory.path().join("outcomes.csv");
    std::fs::write(&outcomes, lines.join("\n") + "\n").unwrap();
    let imported = directory.path().join("imported.parquet");
    routeval()
        .args(["import", "generic", "--input"])
        .arg(&outcomes)
        .arg("--out")
        .arg(&imported)
        .assert()
        .success();
    // A stage that needs the score names the empty column.
    let output = routeval()
        .args(["calibrate", "--target", "0.9", "--results"])
        .arg(&imported)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("column \"score\": no score (the column is empty"),
        "{stderr}"
    );
    // A renamed score column must exist.
    let output = routeval()
        .args(["import", "generic", "--map", "score=p_hard", "--input"])
        .arg(&outcomes)
        .arg("--out")
        .arg(directory.path().join("renamed.parquet"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("missing column \"p_hard\" (named by --map)")
    );
    // The router fills a score column, and calibration reads it.
    let scored = directory.path().join("scored.parquet");
    routeval()
        .args(["router", "train", "--into", "router_score", "--results"])
        .arg(&imported)
        .arg("--out")
        .arg(directory.path().join("router.bin"))
        .arg("--scored-out")
        .arg(&scored)
        .assert()
        .success();
    routeval()
        .args([
            "calibrate",
            "--target",
            "0.9",
            "--score-col",
            "router_score",
            "--results",
        ])
        .arg(&scored)
        .assert()
        .code(0);
}
