//! The audit set (`routeval sample --audit N --out FILE`, read by
//! `calibrate --audits FILE`): the graded rows drawn for a human to audit,
//! each with the draw that chose it and its inclusion probability, and the
//! two verdicts the human fills in. JSON lines, or CSV for a spreadsheet.
//! The draw itself is `stats::draw_stratified`; this is its file.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{InputError, ReadError, ReadOptions, RowLocation};
use crate::stats::random::fnv1a;
use crate::stats::{StratifiedDraw, draw_stratified};

pub const AUDITS_SCHEMA_VERSION: u32 = 1;

/// The columns, in the CSV's order.
pub const AUDIT_COLUMNS: [&str; 13] = [
    "audit_schema_version",
    "id",
    "slice",
    "score",
    "score_column",
    "seed",
    "strata",
    "size",
    "slice_rows",
    "stratum",
    "inclusion_probability",
    "audited_ok_small",
    "audited_ok_large",
];

pub const AUDITS_OUTPUT_LINES: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "an audit set",
    crate::atomic::Replaces::Lines(&["audit_schema_version", "id", "inclusion_probability"]),
);

pub const AUDITS_OUTPUT_CSV: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "an audit set",
    crate::atomic::Replaces::Prefix(b"audit_schema_version,id,"),
);

/// One drawn row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    pub audit_schema_version: u32,
    pub id: String,
    pub slice: String,
    pub score: f64,
    /// The results' column the draw stratified on.
    pub score_column: String,
    /// The draw: its seed, strata and rows per slice.
    pub seed: u64,
    pub strata: u32,
    pub size: u64,
    /// The slice's rows in the results the draw was made from.
    pub slice_rows: u64,
    /// The row's score stratum, 0 the lowest.
    pub stratum: u32,
    pub inclusion_probability: f64,
    /// The human's verdicts on the small and large tiers' answers; empty
    /// until audited.
    pub audited_ok_small: Option<bool>,
    pub audited_ok_large: Option<bool>,
}

/// One slice of graded results: its rows' ids and scores, in file order.
#[derive(Debug, Default)]
pub struct SliceRows {
    pub ids: Vec<String>,
    pub scores: Vec<f64>,
    /// Whether any of its rows carries verdicts in the results' own
    /// `audited_ok_*` columns.
    pub audited_in_results: bool,
}

impl SliceRows {
    /// The draw of an audit set of `size` rows in `strata` strata under
    /// `seed` from this slice, named `slice`: what `sample --audit` writes
    /// and `calibrate --audits` checks, from one definition.
    pub fn draw(&self, slice: &str, size: usize, strata: usize, seed: u64) -> StratifiedDraw {
        let keys: Vec<u64> = self.ids.iter().map(|id| fnv1a(id.as_bytes())).collect();
        draw_stratified(
            &keys,
            &self.scores,
            size,
            strata,
            seed,
            fnv1a(slice.as_bytes()),
        )
    }
}

/// The graded results at `results`, by slice.
pub fn slice_rows(
    results: &Path,
    read: &ReadOptions,
) -> Result<std::collections::BTreeMap<String, SliceRows>, ReadError> {
    let mut slices: std::collections::BTreeMap<String, SliceRows> = Default::default();
    super::for_each_graded_batch(results, read, |batch| {
        let audited = batch.audited.iter().any(Option::is_some);
        for index in 0..batch.num_rows() {
            let slice = slices
                .entry(batch.slice.value(index).to_owned())
                .or_default();
            slice.ids.push(batch.id.value(index).to_owned());
            slice.scores.push(batch.score.value(index));
            slice.audited_in_results |= audited;
        }
    })?;
    Ok(slices)
}

/// Whether `path` names a CSV audit set (else JSON lines).
pub fn audits_are_csv(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| extension.eq_ignore_ascii_case("csv"))
}

/// The audit set as the bytes of its file.
pub fn audits_to_bytes(rows: &[AuditRow], csv: bool) -> Vec<u8> {
    if !csv {
        return super::json_lines(rows);
    }
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer
        .write_record(AUDIT_COLUMNS)
        .expect("writing to memory");
    let verdict = |value: Option<bool>| value.map_or_else(String::new, |value| value.to_string());
    for row in rows {
        writer
            .write_record([
                row.audit_schema_version.to_string(),
                row.id.clone(),
                row.slice.clone(),
                row.score.to_string(),
                row.score_column.clone(),
                row.seed.to_string(),
                row.strata.to_string(),
                row.size.to_string(),
                row.slice_rows.to_string(),
                row.stratum.to_string(),
                row.inclusion_probability.to_string(),
                verdict(row.audited_ok_small),
                verdict(row.audited_ok_large),
            ])
            .expect("writing to memory");
    }
    writer.into_inner().expect("writing to memory")
}

