//! Calibration on real recorded model outputs from `$ROUTEVAL_DATA` (see
//! ../shared/data/README.md). Skipped, saying so, where the variable is not
//! set.

use routeval::schema::CalibrationDocument;
use serde_json::Value;

use crate::common::data_dir;
use crate::common::routeval;

/// The MoT date-reasoning cascade: GPT-3.5 answers with 20 sampled chains of
/// thought (the verifier's reject score is 1 − the majority answer's share),
/// GPT-4 answers when escalated. Costs are in units of one small call.
fn mot_cascade_csv(directory: &std::path::Path) -> String {
    let load = |name: &str| -> Vec<Value> {
        let path = directory.join("mot_cascade").join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let small = load("GPT3_result_date_cot1.json");
    let large = load("GPT4_result_date_cot1.json");
    assert_eq!(small.len(), large.len());
    let mut csv = String::from("id,slice,score,small_ok,large_ok,cost_small,cost_large\n");
    for (index, (small, large)) in small.iter().zip(&large).enumerate() {
        assert_eq!(small["question"], large["question"]);
        let samples = small["results"].as_array().unwrap().len() as f64;
        let majority = small["result_counter"]
            .as_object()
            .unwrap()
            .values()
            .map(|count| count.as_f64().unwrap())
            .fold(0.0, f64::max);
        let correct = |answer: &Value| answer["prediction"] == answer["answer"];
        csv.push_str(&format!(
            "q{index},date,{},{},{},1,20\n",
            1.0 - majority / samples,
            correct(small),
            correct(large)
        ));
    }
    csv
}

#[test]
fn on_a_real_cascade_certified_thresholds_hold_on_held_out_splits() {
    let Some(data) = data_dir("on_a_real_cascade_certified_thresholds_hold_on_held_out_splits")
    else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("mot-date.csv");
    std::fs::write(&path, mot_cascade_csv(&data)).unwrap();

    const SPLITS: u64 = 150;
    let held_out_misses = |confidence: Option<&str>| {
        let (mut misses, mut certified) = (0u32, 0u32);
        for seed in 0..SPLITS {
            let mut command = routeval();
            command
                .args([
                    "calibrate",
                    "--policy",
                    "cascade",
                    "--target",
                    "0.8",
                    "--json",
                ])
                .args(["--holdout", "0.5", "--seed", &seed.to_string(), "--results"])
                .arg(&path);
            if let Some(confidence) = confidence {
                command.args(["--confidence", confidence]);
            }
            let output = command.output().unwrap();
            let document: CalibrationDocument = serde_json::from_slice(&output.stdout).unwrap();
            crate::common::assert_feasibility_is_the_exit_code(
                output.status.code(),
                &document,
                &output.stderr,
            );
            let holdout = document.slices[0].holdout.unwrap();
            if let Some(meets) = holdout.meets_target {
                certified += 1;
                misses += u32::from(!meets);
            }
        }
        (f64::from(misses) / f64::from(certified), certified)
    };
    let (plain, _) = held_out_misses(None);
    let (guaranteed, feasible) = held_out_misses(Some("0.95"));
    eprintln!(
        "MoT date cascade, target 0.8, {SPLITS} half/half splits: the plain fit missed on the held-out \
         half in {plain:.3} of splits, the certified threshold in {guaranteed:.3} ({feasible} splits certified)"
    );
    assert!(plain > 0.25, "plain fit misses: {plain}");
    assert!(
        u64::from(feasible) >= SPLITS / 2,
        "certification is usually possible here"
    );
    assert!(guaranteed <= 0.10, "certified misses: {guaranteed}");
    assert!(guaranteed * 3.0 <= plain);
}

/// GSM8K: the shipped `gsm8k` rubric regrades the 2,638 recorded answers of
/// RouteLLM's two models against the reference answers, and must agree with
/// the correctness labels recorded beside them.
#[test]
fn the_gsm8k_rubric_agrees_with_the_recorded_labels() {
    let Some(data) = data_dir("the_gsm8k_rubric_agrees_with_the_recorded_labels") else {
        return;
    };
    let directory = data.join("routellm").join("gsm8k");
    let references: Vec<String> = std::fs::read_to_string(directory.join("test.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["answer"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let rubrics = routeval::rubric::load_rubrics(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics"),
    )
    .unwrap();
    let strict = &rubrics["gsm8k"];
    let by_value = routeval::rubric::Rubric::from_toml(
        std::path::Path::new("by-value.toml"),
        "name = \"gsm8k-by-value\"\n[check.numeric]\nmarker = \"####\"\n",
    )
    .unwrap();

    let mut reader = csv::Reader::from_path(directory.join("gsm8k_responses.csv")).unwrap();
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|header| header == name).unwrap();
    let models = ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"];
    let (mut answers, mut agree, mut agree_by_value) = (0usize, 0usize, 0usize);
    let mut disagreements = Vec::new();
    for (index, record) in reader.records().enumerate() {
        let record = record.unwrap();
        for model in models {
            let label = &record[column(model)] == "True";
            let answer = &record[column(&format!("{model}_response"))];
            let verdict = strict.grade(answer, Some(&references[index]));
            answers += 1;
            agree_by_value +=
                usize::from(by_value.grade(answer, Some(&references[index])).pass == label);
            if verdict.pass == label {
                agree += 1;
            } else {
                disagreements.push(format!(
                    "row {} {model}: recorded {label}, rubric {}",
                    index + 1,
                    verdict.detail
                ));
            }
        }
    }
    let share = agree as f64 / answers as f64;
    eprintln!(
        "gsm8k rubric agrees with the recorded labels on {agree} of {answers} answers ({:.2}%); \
         comparing by value instead: {:.2}%",
        share * 100.0,
        agree_by_value as f64 / answers as f64 * 100.0
    );
    for disagreement in &disagreements {
        eprintln!("  {disagreement}");
    }
    assert_eq!(answers, 2638);
    assert!(share >= 0.99, "agreement {share}");
}

