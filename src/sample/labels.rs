//! `routeval sample --records DIR --label-share Q`: the label set of logged
//! answers for `replay candidate`. Each decision serve recorded is drawn on
//! its own with probability Q (a hash of the seed and its id), so the set is
//! an independent sample of the traffic with an exact inclusion probability;
//! the prompt is kept redacted for the labeller, nothing else of the record.
//! With an audit share, a second independent draw marks the rows a person
//! audits, whose verdicts correct a judge's labels. With `--config`, the
//! share and seed are the ones the signed config committed
//! (`[serving.explore.labels]`), fixed before the records existed, and only
//! that config's decisions are drawn.

use std::collections::BTreeMap;
use std::path::Path;

use crate::records::{FieldNames, Reason, for_each_record, redact};
use crate::schema::{
    InputError, LABEL_SET_SCHEMA_VERSION, LabelRow, drawn_for_audit, drawn_for_label,
};
use crate::units::Share;

/// Per slice: (decisions, drawn).
pub type LabelCounts = BTreeMap<String, (u64, u64)>;

/// The records of `records` drawn to be labelled at `share` under `seed`,
/// in the records' order, and how many each slice had and gave; with
/// `audit`, each drawn row also drawn, on its own with that probability,
/// for a person to audit a judge's label. With `only`, the decisions of
/// the config of that sha256 alone.
pub fn draw_labels(
    records: &Path,
    (share, seed): (Share, u64),
    audit: Option<Share>,
    only: Option<&str>,
) -> Result<(Vec<LabelRow>, LabelCounts), InputError> {
    let (share, audit) = (share.get(), audit.map(Share::get));
    let mut rows = Vec::new();
    let mut counts = LabelCounts::new();
    for_each_record(records, &FieldNames::default(), |_, record| {
        let id = record.id.as_ref();
        let Some(decided_route) = record.decided_route.as_deref() else {
            return Ok(());
        };
        if only.is_some_and(|sha256| record.config_sha256.as_deref() != Some(sha256)) {
            return Ok(());
        }
        if record
            .reason
            .as_ref()
            .is_some_and(Reason::is_beside_a_request)
        {
            return Ok(());
        }
        let count = counts.entry(record.slice.to_string()).or_default();
        count.0 += 1;
        if !drawn_for_label(seed, share, id) {
            return Ok(());
        }
        count.1 += 1;
        rows.push(LabelRow {
            label_schema_version: LABEL_SET_SCHEMA_VERSION,
            record_id: id.to_owned(),
            slice: record.slice.to_string(),
            route: record.route.to_string(),
            decided_route: decided_route.to_owned(),
            prompt: record.prompt_text().map(|prompt| redact(&prompt).0),
            seed,
            inclusion_probability: share,
            ok: None,
            audit_probability: audit,
            audit: audit.map(|audit| drawn_for_audit(seed, audit, id)),
            audited_ok: None,
        });
        Ok(())
    })?;
    Ok((rows, counts))
}
