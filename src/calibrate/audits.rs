//! `calibrate --audits FILE`: the human verdicts of an audit set, checked
//! against the draw that should have chosen them. The draw is a function of
//! the results' rows and the recorded seed, so it is made again here: an
//! audit set holding rows the draw did not choose (picked by hand, the
//! easiest ones), missing rows it did choose, or drawn from results that
//! have changed since is refused, because the correction's guarantee rests
//! on the audited rows being the random draw they claim to be.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::policy::Audit;
use crate::schema::{
    AuditRow, InputError, ReadOptions, RowLocation, SliceRows, read_audits, slice_rows,
};

use super::error::CalibrateError;

/// The verdicts of a checked audit set, by row id: the human's verdicts and
/// the weight each row counts with (1 / its inclusion probability).
#[derive(Debug, Default)]
pub struct AuditVerdicts {
    by_id: HashMap<String, (Audit, f32)>,
}

impl AuditVerdicts {
    pub fn of(&self, id: &str) -> Option<(Audit, f32)> {
        self.by_id.get(id).copied()
    }
}

/// Reads the audit set at `audits`, draws again from the results at
/// `results`, and returns the verdicts when the two agree.
pub fn load_audits(
    audits: &Path,
    results: &Path,
    read: &ReadOptions,
) -> Result<AuditVerdicts, CalibrateError> {
    let rows = read_audits(audits)?;
    let by_slice = one_draw_by_slice(audits, &rows, read)?;
    let slices = results_by_slice(audits, results, read)?;
    let first = &rows[0].1;
    let mut verdicts = AuditVerdicts::default();
    for (name, file_rows) in &by_slice {
        let Some(slice) = slices.get(*name) else {
            let (line, _) = file_rows[0];
            return Err(refuse(
                audits,
                line,
                "slice",
                format!(
                    "slice \"{name}\" is not in {}: the audits come from other results",
                    results.display()
                ),
            ));
        };
        verify_slice(
            audits,
            results,
            first,
            name,
            slice,
            file_rows,
            &mut verdicts,
        )?;
    }
    if let Some(name) = slices
        .keys()
        .find(|name| !by_slice.contains_key(name.as_str()))
    {
        return Err(CalibrateError::UnauditedSlice {
            audits: audits.to_owned(),
            slice: name.clone(),
        });
    }
    Ok(verdicts)
}

/// A line of the audit set, refused.
fn refuse(audits: &Path, line: u64, field: &str, problem: String) -> CalibrateError {
    InputError::Invalid {
        path: audits.to_owned(),
        location: RowLocation::Line(line),
        field: field.to_owned(),
        problem,
    }
    .into()
}

/// An audit set's rows by slice, each with its line.
type BySlice<'a> = BTreeMap<&'a str, Vec<(u64, &'a AuditRow)>>;

/// The audit set's rows by slice, once they are one draw on the score
/// column calibrate reads, each with both verdicts.
fn one_draw_by_slice<'a>(
    audits: &Path,
    rows: &'a [(u64, AuditRow)],
    read: &ReadOptions,
) -> Result<BySlice<'a>, CalibrateError> {
    let (first_line, first) = &rows[0];
    if first.score_column != read.names.score {
        return Err(refuse(
            audits,
            *first_line,
            "score_column",
            format!(
                "the audits were drawn on column \"{}\", calibrate reads \"{}\" (--score-col)",
                first.score_column, read.names.score
            ),
        ));
    }
    let mut by_slice = BySlice::new();
    for (line, row) in rows {
        for (field, same) in [
            ("seed", row.seed == first.seed),
            ("strata", row.strata == first.strata),
            ("size", row.size == first.size),
            ("score_column", row.score_column == first.score_column),
        ] {
            if !same {
                return Err(refuse(
                    audits,
                    *line,
                    field,
                    format!("differs from line {first_line}'s: an audit set is one draw"),
                ));
            }
        }
        for (field, verdict) in [
            ("audited_ok_small", row.audited_ok_small),
            ("audited_ok_large", row.audited_ok_large),
        ] {
            if verdict.is_none() {
                return Err(refuse(
                    audits,
                    *line,
                    field,
                    format!(
                        "row {:?} has no verdict: every drawn row needs both, since leaving out the hard ones would bias the correction",
                        row.id
                    ),
                ));
            }
        }
        by_slice.entry(&row.slice).or_default().push((*line, row));
    }
    Ok(by_slice)
}

/// The results' rows by slice; results that carry verdicts of their own
/// are refused beside an audit set.
fn results_by_slice(
    audits: &Path,
    results: &Path,
    read: &ReadOptions,
) -> Result<BTreeMap<String, SliceRows>, CalibrateError> {
    let slices = slice_rows(results, read)?;
    if slices.values().any(|slice| slice.audited_in_results) {
        return Err(CalibrateError::AuditedTwice {
            results: results.to_owned(),
            audits: audits.to_owned(),
        });
    }
    Ok(slices)
}

/// One slice's audited rows against the draw made again from its rows:
/// the same rows, with the draw's probability; their verdicts into
/// `verdicts`.
fn verify_slice(
    audits: &Path,
    results: &Path,
    first: &AuditRow,
    name: &str,
    slice: &SliceRows,
    file_rows: &[(u64, &AuditRow)],
    verdicts: &mut AuditVerdicts,
) -> Result<(), CalibrateError> {
    let (line, row) = file_rows[0];
    if row.slice_rows != slice.ids.len() as u64 {
        return Err(refuse(
            audits,
            line,
            "slice_rows",
            format!(
                "the draw was made from {} rows of slice \"{name}\", {} has {}: the results changed since the draw; draw again with routeval sample --audit",
                row.slice_rows,
                results.display(),
                slice.ids.len()
            ),
        ));
    }
    let draw = slice.draw(name, first.size as usize, first.strata as usize, first.seed);
    let drawn: HashMap<&str, u32> = draw
        .chosen
        .iter()
        .map(|&(index, stratum)| (slice.ids[index].as_str(), stratum))
        .collect();
    let mut seen: HashMap<&str, u64> = HashMap::new();
    for &(line, row) in file_rows {
        if let Some(previous) = seen.insert(&row.id, line) {
            return Err(refuse(
                audits,
                line,
                "id",
                format!(
                    "row {:?} is audited twice, first at line {previous}",
                    row.id
                ),
            ));
        }
        if !drawn.contains_key(row.id.as_str()) {
            return Err(refuse(
                audits,
                line,
                "id",
                format!(
                    "row {:?} is not one the draw of seed {} chose from slice \"{name}\": audits are the rows the draw chose, not others",
                    row.id, first.seed
                ),
            ));
        }
        if (row.inclusion_probability - draw.inclusion_probability).abs()
            > 1e-9 * draw.inclusion_probability
        {
            return Err(refuse(
                audits,
                line,
                "inclusion_probability",
                format!(
                    "{} is not the draw's {}",
                    row.inclusion_probability, draw.inclusion_probability
                ),
            ));
        }
        let weight = (1.0 / draw.inclusion_probability) as f32;
        let audit = Audit::of(row.audited_ok_small.zip(row.audited_ok_large));
        verdicts.by_id.insert(row.id.clone(), (audit, weight));
    }
    if let Some(missing) = draw
        .chosen
        .iter()
        .map(|&(index, _)| slice.ids[index].as_str())
        .find(|id| !seen.contains_key(id))
    {
        return Err(refuse(
            audits,
            line,
            "id",
            format!(
                "the draw chose row {missing:?} of slice \"{name}\", and the audit set does not have it: every drawn row needs its verdicts"
            ),
        ));
    }
    Ok(())
}
