//! Label sets of logged requests (`routeval sample --records --label-share`,
//! `replay candidate --labels`): the served records drawn for a person or a
//! judge to say whether the logged answer was acceptable, each drawn on its
//! own with a known probability (Poisson sampling, by a hash of the seed and
//! the record's id), so the labelled records are an independent sample of
//! the traffic whose every inclusion probability is exact. Whoever reads the
//! labels draws again and checks that every record drawn has its label.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::InputError;
use super::graded::RowLocation;
use crate::stats::random::{fnv1a, splitmix64, unit_of};

pub const LABEL_SET_SCHEMA_VERSION: u32 = 1;

/// What `sample --label-share --out` writes.
pub const LABEL_SET_OUTPUT: crate::atomic::OutputKind =
    crate::atomic::OutputKind::new("a label set", crate::atomic::Replaces::Nothing);

/// One record drawn to be labelled. Other keys (a labeller's notes) are
/// ignored on reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelRow {
    pub label_schema_version: u32,
    pub record_id: String,
    pub slice: String,
    /// The route whose answer is judged: the one that answered.
    pub route: String,
    /// The route the decision chose, before any fallback.
    pub decided_route: String,
    /// The last user message, secrets redacted, where the record kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub seed: u64,
    /// The probability every record had of being drawn.
    pub inclusion_probability: f64,
    /// Whether the logged answer was acceptable (a person's or a judge's);
    /// empty until labelled.
    pub ok: Option<bool>,
    /// With an audit (`sample --audit-share A`): the probability every
    /// drawn row had of being audited, whether this one was, and a person's
    /// verdict on it, which corrects the judge's `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_probability: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audited_ok: Option<bool>,
}

/// Whether the record `id` is drawn to be labelled at `share` under `seed`:
/// a fixed function of the two, the same on every machine and release.
pub fn drawn_for_label(seed: u64, share: f64, id: &str) -> bool {
    let hash = fnv1a(id.as_bytes()) ^ splitmix64(seed ^ 0x6c61_6265_6c73_0001);
    unit_of(splitmix64(hash)) < share
}

/// Whether the labelled record `id` is drawn for a person to audit at
/// `share` under `seed`: independent of the label draw.
pub fn drawn_for_audit(seed: u64, share: f64, id: &str) -> bool {
    let hash = fnv1a(id.as_bytes()) ^ splitmix64(seed ^ 0x6175_6469_7473_0002);
    unit_of(splitmix64(hash)) < share
}

/// Every row of a label set, with its line, each labelled and of one draw
/// (one seed and one inclusion probability in (0, 1]); else one error
/// naming the file, the line and the field.
pub fn read_labels(path: &Path) -> Result<Vec<(u64, LabelRow)>, InputError> {
    let invalid = |line: u64, field: &str, problem: String| InputError::Invalid {
        path: path.to_owned(),
        location: RowLocation::Line(line),
        field: field.to_owned(),
        problem,
    };
    let mut rows: Vec<(u64, LabelRow)> = Vec::new();
    super::for_each_json_row(path, "a label row", |number, row: LabelRow| {
        if row.label_schema_version != LABEL_SET_SCHEMA_VERSION {
            return Err(invalid(
                number,
                "label_schema_version",
                crate::version::unknown(
                    &row.label_schema_version.to_string(),
                    &LABEL_SET_SCHEMA_VERSION.to_string(),
                ),
            ));
        }
        if row.ok.is_none() {
            return Err(invalid(
                number,
                "ok",
                "empty: every drawn record needs its verdict (true or false); leaving one out would bias the estimate".to_owned(),
            ));
        }
        let probability = row.inclusion_probability;
        if !(probability > 0.0 && probability <= 1.0) {
            return Err(invalid(
                number,
                "inclusion_probability",
                format!("{probability} is not a probability above 0 and at most 1"),
            ));
        }
        check_audit(&row).map_err(|(field, problem)| invalid(number, field, problem))?;
        if let Some((_, first)) = rows.first()
            && (
                first.seed,
                first.inclusion_probability,
                first.audit_probability,
            ) != (row.seed, probability, row.audit_probability)
        {
            return Err(invalid(
                number,
                "seed",
                format!(
                    "seed {} at probability {probability} (audit {:?}), where the first row has seed {} at {} (audit {:?}): a label set is one draw",
                    row.seed,
                    row.audit_probability,
                    first.seed,
                    first.inclusion_probability,
                    first.audit_probability
                ),
            ));
        }
        rows.push((number, row));
        Ok(())
    })?;
    if rows.is_empty() {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the label set has no rows",
        });
    }
    Ok(rows)
}