/// Reads an audit set, each row with its 1-based line. Columns other than
/// [`AUDIT_COLUMNS`] (a reviewer's notes) are ignored.
pub fn read_audits(path: &Path) -> Result<Vec<(u64, AuditRow)>, InputError> {
    let rows = if audits_are_csv(path) {
        read_csv(path)?
    } else {
        let mut rows = Vec::new();
        super::for_each_json_row(path, "an audit row", |number, row: AuditRow| {
            rows.push((number, row));
            Ok::<(), ReadError>(())
        })?;
        rows
    };
    if rows.is_empty() {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the audit set has no rows",
        });
    }
    for (line, row) in &rows {
        if row.audit_schema_version != AUDITS_SCHEMA_VERSION {
            return Err(invalid(
                path,
                *line,
                "audit_schema_version",
                format!(
                    "{} is not one this routeval reads ({AUDITS_SCHEMA_VERSION}); use the routeval that drew it",
                    row.audit_schema_version
                ),
            ));
        }
    }
    Ok(rows)
}

fn invalid(path: &Path, line: u64, field: &str, problem: String) -> InputError {
    InputError::Invalid {
        path: path.to_owned(),
        location: RowLocation::Line(line),
        field: field.to_owned(),
        problem,
    }
}

fn read_csv(path: &Path) -> Result<Vec<(u64, AuditRow)>, InputError> {
    let mut file = super::CsvFile::open(path)?;
    let mut places = [0usize; AUDIT_COLUMNS.len()];
    for (place, column) in places.iter_mut().zip(AUDIT_COLUMNS) {
        *place = file.column(column, "")?;
    }
    let mut rows = Vec::new();
    let mut record = csv::StringRecord::new();
    while let Some(line) = file.read(&mut record)? {
        let text = |column: usize| record.get(places[column]).unwrap_or("").trim();
        let number = |column: usize| -> Result<f64, InputError> {
            text(column).parse::<f64>().map_err(|_| {
                invalid(
                    path,
                    line,
                    AUDIT_COLUMNS[column],
                    format!("{:?} is not a number", text(column)),
                )
            })
        };
        let whole = |column: usize| -> Result<u64, InputError> {
            text(column).parse::<u64>().map_err(|_| {
                invalid(
                    path,
                    line,
                    AUDIT_COLUMNS[column],
                    format!("{:?} is not a whole number", text(column)),
                )
            })
        };
        let verdict = |column: usize| -> Result<Option<bool>, InputError> {
            match text(column).to_ascii_lowercase().as_str() {
                "" => Ok(None),
                "true" | "1" => Ok(Some(true)),
                "false" | "0" => Ok(Some(false)),
                other => Err(invalid(
                    path,
                    line,
                    AUDIT_COLUMNS[column],
                    format!("{other:?} is not a verdict: true or false (or 1 or 0)"),
                )),
            }
        };
        let small_verdict = verdict(11)?;
        let large_verdict = verdict(12)?;
        rows.push((
            line,
            AuditRow {
                audit_schema_version: whole(0)? as u32,
                id: text(1).to_owned(),
                slice: text(2).to_owned(),
                score: number(3)?,
                score_column: text(4).to_owned(),
                seed: whole(5)?,
                strata: whole(6)? as u32,
                size: whole(7)?,
                slice_rows: whole(8)?,
                stratum: whole(9)? as u32,
                inclusion_probability: number(10)?,
                audited_ok_small: small_verdict,
                audited_ok_large: large_verdict,
            },
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, verdicts: (Option<bool>, Option<bool>)) -> AuditRow {
        AuditRow {
            audit_schema_version: AUDITS_SCHEMA_VERSION,
            id: id.to_owned(),
            slice: "billing, eu".to_owned(),
            score: 0.125,
            score_column: "score".to_owned(),
            seed: 7,
            strata: 10,
            size: 30,
            slice_rows: 2_000,
            stratum: 3,
            inclusion_probability: 0.015,
            audited_ok_small: verdicts.0,
            audited_ok_large: verdicts.1,
        }
    }

    #[test]
    fn both_formats_read_back_what_was_written() {
        let directory = tempfile::tempdir().unwrap();
        let rows = vec![
            row("a", (None, None)),
            row("b\"1", (Some(true), Some(false))),
        ];
        for name in ["audits.jsonl", "audits.csv"] {
            let path = directory.path().join(name);
            std::fs::write(&path, audits_to_bytes(&rows, audits_are_csv(&path))).unwrap();
            let read: Vec<AuditRow> = read_audits(&path)
                .unwrap()
                .into_iter()
                .map(|(_, row)| row)
                .collect();
            assert_eq!(read, rows, "{name}");
        }
    }

    #[test]
    fn a_spreadsheet_verdict_that_is_not_one_is_named_with_its_line() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("audits.csv");
        let mut text = String::from_utf8(audits_to_bytes(
            &[row("a", (None, None)), row("b", (None, None))],
            true,
        ))
        .unwrap();
        text = text.replacen(",,\n", ",yes,no\n", 2);
        std::fs::write(&path, text).unwrap();
        let message = read_audits(&path).unwrap_err().to_string();
        assert!(
            message.ends_with("audits.csv: line 2, field \"audited_ok_small\": \"yes\" is not a verdict: true or false (or 1 or 0)"),
            "{message}"
        );
    }
}
