//! A label set as the estimate reads it: each drawn record's verdict, and
//! with an audit a person's verdict on the audited ones, which corrects the
//! judge's: the reward `judge + [audited] / a · (person − judge)` is right
//! on average whatever the judge's errors, as calibrate corrects a grader.
//! Every record the draws chose must be there, and nothing else.
//!
//! Power tuning (PPI++, Angelopoulos et al. 2023): the reward `λ·judge +
//! [audited] / a · (person − λ·judge)` is right on average for every λ
//! (the audit draw is independent of both verdicts), and lies in the same
//! range [1 − 1/a, 1/a] for λ in [0, 1]. Its second moment is least at
//! `λ = E[judge·person] / E[judge²]`: for 0/1 verdicts, the share of the
//! judge's accepts that the person accepts too. Under a confidence
//! sequence each request's λ is taken from the audited requests before it
//! (predictable), which keeps every term's mean the truth given the past,
//! so the sequence holds as it does at λ = 1; the fixed interval, which
//! needs independent terms, keeps λ = 1.

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
}

/// The power-tuning weight λ, learnt from the audited requests read so far
/// (in the records' order), starting at 1 (the plain correction) with the
/// weight of `PRIOR` audited accepts that the person confirmed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tuning {
    enabled: bool,
    judge_accepts: f64,
    confirmed: f64,
}

const PRIOR: f64 = 10.0;

impl Tuning {
    /// Tuning that learns, or (`enabled` false) stays at λ = 1.
    pub fn new(enabled: bool) -> Tuning {
        Tuning {
            enabled,
            judge_accepts: PRIOR,
            confirmed: PRIOR,
        }
    }

    pub fn lambda(&self) -> f64 {
        if self.enabled {
            (self.confirmed / self.judge_accepts).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }

    /// The reward of one labelled request, the judge's verdict `ok` and
    /// a person's `audited` one where the audit (at probability `audit`)
    /// drew it, at the current λ; then λ learns from it.
    pub(super) fn reward(&mut self, ok: bool, audited: Option<bool>, audit: Option<f64>) -> f64 {
        let lambda = self.lambda();
        let judged = f64::from(u8::from(ok));
        let reward = match (audit, audited) {
            (Some(audit), Some(person)) => {
                lambda * judged + (f64::from(u8::from(person)) - lambda * judged) / audit
            }
            _ => lambda * judged,
        };
        if let (true, Some(person)) = (ok, audited) {
            self.judge_accepts += 1.0;
            self.confirmed += f64::from(u8::from(person));
        }
        reward
    }
}

impl Labels {
    /// The reward of decision `id` at `tuning`'s λ (which then learns from
    /// it): its label where the draw chose it; an
    /// error where the draw chose it and it has no row, or it has a row the
    /// draw did not choose (the labels would be a biased sample).
    pub fn reward_of(&self, id: &str, tuning: &mut Tuning) -> Result<Option<f64>, String> {
        let (seed, inclusion) = (self.seed, self.inclusion);
        match (drawn_for_label(seed, inclusion, id), self.verdicts.get(id)) {
            (true, Some(verdict)) => {
                Ok(Some(tuning.reward(verdict.ok, verdict.audited, self.audit)))
            }
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
