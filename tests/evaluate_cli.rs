//! `routeval evaluate`: the example results' scores against a random router
//! and the oracle, as a strict versioned document whose every key is
//! documented, and as a table.

use routeval::schema::EvaluationDocument;

use crate::common::{example_results, routeval};

#[test]
fn the_document_is_strict_documented_and_ranks_the_routers() {
    let output = routeval()
        .args(["evaluate", "--results"])
        .arg(example_results())
        .arg("--json")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let document: EvaluationDocument = serde_json::from_str(&text).unwrap();
    assert_eq!(document.schema_version, 1);
    assert_eq!(document.results.rows, 3200);
    // The oracle escalates exactly the prompts that need it; a random
    // router recovers about half the gap; the example's scores lie between.
    assert!(document.oracle.apgr >= document.router.apgr);
    assert!(document.router.apgr > document.random.apgr);
    assert!((document.random.apgr - 0.5).abs() < 0.05, "{document:?}");
    for quality in [&document.router, &document.random, &document.oracle] {
        let (cpt50, cpt80) = (quality.cpt50.unwrap(), quality.cpt80.unwrap());
        assert!(0.0 < cpt50 && cpt50 <= cpt80 && cpt80 <= 1.0, "{quality:?}");
    }
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let missing = crate::common::undocumented_keys(
        "## evaluate --json",
        &[&value, &value["results"], &value["router"]],
    );
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");

    let table = routeval()
        .args(["evaluate", "--results"])
        .arg(example_results())
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    for row in ["APGR", "scores in the file", "random", "oracle"] {
        assert!(table.contains(row), "{table}");
    }
    assert!(
        table.contains(&format!("{:.3}", document.router.apgr)),
        "{table}"
    );
}
