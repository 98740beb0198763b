//! The demo data set in `datasets/demo/`: every row reads, names a shipped
//! rubric, and its reference is an answer that rubric accepts, so a model
//! that answers with the reference is graded right.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use routeval::rubric::load_rubrics;
use routeval::schema::read_dataset;

#[test]
fn every_reference_passes_its_own_rubric() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rubrics = load_rubrics(&root.join("rubrics")).unwrap();
    let names: BTreeSet<String> = rubrics.keys().cloned().collect();
    let rows = read_dataset(&root.join("datasets/demo/prompts.jsonl"), &names).unwrap();
    assert_eq!(rows.len(), 300);
    let mut per_slice: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        *per_slice.entry(row.slice.as_str()).or_default() += 1;
        let reference = row
            .reference
            .as_deref()
            .expect("every demo prompt has a reference");
        let verdict = rubrics[&row.rubric].grade(reference, Some(reference));
        assert!(verdict.pass, "{}: {}", row.id, verdict.detail);
        let difficulty = row.metadata["difficulty"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&difficulty));
    }
    assert_eq!(per_slice.len(), 5, "{per_slice:?}");
    // serve-sim knows a prompt by its text, and cross-fitting folds by it:
    // two rows with one text would share their draws and their fold.
    let texts: BTreeSet<&str> = rows
        .iter()
        .map(|row| row.messages.last().unwrap().content.as_str())
        .collect();
    assert_eq!(texts.len(), rows.len(), "repeated prompt texts");
    // A wrong answer fails: the reference of another row of a different
    // rubric is not accepted.
    let billing = rows.iter().find(|row| row.slice == "billing").unwrap();
    assert!(
        !rubrics[&billing.rubric]
            .grade("I am not sure, maybe a week?", billing.reference.as_deref())
            .pass
    );
}

#[test]
fn the_demo_route_tables_and_fault_profile_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/demo");
    for name in ["predictive.toml", "cascade.toml"] {
        let table = routeval::routes::RouteTable::load(&root.join("routes").join(name)).unwrap();
        assert_eq!(table.logical_model, "support-assistant");
    }
    let faults = routeval::upstream_sim::FaultProfile::load(&root.join("faults.toml")).unwrap();
    let faulty = (0..10_000)
        .filter(|request| faults.draw(1, *request).is_some())
        .count();
    assert!(
        (1_800..2_200).contains(&faulty),
        "about 20% of requests fault: {faulty}"
    );
}
