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
//! on how many were acceptable or escalated), so a run adds its counts. A
//! results file is counted once, by its sha256, and a row once, by its id:
//! a row counted twice would multiply its factor in twice.

use serde::{Deserialize, Serialize};

use crate::stats::clopper_pearson_interval;

/// The state file's schema.
pub const DRIFT_STATE_SCHEMA_VERSION: u32 = 2;

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

/// A Shiryaev–Roberts e-detector for each bet (Shin, Ramdas and Rinaldo,
/// 2023): R ← (R + 1) · Λ after each run, Λ the run's likelihood-ratio
/// factor. Under the null E[R after t runs] ≤ t, so alarming when the
/// bets' mean R reaches A keeps the average run length to a false alarm at
/// least A runs; and R forgets old evidence (the + 1 restarts it), so the
/// delay after a change does not grow with how long the monitor ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detector {
    /// log R of each bet; −∞ (written as null) before the first run.
    pub log_statistic: Vec<Option<f64>>,
}

impl Default for Detector {
    fn default() -> Detector {
        Detector {
            log_statistic: vec![None; BETS.len()],
        }
    }
}

impl Detector {
    /// The bets' mean statistic.
    pub fn statistic(&self) -> f64 {
        self.log_statistic
            .iter()
            .map(|log| log.map_or(0.0, f64::exp))
            .sum::<f64>()
            / self.log_statistic.len() as f64
    }

    /// One run of `n` rows, `hits` of them X = 1, testing that the rate is
    /// at most `mean` (each row's factor 1 + λ (X − `mean`)), or with
    /// `against` at least `mean` (1 + λ (`mean` − X)).
    fn add(&mut self, mean: f64, hits: u64, n: u64, against: bool) {
        let mut run = Wealth::default();
        run.add(mean, hits, n, against);
        for (log, factor) in self.log_statistic.iter_mut().zip(&run.log_wealth) {
            // log((R + 1) Λ) = log(R + 1) + log Λ, with R = 0 at the start.
            let plus_one = log.map_or(0.0, |log| {
                if log > 0.0 {
                    log + (-log).exp().ln_1p()
                } else {
                    log.exp().ln_1p()
                }
            });
            *log = Some(plus_one + factor);
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
    /// "Changed since calibration": the floor of the calibration's quality
    /// interval (its Clopper–Pearson lower end at δ/2 shared by the
    /// slices), `None` for a slice the calibration did not measure; the
    /// detector of quality below it, and the run it first alarmed in.
    #[serde(default)]
    pub quality_floor: Option<f64>,
    #[serde(default)]
    pub quality_change: Detector,
    #[serde(default)]
    pub quality_change_run: Option<u64>,
    /// "Escalation moved since calibration": detectors of the rate above
    /// and below the calibration's interval (their mean alarms), and the
    /// run they first alarmed in.
    #[serde(default)]
    pub escalation_change_up: Detector,
    #[serde(default)]
    pub escalation_change_down: Detector,
    #[serde(default)]
    pub escalation_change_run: Option<u64>,
}

impl SliceState {
    /// The escalation detectors' statistic: the mean of the two
    /// directions' (a mean of e-detectors is one), so their ARL holds for
    /// both together.
    pub fn escalation_change(&self) -> f64 {
        (self.escalation_change_up.statistic() + self.escalation_change_down.statistic()) / 2.0
    }
}

/// The monitor's state, carried between runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftState {
    #[serde(deserialize_with = "crate::version::known::<_, 1, DRIFT_STATE_SCHEMA_VERSION>")]
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
    /// The change detectors' alarm threshold: the average run length to a
    /// false alarm, in runs, when nothing changed (`--arl`).
    #[serde(default = "default_arl")]
    pub arl: f64,
    /// The sha256 of every results file counted.
    pub inputs: Vec<String>,
    /// Every row counted, by its id (version 2 on; a version-1 state has
    /// counted rows it cannot name, and keeps no repeats out).
    #[serde(default)]
    pub seen: SeenRows,
    pub slices: Vec<SliceState>,
}

/// The average run length to a false alarm of the change detectors, in
/// runs, when `--arl` is not given: about twenty years of daily runs.
pub const DEFAULT_ARL: f64 = 7_300.0;

fn default_arl() -> f64 {
    DEFAULT_ARL
}

/// An average run length to a false alarm (`--arl`): a finite number of
/// runs, at least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arl(f64);

impl Arl {
    pub const DEFAULT: Arl = Arl(DEFAULT_ARL);

    pub fn get(self) -> f64 {
        self.0
    }
}

impl std::str::FromStr for Arl {
    type Err = String;