/// MMLU: the built-in router's cross-fitted scores on RouteLLM's 14,042
/// prompts (57 subjects as slices) reach an APGR of at least 0.60 (a hashed
/// n-gram logistic regression in scikit-learn that predicts the small
/// tier's failure reaches about 0.59). The same router trained to predict
/// only the small tier's failure, as a peer in the same run, must do worse:
/// scoring the gain of escalating is what earns the difference.
#[test]
fn the_built_in_router_reaches_its_apgr_on_mmlu() {
    use routeval::import::{ImportedRow, Prices, routellm_mmlu};
    use routeval::policy::{ScoredOutcome, oracle_scores, random_scores, routing_quality};
    use routeval::router_model::{LabelledPrompt, Training, cross_fit, small_failure_only};

    let Some(data) = data_dir("the_built_in_router_reaches_its_apgr_on_mmlu") else {
        return;
    };
    let rows = routellm_mmlu(
        &data.join("routellm").join("mmlu"),
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "gpt-4-1106-preview",
        &Prices::Flat {
            small: 0.0,
            large: 0.0,
        },
    )
    .unwrap();
    let slices: std::collections::BTreeSet<&str> =
        rows.iter().map(|row| row.slice.as_str()).collect();
    let prompts: Vec<LabelledPrompt> = rows.iter().map(ImportedRow::labelled).collect();
    assert_eq!((slices.len(), prompts.len()), (57, 14_042));
    let scored = |scores: &[f32]| -> Vec<ScoredOutcome> {
        prompts
            .iter()
            .zip(scores)
            .map(|(prompt, score)| ScoredOutcome {
                score: f64::from(*score),
                small_ok: prompt.outcome.small_ok,
                large_ok: prompt.outcome.large_ok,
            })
            .collect()
    };
    let (scores, _) = cross_fit(&prompts, 5, &Training::default());
    let outcomes = scored(&scores);
    let router = routing_quality(&outcomes).unwrap();
    let random = routing_quality(&random_scores(&outcomes, 0)).unwrap();
    let oracle = routing_quality(&oracle_scores(&outcomes)).unwrap();
    let small_only = small_failure_only(&prompts);
    let (small_only_scores, _) = cross_fit(&small_only, 5, &Training::default());
    let small_only = routing_quality(&scored(&small_only_scores)).unwrap();
    eprintln!(
        "MMLU, cross-fitted: APGR router {:.3}, small-failure-only router {:.3}, random {:.3}, oracle {:.3}; CPT(50%) {:.3}, CPT(80%) {:.3}",
        router.apgr,
        small_only.apgr,
        random.apgr,
        oracle.apgr,
        router.cpt50.unwrap(),
        router.cpt80.unwrap()
    );
    assert!(router.apgr >= 0.60, "APGR {}", router.apgr);
    assert!(router.apgr > random.apgr + 0.05);
    assert!(
        router.apgr > small_only.apgr + 0.02,
        "the gain {} against the small tier's failure alone {}",
        router.apgr,
        small_only.apgr
    );
}

/// The RouteLLM importers on the real files: every row, the subjects as
/// slices, GSM8K regraded by the rubric, and scores from the router.
#[test]
fn routellm_imports_read_every_row() {
    let Some(data) = data_dir("routellm_imports_read_every_row") else {
        return;
    };
    let routellm = data.join("routellm");
    let directory = tempfile::tempdir().unwrap();
    let mmlu = directory.path().join("mmlu.parquet");
    routeval()
        .args([
            "import",
            "routellm-mmlu",
            "--cost-small",
            "0.0006",
            "--cost-large",
            "0.01",
            "--dir",
        ])
        .arg(routellm.join("mmlu"))
        .arg("--out")
        .arg(&mmlu)
        .assert()
        .code(0);
    let output = routeval()
        .args(["calibrate", "--target", "0.7", "--json", "--results"])
        .arg(&mmlu)
        .output()
        .unwrap();
    let document: CalibrationDocument = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document.results.rows, 14_042);
    assert_eq!(document.slices.len(), 57);

    let gsm8k = directory.path().join("gsm8k.parquet");
    routeval()
        .args([
            "import",
            "routellm-gsm8k",
            "--cost-small",
            "0.0006",
            "--cost-large",
            "0.01",
            "--responses",
        ])
        .arg(routellm.join("gsm8k/gsm8k_responses.csv"))
        .arg("--questions")
        .arg(routellm.join("gsm8k/test.jsonl"))
        .arg("--rubric")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics/gsm8k.toml"))
        .arg("--out")
        .arg(&gsm8k)
        .assert()
        .code(0);
    let output = routeval()
        .args(["calibrate", "--target", "0.5", "--json", "--results"])
        .arg(&gsm8k)
        .output()
        .unwrap();
    let document: CalibrationDocument = serde_json::from_slice(&output.stdout).unwrap();
    let slice = &document.slices[0];
    assert_eq!(slice.n, 1319);
    // The data set's README: weak 63.8% and strong 85.7% correct; the
    // rubric's regrading agrees with those labels on 99.7% of answers.
    assert!((slice.baselines.always_small.quality - 0.638).abs() < 0.01);
    assert!((slice.baselines.always_large.quality - 0.857).abs() < 0.01);
}
