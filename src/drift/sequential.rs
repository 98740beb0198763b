//! The anytime-valid drift monitor (`drift --state FILE`): a scheduled
//! `drift` run is one of an unbounded sequence of tests, and a fixed-sample
//! test run every hour on a growing stream eventually alarms though nothing
//! changed. Here each slice's quality and escalation tests are e-processes
//! (test supermartingales): the evidence of every run multiplies into a
//! wealth carried between runs in a small versioned file, and Ville's
//! inequality bounds the probability that an unchanged stream *ever*
//! reaches 1/α, however many runs there are.
//!
//! - **Quality** (H0: the served answer is acceptable with probability at
//!   least the target q): each row multiplies the wealth by
//!   1 + λ (q − X), X = 1 for an acceptable answer, whose expectation under
//!   H0 is at most 1.
//! - **Escalation** (H0: the rate is where calibration put it): the rate at
//!   calibration is itself an estimate, so H0 is its Clopper–Pearson
//!   interval [lo, hi] at δ/2, and two e-processes test r ≤ hi (factor
//!   1 + λ (X − hi)) and r ≥ lo (factor 1 + λ (lo − X)).
//! - Each is the average of the processes over a fixed grid of bets λ (a
//!   mixture of test supermartingales is one), so no bet has to be tuned.
//! - The family (three tests for each slice calibration measured) shares
//!   the rest of δ equally (Bonferroni); an alarm stays raised.
//!
//! Only counts matter within a run (the product over a run's rows depends
//! on how many were acceptable or escalated), so a run adds its counts; a
//! results file is counted once, by its sha256.

use serde::{Deserialize, Serialize};

use crate::stats::clopper_pearson_interval;

/// The state file's schema.
pub const DRIFT_STATE_SCHEMA_VERSION: u32 = 1;

/// What `drift --state` keeps, and may replace: a drift state document.
pub const DRIFT_STATE_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a drift state (--state)",
    crate::atomic::Replaces::Document {
        keys: &["schema_version", "kind", "config_sha256", "slices"],
        kind: Some("drift-state"),
    },
);

/// The bets, as shares of the largest a factor allows (which would bet a
/// row's whole wealth).
const BETS: [f64; 6] = [
    1.0 / 64.0,
    1.0 / 32.0,
    1.0 / 16.0,
    1.0 / 8.0,
    1.0 / 4.0,
    1.0 / 2.0,
];

/// One e-process: the log wealth of each bet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wealth {
    pub log_wealth: Vec<f64>,
}

impl Default for Wealth {
    fn default() -> Wealth {
        Wealth {
            log_wealth: vec![0.0; BETS.len()],
        }
    }
}

impl Wealth {
    /// The e-value: the mixture's wealth.
    pub fn e_value(&self) -> f64 {
        self.log_wealth.iter().map(|log| log.exp()).sum::<f64>() / self.log_wealth.len() as f64
    }

    /// Multiplies in `n` rows of which `hits` had X = 1, each row's factor
    /// 1 + λ (X − `mean`) (or 1 + λ (`mean` − X) with `against`, testing
    /// that the rate is at least `mean`).
    fn add(&mut self, mean: f64, hits: u64, n: u64, against: bool) {
        // The largest bet keeps every factor non-negative.
        let room = if against { 1.0 - mean } else { mean };
        let largest = 1.0 / room.max(1e-6);
        let (hits, misses) = (hits as f64, (n - hits) as f64);
        for (log, share) in self.log_wealth.iter_mut().zip(BETS) {
            let bet = share * largest;
            let (hit, miss) = if against {
                (1.0 + bet * (mean - 1.0), 1.0 + bet * mean)
            } else {
                (1.0 + bet * (1.0 - mean), 1.0 - bet * mean)
            };
            *log += hits * hit.ln() + misses * miss.ln();
        }
    }
}

/// One slice's evidence so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceState {
    pub slice: String,
    pub rows: u64,
    pub runs: u64,
    /// Against H0: quality at least the target.
    pub quality: Wealth,
    /// Against H0: escalation at most the calibration interval's top.
    pub escalation_up: Wealth,
    /// Against H0: escalation at least its bottom.
    pub escalation_down: Wealth,
    /// The calibration's escalation interval; `None` for a slice without
    /// thresholds, whose escalation is not tested.
    pub escalation_interval: Option<[f64; 2]>,
    /// The run (1-based) in which each test first alarmed.
    pub quality_alarm_run: Option<u64>,
    pub escalation_alarm_run: Option<u64>,
}

/// The monitor's state, carried between runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftState {
    #[serde(deserialize_with = "crate::version::known::<_, 1, 1>")]
    pub schema_version: u32,
    pub kind: String,
    /// The config it monitors: a new version starts a new state.
    pub config_id: String,
    pub config_version: u64,
    pub config_sha256: String,
    pub target: f64,
    /// The false-alarm probability for the whole family, for all time.
    pub delta: f64,
    /// Each test's level: what is left of δ after the escalation
    /// intervals, shared by the family's tests.
    pub level: f64,
    pub runs: u64,
    /// The sha256 of every results file counted.
    pub inputs: Vec<String>,
    pub slices: Vec<SliceState>,
}

/// A slice of the family: its name, and its escalation at calibration
/// (escalated rows of n) when it has thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySlice {
    pub slice: String,
    pub escalation: Option<(u64, u64)>,
}

/// A run's counts for a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCounts {
    pub n: u64,
    pub acceptable: u64,
    pub escalated: u64,
}

