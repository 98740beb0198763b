//! Groups validated rows into per-slice observations (the policy kernel's),
//! with the held-out share of each slice apart.

use std::collections::HashMap;

use arrow::array::Array;

use super::audits::AuditVerdicts;
use crate::policy::{Audit, GradedRow, SliceObservations};
use crate::schema::{GLOBAL_SLICE, GradedBatch};

use crate::schema::{Holdout, Policy, Scope};

/// A slice's calibration rows and held-out rows.
#[derive(Debug, Default)]
pub struct SliceData {
    pub name: String,
    pub calibration: SliceObservations,
    pub holdout: SliceObservations,
}

/// Collects batches into per-slice observations.
#[derive(Debug)]
pub struct Ingest<'a> {
    policy: Policy,
    /// Verdicts from `--audits`, in place of the results' own columns.
    audits: Option<&'a AuditVerdicts>,
    scope: Scope,
    holdout: Option<Holdout>,
    slices: Vec<SliceData>,
    index: HashMap<String, usize, foldhash::fast::RandomState>,
}

impl<'a> Ingest<'a> {
    pub fn new(
        policy: Policy,
        scope: Scope,
        holdout: Option<Holdout>,
        audits: Option<&'a AuditVerdicts>,
    ) -> Ingest<'a> {
        Ingest {
            policy,
            audits,
            scope,
            holdout,
            slices: Vec::new(),
            index: HashMap::default(),
        }
    }

    pub fn add(&mut self, batch: &GradedBatch) {
        // Files are usually grouped by slice, so the previous row's slice is
        // the first guess.
        let mut last: Option<(usize, usize)> = None;
        for index in 0..batch.num_rows() {
            let name = match self.scope {
                Scope::PerSlice => batch.slice.value(index),
                Scope::Global => GLOBAL_SLICE,
            };
            let slice = match (self.scope, last) {
                (Scope::Global, Some((_, slice))) => slice,
                (Scope::PerSlice, Some((previous, slice)))
                    if batch.slice.value(previous) == name =>
                {
                    slice
                }
                _ => self.slice_index(name),
            };
            last = Some((index, slice));
            let row = GradedRow::from_batch(batch, index);
            let held_out = self
                .holdout
                .is_some_and(|holdout| holdout.holds_out(batch.id.value(index)));
            let data = &mut self.slices[slice];
            let target = if held_out {
                &mut data.holdout
            } else {
                &mut data.calibration
            };
            let (audit, weight) = match self.audits {
                Some(audits) => audits
                    .of(batch.id.value(index))
                    .unwrap_or((Audit::NONE, 1.0)),
                None => (audit_of(batch, index), 1.0),
            };
            target.push_audited(self.policy, &row, audit, weight);
        }
    }

    fn slice_index(&mut self, name: &str) -> usize {
        if let Some(&index) = self.index.get(name) {
            return index;
        }
        let index = self.slices.len();
        self.index.insert(name.to_owned(), index);
        self.slices.push(SliceData {
            name: name.to_owned(),
            ..SliceData::default()
        });
        index
    }

    /// Adds what another ingest of other rows of the same file collected.
    pub fn merge(&mut self, other: Ingest<'_>) {
        for data in other.slices {
            let index = self.slice_index(&data.name);
            let mine = &mut self.slices[index];
            mine.calibration.absorb(data.calibration);
            mine.holdout.absorb(data.holdout);
        }
    }

    /// The slices, sorted by name.
    pub fn finish(mut self) -> Vec<SliceData> {
        self.slices.sort_by(|a, b| a.name.cmp(&b.name));
        self.slices
    }
}

/// The human verdicts on row `index`, when both of its answers were audited.
fn audit_of(batch: &GradedBatch, index: usize) -> Audit {
    let [Some(small), Some(large)] = &batch.audited else {
        return Audit::NONE;
    };
    if small.is_valid(index) && large.is_valid(index) {
        Audit::of(Some((small.value(index), large.value(index))))
    } else {
        Audit::NONE
    }
}
