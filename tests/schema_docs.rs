//! `docs/schema.md` documents the graded-results table the code defines; this
//! keeps the two from drifting apart.

use routeval::schema::Column;

#[test]
fn every_column_is_documented_with_its_type() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = docs
        .split("## The graded-results table")
        .nth(1)
        .expect("docs/schema.md has a graded-results section");
    let rows: Vec<Vec<String>> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("| `"))
        .map(|line| line.split('|').map(|cell| cell.trim().to_owned()).collect())
        .collect();
    let documented: Vec<(String, String, String)> = rows
        .iter()
        .map(|cells| {
            (
                cells[1].trim_matches('`').to_owned(),
                cells[2].clone(),
                cells[3].clone(),
            )
        })
        .collect();
    let defined: Vec<(String, String, String)> = Column::ALL
        .iter()
        .map(|column| {
            (
                column.name().to_owned(),
                column.kind().describe().to_owned(),
                if column.required() { "yes" } else { "no" }.to_owned(),
            )
        })
        .collect();
    assert_eq!(documented, defined);
}

#[test]
fn every_responses_column_is_documented() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = docs
        .split("## The responses table")
        .nth(1)
        .expect("docs/schema.md has a responses section");
    let documented: Vec<(String, String)> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[3].to_owned())
        })
        .collect();
    let defined: Vec<(String, String)> = routeval::schema::RESPONSES_SCHEMA
        .fields()
        .iter()
        .map(|field| {
            (
                field.name().clone(),
                if field.is_nullable() { "yes" } else { "no" }.to_owned(),
            )
        })
        .collect();
    assert_eq!(documented, defined);
}

#[test]
fn every_request_record_column_is_documented_with_its_type() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = docs
        .split("## Request records")
        .nth(1)
        .expect("docs/schema.md has a request-records section");
    let documented: Vec<(String, String, String)> = section
        .lines()
        .take_while(|line| !line.starts_with("## ") && !line.starts_with("### "))
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (
                cells[1].trim_matches('`').to_owned(),
                cells[2].to_owned(),
                cells[3].to_owned(),
            )
        })
        .collect();
    let defined: Vec<(String, String, String)> = routeval::records::RECORD_COLUMNS
        .iter()
        .map(|column| {
            (
                column.name.to_owned(),
                column.kind.data_type().to_string().to_lowercase(),
                if column.required { "yes" } else { "no" }.to_owned(),
            )
        })
        .collect();
    assert_eq!(documented, defined);
}