    fn from_str(given: &str) -> Result<Arl, String> {
        match given.trim().parse::<f64>() {
            Ok(runs) if runs.is_finite() && runs >= 1.0 => Ok(Arl(runs)),
            _ => Err(format!("{given}: expected a number of runs of at least 1")),
        }
    }
}

impl std::fmt::Display for Arl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

/// The rows a monitor has counted, by the 64-bit FNV-1a hash of their id,
/// sorted: 8 bytes a row, written as base64. Two of ten million ids share
/// a hash with odds of about 3 in a million, and the later one is then not
/// counted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SeenRows {
    hashes: Vec<u64>,
}

impl SeenRows {
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.hashes.binary_search(&id_hash(id)).is_ok()
    }

    /// Counts `ids` as seen.
    pub fn extend<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        self.hashes.extend(ids.into_iter().map(id_hash));
        self.hashes.sort_unstable();
        self.hashes.dedup();
    }
}

fn id_hash(id: &str) -> u64 {
    crate::stats::random::fnv1a(id.as_bytes())
}

impl Serialize for SeenRows {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        let bytes: Vec<u8> = self
            .hashes
            .iter()
            .flat_map(|hash| hash.to_le_bytes())
            .collect();
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }
}

impl<'de> Deserialize<'de> for SeenRows {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use base64::Engine;
        let text = String::deserialize(deserializer)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|error| serde::de::Error::custom(format!("seen: not base64: {error}")))?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(
                "seen: not a whole number of 8-byte hashes",
            ));
        }
        let hashes: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|hash| u64::from_le_bytes(hash.try_into().expect("8 bytes")))
            .collect();
        if !hashes.is_sorted_by(|a, b| a < b) {
            return Err(serde::de::Error::custom("seen: hashes out of order"));
        }
        Ok(SeenRows { hashes })
    }
}