impl DriftState {
    /// A new monitor for `family`, fixed here: slices that appear later are
    /// not in it, so the level never changes.
    pub fn new(
        config: (&str, u64, &str),
        target: f64,
        delta: f64,
        family: &[FamilySlice],
    ) -> DriftState {
        let tests = family
            .iter()
            .map(|slice| if slice.escalation.is_some() { 3 } else { 1 })
            .sum::<usize>()
            .max(1);
        // Half of δ covers the escalation intervals (where there are
        // any), the rest the e-processes.
        let intervals = family.iter().any(|slice| slice.escalation.is_some());
        let sequential = if intervals { delta / 2.0 } else { delta };
        let interval_delta = delta / 2.0 / family.len().max(1) as f64;
        DriftState {
            schema_version: DRIFT_STATE_SCHEMA_VERSION,
            kind: "drift-state".to_owned(),
            config_id: config.0.to_owned(),
            config_version: config.1,
            config_sha256: config.2.to_owned(),
            target,
            delta,
            level: sequential / tests as f64,
            runs: 0,
            inputs: Vec::new(),
            slices: family
                .iter()
                .map(|slice| SliceState {
                    slice: slice.slice.clone(),
                    rows: 0,
                    runs: 0,
                    quality: Wealth::default(),
                    escalation_up: Wealth::default(),
                    escalation_down: Wealth::default(),
                    escalation_interval: slice.escalation.map(|(escalated, n)| {
                        clopper_pearson_interval(escalated, n, interval_delta)
                    }),
                    quality_alarm_run: None,
                    escalation_alarm_run: None,
                })
                .collect(),
        }
    }

    /// Adds one run's counts per slice; slices outside the family are left
    /// out (and named by the caller).
    pub fn add_run(&mut self, counts: &[(String, RunCounts)]) {
        self.runs += 1;
        let alarm_at = 1.0 / self.level;
        for state in &mut self.slices {
            let Some((_, run)) = counts.iter().find(|(slice, _)| *slice == state.slice) else {
                continue;
            };
            state.rows += run.n;
            state.runs += 1;
            state.quality.add(self.target, run.acceptable, run.n, true);
            if let Some([lo, hi]) = state.escalation_interval {
                state.escalation_up.add(hi, run.escalated, run.n, false);
                state.escalation_down.add(lo, run.escalated, run.n, true);
            }
            if state.quality_alarm_run.is_none() && state.quality.e_value() >= alarm_at {
                state.quality_alarm_run = Some(self.runs);
            }
            let escalation = state
                .escalation_up
                .e_value()
                .max(state.escalation_down.e_value());
            if state.escalation_interval.is_some()
                && state.escalation_alarm_run.is_none()
                && escalation >= alarm_at
            {
                state.escalation_alarm_run = Some(self.runs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::random::Random;

    fn binomial(random: &mut Random, n: u64, p: f64) -> u64 {
        (0..n).filter(|_| random.unit() < p).count() as u64
    }

    fn monitor() -> DriftState {
        DriftState::new(
            ("c", 1, "sha"),
            0.85,
            0.05,
            &[FamilySlice {
                slice: "s".to_owned(),
                escalation: Some((300, 1000)),
            }],
        )
    }

    /// Runs of `rows` rows at quality `quality` and escalation `escalation`:
    /// the run in which quality first alarmed, within `runs`.
    fn stream(seed: u64, runs: u64, rows: u64, quality: f64, escalation: f64) -> DriftState {
        let mut random = Random::new(seed);
        let mut state = monitor();
        for _ in 0..runs {
            let counts = RunCounts {
                n: rows,
                acceptable: binomial(&mut random, rows, quality),
                escalated: binomial(&mut random, rows, escalation),
            };
            state.add_run(&[("s".to_owned(), counts)]);
        }
        state
    }

    #[test]
    fn an_unchanged_stream_rarely_ever_alarms_and_a_four_point_drop_is_found() {
        // At the null's boundary (quality exactly the target, escalation
        // exactly the calibration's), 50 hourly runs of 500 rows each.
        let streams = 200;
        let alarmed = (0..streams)
            .filter(|&seed| {
                let state = stream(seed, 50, 500, 0.85, 0.3);
                let slice = &state.slices[0];
                slice.quality_alarm_run.is_some() || slice.escalation_alarm_run.is_some()
            })
            .count();
        // δ = 0.05 bounds the share for all time; 10 of 200 is δ itself.
        assert!(
            alarmed <= 10,
            "{alarmed} of {streams} unchanged streams alarmed"
        );
        // Four points below the target: found within a few runs.
        let mut found: Vec<u64> = (0..streams)
            .map(|seed| {
                stream(1000 + seed, 50, 500, 0.81, 0.3).slices[0]
                    .quality_alarm_run
                    .unwrap_or(u64::MAX)
            })
            .collect();
        found.sort_unstable();
        let median = found[found.len() / 2];
        let p95 = found[found.len() * 95 / 100];
        eprintln!(
            "unchanged: {alarmed} of {streams} alarmed; 4-point drop found by run {median} (median), {p95} (95%)"
        );
        assert!(median <= 4, "median run {median}");
        assert!(p95 <= 8, "95th percentile run {p95}");
    }

    #[test]
    fn a_move_of_the_escalation_rate_is_found_both_ways() {
        let up = stream(7, 20, 500, 0.9, 0.4);
        assert!(up.slices[0].escalation_alarm_run.is_some());
        let down = stream(8, 20, 500, 0.9, 0.2);
        assert!(down.slices[0].escalation_alarm_run.is_some());
        assert_eq!(down.slices[0].quality_alarm_run, None);
    }

    #[test]
    fn the_state_reads_back_as_written() {
        let state = stream(1, 3, 100, 0.85, 0.3);
        let text = serde_json::to_string(&state).unwrap();
        let read: DriftState = serde_json::from_str(&text).unwrap();
        assert_eq!(read, state);
    }
}
