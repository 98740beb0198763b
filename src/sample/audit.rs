//! `routeval sample --audit N`: the rows of graded results a human should
//! audit, per slice, so that `calibrate --audits` can correct the grader's
//! error with a guarantee. The draw (stratified by score, every row with
//! the same inclusion probability) is `stats::draw_stratified`; each drawn
//! row is written with the draw's parameters and its probability, so the
//! draw can be made again and checked.

use std::collections::BTreeMap;
use std::path::Path;

use crate::schema::{
    AUDITS_SCHEMA_VERSION, AuditRow, ColumnNames, ReadError, ReadOptions, slice_rows,
};

/// Rows to audit per slice, in how many score strata, under which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditOptions {
    pub size: usize,
    pub strata: usize,
    pub seed: u64,
}

/// Per slice: its rows in the results, and how many were drawn.
pub type DrawnPerSlice = BTreeMap<String, (u64, u64)>;

/// The drawn rows, by slice then id, and per slice its rows and how many
/// were drawn.
pub fn draw_audits(
    results: &Path,
    names: ColumnNames,
    options: AuditOptions,
) -> Result<(Vec<AuditRow>, DrawnPerSlice), ReadError> {
    let read = ReadOptions::of(names);
    let slices = slice_rows(results, &read)?;
    let mut rows = Vec::new();
    let mut counts = BTreeMap::new();
    for (slice, rows_of_slice) in slices {
        let draw = rows_of_slice.draw(&slice, options.size, options.strata, options.seed);
        let (ids, scores) = (&rows_of_slice.ids, &rows_of_slice.scores);
        counts.insert(slice.clone(), (ids.len() as u64, draw.chosen.len() as u64));
        let mut drawn: Vec<AuditRow> = draw
            .chosen
            .iter()
            .map(|&(index, stratum)| AuditRow {
                audit_schema_version: AUDITS_SCHEMA_VERSION,
                id: ids[index].clone(),
                slice: slice.clone(),
                score: scores[index],
                score_column: read.names.score.clone(),
                seed: options.seed,
                strata: options.strata as u32,
                size: options.size as u64,
                slice_rows: ids.len() as u64,
                stratum,
                inclusion_probability: draw.inclusion_probability,
                audited_ok_small: None,
                audited_ok_large: None,
            })
            .collect();
        drawn.sort_by(|a, b| a.id.cmp(&b.id));
        rows.extend(drawn);
    }
    Ok((rows, counts))
}