/// A slice of the family: its name, and its escalation at calibration
/// (escalated rows of n) when it has thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySlice {
    pub slice: String,
    pub escalation: Option<(u64, u64)>,
    /// Its acceptable answers of n at calibration.
    pub quality: Option<(u64, u64)>,
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
        (target, delta, arl): (f64, f64, f64),
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
            arl,
            inputs: Vec::new(),
            seen: SeenRows::default(),
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
                    quality_floor: slice.quality.map(|(acceptable, n)| {
                        clopper_pearson_interval(acceptable, n, interval_delta)[0]
                    }),
                    quality_change: Detector::default(),
                    quality_change_run: None,
                    escalation_change_up: Detector::default(),
                    escalation_change_down: Detector::default(),
                    escalation_change_run: None,
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
                state
                    .escalation_change_up
                    .add(hi, run.escalated, run.n, false);
                state
                    .escalation_change_down
                    .add(lo, run.escalated, run.n, true);
                if state.escalation_change_run.is_none() && state.escalation_change() >= self.arl {
                    state.escalation_change_run = Some(self.runs);
                }
            }
            if state.quality_alarm_run.is_none() && state.quality.e_value() >= alarm_at {
                state.quality_alarm_run = Some(self.runs);
            }
            if let Some(floor) = state.quality_floor {
                state.quality_change.add(floor, run.acceptable, run.n, true);
                if state.quality_change_run.is_none()
                    && state.quality_change.statistic() >= self.arl
                {
                    state.quality_change_run = Some(self.runs);
                }
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
            (0.85, 0.05, DEFAULT_ARL),
            &[FamilySlice {
                slice: "s".to_owned(),
                escalation: Some((300, 1000)),
                quality: None,
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

    /// A monitor whose one slice measured quality 850 of 1,000 at
    /// calibration, its change detector alarming at `arl`.
    fn change_monitor(arl: f64) -> DriftState {
        DriftState::new(
            ("c", 1, "sha"),
            (0.8, 0.05, arl),
            &[FamilySlice {
                slice: "s".to_owned(),
                escalation: None,
                quality: Some((850, 1000)),
            }],
        )
    }

    /// Runs of 500 rows: `before` at quality 0.85, then at `after` until
    /// both the change detector and the below-target e-process have
    /// alarmed (or 3,000 runs): the runs each took after the change.
    fn delays(seed: u64, arl: f64, before: u64, after: f64) -> (u64, u64) {
        let mut random = Random::new(seed);
        let mut state = change_monitor(arl);
        let mut run = |state: &mut DriftState, quality: f64| {
            let counts = RunCounts {
                n: 500,
                acceptable: binomial(&mut random, 500, quality),
                escalated: 0,
            };
            state.add_run(&[("s".to_owned(), counts)]);
        };
        for _ in 0..before {
            run(&mut state, 0.85);
        }
        let slice = |state: &DriftState| state.slices[0].clone();
        while state.runs < before + 3_000
            && (slice(&state).quality_change_run.is_none()
                || slice(&state).quality_alarm_run.is_none())
        {
            run(&mut state, after);
        }
        let since = |alarm: Option<u64>| alarm.map_or(3_000, |run| run.saturating_sub(before));
        (
            since(slice(&state).quality_change_run),
            since(slice(&state).quality_alarm_run),
        )
    }

    fn median(mut values: Vec<u64>) -> u64 {
        values.sort_unstable();
        values[values.len() / 2]
    }

    #[test]
    fn the_change_detector_keeps_its_average_run_length_and_a_bounded_delay() {
        // At the null's boundary (quality exactly the calibration
        // interval's floor), with a short ARL so that false alarms come:
        // the mean run length to one is at least the ARL.
        let arl = 50.0;
        let floor = change_monitor(arl).slices[0].quality_floor.unwrap();
        let streams = 200;
        let mut lengths = Vec::new();
        for seed in 0..streams {
            let mut random = Random::new(50_000 + seed);
            let mut state = change_monitor(arl);
            while state.slices[0].quality_change_run.is_none() && state.runs < 5_000 {
                let counts = RunCounts {
                    n: 500,
                    acceptable: binomial(&mut random, 500, floor),
                    escalated: 0,
                };
                state.add_run(&[("s".to_owned(), counts)]);
            }
            lengths.push(state.runs as f64);
        }
        let mean = lengths.iter().sum::<f64>() / lengths.len() as f64;
        eprintln!(
            "ARL {arl}: mean run length to a false alarm at the floor {floor:.4}: {mean:.0} runs"
        );
        assert!(mean >= arl, "{mean}");

        // A drop after 0, 10, 50, 200 or 1,000 unchanged runs: the
        // detector's delay stays put, the below-target e-process's grows.
        for (drop, after) in [(5, 0.80), (10, 0.75)] {
            let mut line = Vec::new();
            let mut change_delays = Vec::new();
            for before in [0, 10, 50, 200, 1_000] {
                let found: Vec<(u64, u64)> = (0..40)
                    .map(|seed| delays(seed * 7 + before, DEFAULT_ARL, before, after))
                    .collect();
                let change = median(found.iter().map(|(change, _)| *change).collect());
                let below = median(found.iter().map(|(_, below)| *below).collect());
                line.push(format!("after {before}: {change} / {below}"));
                change_delays.push(change);
            }
            eprintln!(
                "{drop}-point drop, median runs to the alarm (change detector at ARL {DEFAULT_ARL} / below-target e-process): {}",
                line.join(", ")
            );
            let (first, last) = (change_delays[0], *change_delays.last().unwrap());
            assert!(last <= first + 1, "{change_delays:?}");
        }
    }

    #[test]
    fn an_escalation_move_is_detected_as_fast_after_a_long_quiet_stream() {
        // Escalation at calibration 300 of 1,000; runs of 500 rows at 0.3,
        // then at 0.4: the detector's delay does not grow with the quiet
        // runs before, the e-process's does.
        let delay = |seed: u64, before: u64| -> (u64, u64) {
            let mut random = Random::new(seed);
            let mut state = monitor();
            let mut run = |state: &mut DriftState, escalation: f64| {
                let counts = RunCounts {
                    n: 500,
                    acceptable: 450,
                    escalated: binomial(&mut random, 500, escalation),
                };
                state.add_run(&[("s".to_owned(), counts)]);
            };
            for _ in 0..before {
                run(&mut state, 0.3);
            }
            assert_eq!(state.slices[0].escalation_change_run, None, "quiet");
            while state.runs < before + 2_000
                && (state.slices[0].escalation_change_run.is_none()
                    || state.slices[0].escalation_alarm_run.is_none())
            {
                run(&mut state, 0.4);
            }
            let since = |alarm: Option<u64>| alarm.map_or(2_000, |run| run - before);
            (
                since(state.slices[0].escalation_change_run),
                since(state.slices[0].escalation_alarm_run),
            )
        };
        let early: Vec<(u64, u64)> = (0..20).map(|seed| delay(seed, 0)).collect();
        let late: Vec<(u64, u64)> = (0..20).map(|seed| delay(100 + seed, 500)).collect();
        let change = |delays: &[(u64, u64)]| median(delays.iter().map(|(c, _)| *c).collect());
        let process = |delays: &[(u64, u64)]| median(delays.iter().map(|(_, p)| *p).collect());
        eprintln!(
            "escalation 0.3 → 0.4, median runs to the alarm after 0 / 500 quiet runs: detector {} / {}, e-process {} / {}",
            change(&early),
            change(&late),
            process(&early),
            process(&late)
        );
        assert!(change(&late) <= change(&early) + 1);
        assert!(process(&late) > process(&early));
    }

    #[test]
    fn the_state_reads_back_as_written() {
        let state = stream(1, 3, 100, 0.85, 0.3);
        let text = serde_json::to_string(&state).unwrap();
        let read: DriftState = serde_json::from_str(&text).unwrap();
        assert_eq!(read, state);
    }
}
