//! Three tiers through `run` and `grade` against serve-sim: every prompt to
//! every tier, each non-final tier's answer to the verifier, failed calls
//! resent on resume (a verifier's from its stage's stored answer), and a
//! graded table whose tiers `calibrate` reads from the file itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::datatypes::Float64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};
use routeval::schema::{ResponseRow, read_all_responses};
use routeval::upstream_sim::{FaultProfile, SimSettings};

use crate::common::{Tuning, base_url, repo, run_command, start_sim, write_config, write_dataset};
use crate::common::{calibration_and_text, routeval};

/// The run config of `run_cli` with a `mid` tier between and the tiers
/// named `first`, `mid`, `large`, without retries.
fn three_tier_config(directory: &Path, base_url: &str, first: &str) -> PathBuf {
    let path = write_config(directory, base_url, &Tuning::default());
    let two = std::fs::read_to_string(&path).unwrap();
    let large = &two[two.find("[tiers.large]").unwrap()..two.find("[verifier]").unwrap()];
    let mid = large
        .replace("[tiers.large]", "[tiers.mid]")
        .replace("sim-large-", "sim-mid-");
    let text = two
        .replace("[tiers.small]", &format!("[tiers.{first}]"))
        .replace("[tiers.large]", &format!("{mid}[tiers.large]"))
        .replace("max_retries = 4", "max_retries = 0")
        .replace(
            "[run]\n",
            &format!("[run]\ntiers = [\"{first}\", \"mid\", \"large\"]\n"),
        );
    std::fs::write(&path, text).unwrap();
    path
}

fn grade(run: &Path, out: &Path) -> std::process::Output {
    routeval()
        .args(["grade", "--rubrics"])
        .arg(repo().join("rubrics"))
        .arg("--run")
        .arg(run)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn tiers_of(rows: &[ResponseRow]) -> BTreeMap<String, BTreeSet<&str>> {
    let mut by_prompt: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for row in rows {
        by_prompt
            .entry(row.id.clone())
            .or_default()
            .insert(row.tier.name());
    }
    by_prompt
}

#[test]
fn three_tiers_run_grade_and_calibrate_with_every_stage_verified() {
    const PROMPTS: usize = 60;
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), PROMPTS);
    let faults = FaultProfile {
        server_error: 0.08,
        ..FaultProfile::default()
    };
    let sim = start_sim(
        &dataset,
        SimSettings {
            faults,
            ..SimSettings::default()
        },
    );
    let config = three_tier_config(directory.path(), &base_url(&sim), "mini");
    let out = directory.path().join("run");
    let cache = directory.path().join("cache");
    // Failed calls are rows with a reason, and the run says so.
    run_command(&config, &dataset, &out, &cache)
        .assert()
        .code(1);
    let first = read_all_responses(&out.join("responses.parquet")).unwrap();
    let failed: Vec<&ResponseRow> = first.iter().filter(|row| !row.answered()).collect();
    assert!(
        failed.iter().any(|row| row.tier.name() == "verifier_mid"),
        "the faults reach the mid stage's verifier: {:?}",
        failed.iter().map(|row| row.tier.name()).collect::<Vec<_>>()
    );
    let refused = grade(&out, &directory.path().join("refused.parquet"));
    assert_eq!(refused.status.code(), Some(2));

    // The resend: only the failed calls, each verifier from its stage's
    // stored answer.
    let mut resend = run_command(&config, &dataset, &out, &cache);
    resend.arg("--retry-errors");
    let mut attempts = 0;
    loop {
        attempts += 1;
        let output = resend.output().unwrap();
        if output.status.success() {
            break;
        }
        assert!(attempts < 20, "{}", String::from_utf8_lossy(&output.stderr));
    }
    let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
    assert!(rows.iter().all(ResponseRow::answered));
    let expected: BTreeSet<&str> = ["mini", "mid", "large", "verifier", "verifier_mid"].into();
    let by_prompt = tiers_of(&rows);
    assert_eq!(by_prompt.len(), PROMPTS);
    assert!(by_prompt.values().all(|tiers| *tiers == expected));
    assert_eq!(rows.len(), PROMPTS * expected.len());
    let answered_before: Vec<&ResponseRow> = first.iter().filter(|row| row.answered()).collect();
    for row in answered_before {
        let now = rows.iter().find(|now| now.key() == row.key()).unwrap();
        assert_eq!(now, row, "a completed call is never sent again");
    }
    let mid_model = rows
        .iter()
        .find(|row| row.tier.name() == "mid")
        .unwrap()
        .model_version
        .clone();
    assert_eq!(mid_model.as_deref(), Some("sim-mid-2026-11-01"));

    // grade: each tier's columns under its name, the tiers in the metadata.
    let graded = directory.path().join("graded.parquet");
    let output = grade(&out, &graded);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("mini ok") && stdout.contains("mid ok") && stdout.contains("large ok"));
    let metadata = SerializedFileReader::new(std::fs::File::open(&graded).unwrap()).unwrap();
    let tiers = metadata
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .find(|pair| pair.key == "routeval.graded.tiers")
        .and_then(|pair| pair.value.clone());
    assert_eq!(tiers.as_deref(), Some("mini,mid,large"));
    let version = metadata
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .find(|pair| pair.key == "routeval.graded.schema_version")
        .and_then(|pair| pair.value.clone());
    assert_eq!(
        version.as_deref(),
        Some("2"),
        "a table an older routeval would misread as two tiers is version 2"
    );
    let batch = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&graded).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("{name} is missing"))
            .clone()
    };
    assert!(batch.column_by_name("small_ok").is_none());
    let ids = column("id");
    let ids = ids.as_string::<i32>();
    let reference = |id: &str| {
        let q: usize = id[1..].parse().unwrap();
        (q + q % 7).to_string()
    };
    for (tier, flag, price) in [
        ("mini", "mini_ok", "cost_mini"),
        ("mid", "mid_ok", "cost_mid"),
        ("large", "large_ok", "cost_large"),
    ] {
        let (flags, prices) = (column(flag), column(price));
        let (flags, prices) = (flags.as_boolean(), prices.as_primitive::<Float64Type>());
        for index in 0..batch.num_rows() {
            let id = ids.value(index);
            let call = rows
                .iter()
                .find(|row| row.id == id && row.tier.name() == tier && row.sample == 0)
                .unwrap();
            assert_eq!(
                flags.value(index),
                call.text.as_deref() == Some(reference(id).as_str()),
                "{tier} {id}"
            );
            assert_eq!(prices.value(index), call.cost_usd.unwrap(), "{tier} {id}");
        }
    }
    let mid_scores = column("score_mid");
    let mid_scores = mid_scores.as_primitive::<Float64Type>();
    assert_eq!(mid_scores.null_count(), 0);
    assert!(
        mid_scores
            .values()
            .iter()
            .all(|score| (0.0..=1.0).contains(score))
    );
    let mid_verifier = column("cost_verifier_mid");
    for index in 0..batch.num_rows() {
        let id = ids.value(index);
        let call = rows
            .iter()
            .find(|row| row.id == id && row.tier.name() == "verifier_mid")
            .unwrap();
        assert_eq!(
            mid_verifier.as_primitive::<Float64Type>().value(index),
            call.cost_usd.unwrap()
        );
    }

    // calibrate reads the three tiers from the file, both policies.
    for policy in ["cascade", "predictive"] {
        let (document, _) = calibration_and_text(&graded, &["--policy", policy, "--target", "0.5"]);
        assert_eq!(
            document.tiers.as_deref(),
            Some(&["mini".to_owned(), "mid".to_owned(), "large".to_owned()][..]),
            "{policy}"
        );
        assert!(
            document
                .slices
                .iter()
                .all(|slice| slice.tiered.is_some() || slice.quality.is_none())
        );
    }
}

