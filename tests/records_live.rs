//! Reading a records directory serve is writing: the journal it lists may
//! be rolled into its Parquet part before the reader opens it, and the two
//! may be listed together mid-roll. Each interleaving is made to happen
//! here, at the exact point a reader meets it, rather than hoped for under
//! load: every record is read once either way.

use std::collections::BTreeSet;
use std::path::Path;

use routeval::records::{FieldNames, Record, RecordsWriter, Status, for_each_record};

fn record(id: &str) -> Record<'static> {
    let mut record = Record::new(
        id.to_owned(),
        1_764_000_000_000,
        "billing".to_owned(),
        "small".to_owned(),
        Status::Ok,
    );
    record.decided_route = Some("small".into());
    record
}

fn write_parquet(path: &Path, ids: &[&str]) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = RecordsWriter::new(file).unwrap();
    for id in ids {
        writer.push(record(id)).unwrap();
    }
    writer.close().unwrap();
}

fn write_journal(path: &Path, ids: &[&str]) {
    let lines: String = ids
        .iter()
        .map(|id| serde_json::to_string(&record(id)).unwrap() + "\n")
        .collect();
    std::fs::write(path, lines).unwrap();
}

/// Every id read from `directory`, `during` run once when the first record
/// has been read (after the listing, before the journal is opened).
fn read_ids(directory: &Path, mut during: impl FnMut()) -> Vec<String> {
    let mut ids = Vec::new();
    let mut first = true;
    for_each_record(directory, &FieldNames::default(), |_, record| {
        if std::mem::take(&mut first) {
            during();
        }
        ids.push(record.id.to_string());
        Ok(())
    })
    .unwrap();
    ids
}

#[test]
fn a_journal_rolled_away_after_the_listing_is_read_from_its_part() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path();
    write_parquet(&records.join("part-000001.parquet"), &["a", "b"]);
    write_journal(&records.join("part-000002.jsonl"), &["c", "d"]);
    // serve rolls the journal as the reader reads part 1: the part is
    // written, with a record appended since, and the journal removed.
    let ids = read_ids(records, || {
        write_parquet(&records.join("part-000002.parquet"), &["c", "d", "e"]);
        std::fs::remove_file(records.join("part-000002.jsonl")).unwrap();
    });
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
}

#[test]
fn a_journal_listed_beside_the_part_it_is_rolled_into_is_read_once() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path();
    write_parquet(&records.join("part-000001.parquet"), &["a"]);
    write_parquet(&records.join("part-000002.parquet"), &["b", "c"]);
    write_journal(&records.join("part-000002.jsonl"), &["b", "c", "d"]);
    let ids = read_ids(records, || {});
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    assert_eq!(ids, ["a", "b", "c", "d"]);
}