/// A row's audit fields agree: with an audit probability in (0, 1], it
/// says whether it was audited, and has a person's verdict exactly when it
/// was; without one, neither.
fn check_audit(row: &LabelRow) -> Result<(), (&'static str, String)> {
    match (row.audit_probability, row.audit, row.audited_ok) {
        (None, None, None) => Ok(()),
        (None, _, _) => Err((
            "audit_probability",
            "missing, where the row has audit fields".to_owned(),
        )),
        (Some(share), _, _) if !(share > 0.0 && share <= 1.0) => Err((
            "audit_probability",
            format!("{share} is not a probability above 0 and at most 1"),
        )),
        (Some(_), None, _) => Err((
            "audit",
            "missing: whether the draw chose the row for a person to audit".to_owned(),
        )),
        (Some(_), Some(true), None) => Err((
            "audited_ok",
            "empty: the row was drawn to be audited and needs a person's verdict (true or false)"
                .to_owned(),
        )),
        (Some(_), Some(false), Some(_)) => Err((
            "audited_ok",
            "set on a row the audit did not draw: only drawn rows may be audited, or the correction is biased".to_owned(),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_takes_the_share_and_depends_on_the_seed() {
        let ids: Vec<String> = (0..20_000).map(|i| format!("req-{i}")).collect();
        let taken = ids.iter().filter(|id| drawn_for_label(1, 0.1, id)).count();
        // Binomial(20,000, 0.1): sd 42.
        assert!((1_750..=2_250).contains(&taken), "{taken}");
        let other = ids
            .iter()
            .filter(|id| drawn_for_label(1, 0.1, id) != drawn_for_label(2, 0.1, id))
            .count();
        assert!(other > 2_000, "{other}");
        assert!(ids.iter().all(|id| drawn_for_label(9, 1.0, id)));
    }

    #[test]
    fn a_row_without_its_verdict_is_named() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("labels.jsonl");
        let row = |ok: &str| {
            format!(
                r#"{{"label_schema_version":1,"record_id":"a","slice":"s","route":"small","decided_route":"small","seed":1,"inclusion_probability":0.5,"ok":{ok}}}"#
            )
        };
        std::fs::write(&path, format!("{}\n{}\n", row("true"), row("null"))).unwrap();
        let error = read_labels(&path).unwrap_err().to_string();
        assert!(error.contains("line 2, field \"ok\": empty"), "{error}");
        std::fs::write(&path, format!("{}\n", row("false"))).unwrap();
        assert_eq!(read_labels(&path).unwrap()[0].1.ok, Some(false));
    }

    #[test]
    fn audit_fields_must_agree_with_the_audit() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("labels.jsonl");
        for (fields, problem) in [
            (r#""audit":true"#, "field \"audit_probability\": missing"),
            (r#""audit_probability":0.3"#, "field \"audit\": missing"),
            (
                r#""audit_probability":0.3,"audit":true"#,
                "field \"audited_ok\": empty",
            ),
            (
                r#""audit_probability":0.3,"audit":false,"audited_ok":true"#,
                "field \"audited_ok\": set on a row the audit did not draw",
            ),
        ] {
            std::fs::write(
                &path,
                format!(
                    r#"{{"label_schema_version":1,"record_id":"a","slice":"s","route":"small","decided_route":"small","seed":1,"inclusion_probability":0.5,"ok":true,{fields}}}"#
                ),
            )
            .unwrap();
            let error = read_labels(&path).unwrap_err().to_string();
            assert!(error.contains(problem), "{fields}: {error}");
        }
    }
}
