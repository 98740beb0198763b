//! A label set as the estimate reads it: each drawn record's verdict, and
//! with an audit a person's verdict on the audited ones, which corrects the
//! judge's: the reward `judge + [audited] / a · (person − judge)` is right
//! on average whatever the judge's errors, as calibrate corrects a grader.
//! Every record the draws chose must be there, and nothing else.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::schema::{InputError, drawn_for_audit, drawn_for_label, read_labels};

use super::estimate::LabelDesign;

/// One labelled record: its line, the verdict, and an audited one's
/// person's verdict.
#[derive(Debug, Clone, Copy)]
struct Verdict {
    line: u64,
    ok: bool,
    audited: Option<bool>,
}

/// A label set's verdicts by record id, and its draws.
#[derive(Debug)]
pub(super) struct Labels {
    verdicts: HashMap<String, Verdict>,
    pub seed: u64,
    pub inclusion: f64,
    pub audit: Option<f64>,
}

/// Why a label set cannot be used: unreadable or malformed (the error
/// names the file), or not the draw's (a line of it).
#[derive(Debug)]
pub(super) enum Unusable {
    Read(InputError),
    Rows(String),
}

impl Labels {
    pub fn read(path: &Path) -> Result<Labels, Unusable> {
        let rows = read_labels(path).map_err(Unusable::Read)?;
        let first = &rows[0].1;
        let (seed, inclusion, audit) = (
            first.seed,
            first.inclusion_probability,
            first.audit_probability,
        );
        let mut verdicts = HashMap::with_capacity(rows.len());
        for (line, row) in &rows {
            let verdict = Verdict {
                line: *line,
                ok: row.ok.unwrap_or(false),
                audited: row.audited_ok,
            };
            if let Some(share) = audit
                && row.audit != Some(drawn_for_audit(seed, share, &row.record_id))
            {
                return Err(Unusable::Rows(format!(
                    "line {line}: record {:?} says audit {:?}, which is not what the audit draw (seed {seed}, probability {share}) chose",
                    row.record_id, row.audit
                )));
            }
            if verdicts.insert(row.record_id.clone(), verdict).is_some() {
                return Err(Unusable::Rows(format!(
                    "line {line}: record {:?} is labelled twice",
                    row.record_id
                )));
            }
        }
        Ok(Labels {
            verdicts,
            seed,
            inclusion,
            audit,
        })
    }

    pub fn rows(&self) -> u64 {
        self.verdicts.len() as u64
    }

    /// The draw and the range of a reward: [0, 1], or with an audit at `a`
    /// [1 − 1/a, 1/a].
    pub fn design(&self) -> LabelDesign {
        LabelDesign {
            inclusion: self.inclusion,
            rewards: match self.audit {
                Some(audit) => (1.0 - 1.0 / audit, 1.0 / audit),
                None => (0.0, 1.0),
            },
        }
    }

    fn reward(&self, verdict: Verdict) -> f64 {
        let judged = f64::from(u8::from(verdict.ok));
        match (self.audit, verdict.audited) {
            (Some(audit), Some(person)) => judged + (f64::from(u8::from(person)) - judged) / audit,
            _ => judged,
        }
    }
}

impl Labels {
    /// The reward of decision `id`: its label where the draw chose it; an
    /// error where the draw chose it and it has no row, or it has a row the
    /// draw did not choose (the labels would be a biased sample).
    pub fn reward_of(&self, id: &str) -> Result<Option<f64>, String> {
        let (seed, inclusion) = (self.seed, self.inclusion);
        match (drawn_for_label(seed, inclusion, id), self.verdicts.get(id)) {
            (true, Some(verdict)) => Ok(Some(self.reward(*verdict))),
            (true, None) => Err(format!(
                "record {id:?} was drawn (seed {seed}, probability {inclusion}) but has no row: a label set holds every record its draw chose"
            )),
            (false, Some(verdict)) => Err(format!(
                "line {}: record {id:?} is not one the draw (seed {seed}, probability {inclusion}) chose",
                verdict.line
            )),
            (false, None) => Ok(None),
        }
    }

    /// The first row (by line) whose record is not among `decided`, the
    /// ids of the decisions the draw chose.
    pub fn stray(&self, decided: &HashSet<String>) -> Option<String> {
        let mut stray: Vec<(u64, &String)> = self
            .verdicts
            .iter()
            .filter(|(id, _)| !decided.contains(*id))
            .map(|(id, verdict)| (verdict.line, id))
            .collect();
        stray.sort();
        stray.first().map(|(line, id)| {
            format!("line {line}: record {id:?} is not among the config's decisions in the records")
        })
    }
}