#[test]
fn a_tier_missing_from_the_run_order_or_a_stray_tier_is_one_line_exit_2() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 6);
    let config = three_tier_config(directory.path(), "http://127.0.0.1:9/v1", "small");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            "tiers = [\"small\", \"mid\", \"large\"]",
            "tiers = [\"small\", \"large\"]",
        ),
    )
    .unwrap();
    let out = directory.path().join("run");
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "[tiers.mid]: not in [run] tiers; name every tier there, cheapest first",
        ));
    assert!(
        !out.exists(),
        "nothing is written before the config is read"
    );
}

#[test]
fn a_stage_may_have_a_verifier_of_its_own() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 12);
    let sim = start_sim(&dataset, SimSettings::default());
    let config = three_tier_config(directory.path(), &base_url(&sim), "small");
    let text = std::fs::read_to_string(&config).unwrap();
    let own = format!(
        "[verifiers.mid]\nbase_url = \"{}\"\nmodel = \"sim-verifier\"\ntemplate = \"verifier\"\nprice_input_per_mtok = 0.5\nprice_output_per_mtok = 1.0\nmax_concurrency = 2\n\n",
        base_url(&sim)
    );
    std::fs::write(&config, text.replace("[run]", &format!("{own}[run]"))).unwrap();
    let out = directory.path().join("run");
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .success();
    let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
    let models = |tier: &str| -> BTreeSet<String> {
        rows.iter()
            .filter(|row| row.tier.name() == tier)
            .map(|row| row.model.clone())
            .collect()
    };
    assert_eq!(
        models("verifier_mid"),
        BTreeSet::from(["sim-verifier".to_owned()])
    );
    assert_eq!(
        models("verifier"),
        BTreeSet::from(["sim-verifier-2026-11-01".to_owned()])
    );
    assert_eq!(rows.len(), 12 * 5);

    // A verifier for the last tier, or a stage left without one, is refused.
    for (edit, expected) in [
        (
            text.replace(
                "[run]",
                &format!(
                    "{}[run]",
                    own.replace("[verifiers.mid]", "[verifiers.large]")
                ),
            ),
            "[verifiers.large]: not a tier whose answers are verified",
        ),
        (
            {
                let start = text.find("[verifier]").unwrap();
                let end = start + text[start..].find("[run]").unwrap();
                format!("{}{own}{}", &text[..start], &text[end..])
            },
            "the stage of tier \"small\" has no verifier",
        ),
    ] {
        std::fs::write(&config, edit).unwrap();
        let output = run_command(
            &config,
            &dataset,
            &directory.path().join("refused"),
            &directory.path().join("cache"),
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!directory.path().join("refused").exists());
    }
}
