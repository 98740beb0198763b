//! The one fold over request records (or warehouse aggregates) and the
//! verdicts drawn from it, per slice and per route.

mod aggregates;
mod fold;
mod tally;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use crate::records::{FieldNames, fold_record_chunks};
use crate::routes::RouteConfig;
use crate::schema::{
    BinnedShift, InputFile, RECORDS_DRIFT_SCHEMA_VERSION, RecordsDriftDocument, RecordsRouteDrift,
    RecordsSliceDrift, RouteWindow, SliceWindow, Threshold, Verdict, read_graded,
};
use crate::stats::{
    alarms, benjamini_hochberg, binomial_upper_tail, kolmogorov_tail, psi_of_bins,
    two_proportion_z, wilson,
};

use aggregates::read_aggregates;
use fold::{Fold, Group, RouteFold, SliceFold};
use tally::{Tally, TallyContext};

/// A significant score shift whose PSI, less its null, reaches this is a
/// major one.
const PSI_RECALIBRATE: f64 = 0.25;
/// A window whose fallback share passes this is a brown-out to look at.
const FALLBACK_WATCH: f64 = 0.05;
/// A window whose p95 first token is this many times the route's overall.
const TTFT_WATCH_RATIO: f64 = 2.0;
/// The share of a route's requests that may fail (errors and timeouts)
/// before a window of them is `watch`: a healthy provider's error rate is
/// well under it, a brown-out's or an outage's far over.
const FAILURE_WATCH: f64 = 0.02;
/// Answers from an unpinned model beyond this share mean the tier moved.
const OTHER_VERSION_RECALIBRATE: f64 = 0.01;

/// The score bin of a score: its hundredth, rounded down.
pub fn score_bin(score: f64) -> i64 {
    floor_to_i64(score * 100.0)
}

/// The first-token bin of a time: 1% wide, from 1 ms.
pub fn ttft_bin(ms: f64) -> i64 {
    floor_to_i64(ms.max(1.0).ln() / 1.01f64.ln())
}

/// `value.floor() as i64` (saturating, NaN to 0) without a call into libm,
/// which a per-record bin would pay ten million times.
#[inline]
fn floor_to_i64(value: f64) -> i64 {
    let truncated = value as i64;
    if (truncated as f64) > value {
        truncated.saturating_sub(1)
    } else {
        truncated
    }
}

/// The bin of the largest finite first token: a bin beyond it is no time.
const MAX_TTFT_BIN: i64 = 71_332;

fn ttft_of_bin(bin: i64) -> f64 {
    ((bin as f64 + 0.5) * 1.01f64.ln()).exp()
}

#[derive(Debug, Clone, PartialEq)]
pub struct RecordsDriftOptions {
    pub config: PathBuf,
    pub input: RecordsInput,
    /// The graded rows the thresholds were calibrated on, for the score
    /// distribution.
    pub baseline_results: Option<PathBuf>,
    pub window_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsInput {
    Records(PathBuf),
    /// Counts per window, slice, route, reason, model, score bin and
    /// first-token bin, made where the records live.
    Aggregates(PathBuf),
}

/// PSI over the calibration's deciles and KS over the bins, both from
/// histograms of 0.01-wide score bins.
fn binned_shift(calibration: &BTreeMap<i64, u64>, now: &BTreeMap<i64, u64>) -> Option<BinnedShift> {
    let (n0, n1) = (calibration.values().sum::<u64>(), now.values().sum::<u64>());
    if n0 < 2 || n1 < 2 {
        return None;
    }
    let mut bins: Vec<i64> = calibration.keys().chain(now.keys()).copied().collect();
    bins.sort_unstable();
    bins.dedup();
    // KS: the largest gap between the two step functions at a bin edge.
    let (mut c0, mut c1, mut statistic) = (0u64, 0u64, 0f64);
    for bin in &bins {
        c0 += calibration.get(bin).copied().unwrap_or(0);
        c1 += now.get(bin).copied().unwrap_or(0);
        statistic = statistic.max((c0 as f64 / n0 as f64 - c1 as f64 / n1 as f64).abs());
    }
    let effective = (n0 as f64 * n1 as f64) / (n0 + n1) as f64;
    let lambda = (effective.sqrt() + 0.12 + 0.11 / effective.sqrt()) * statistic;
    // PSI: ten groups of bins holding a tenth of the calibration rows each.
    let mut groups: Vec<(u64, u64)> = Vec::new();
    let (mut taken, mut current) = (0u64, (0u64, 0u64));
    for bin in &bins {
        current.0 += calibration.get(bin).copied().unwrap_or(0);
        current.1 += now.get(bin).copied().unwrap_or(0);
        taken += calibration.get(bin).copied().unwrap_or(0);
        if taken * 10 >= (groups.len() as u64 + 1) * n0 && groups.len() < 9 {
            groups.push(current);
            current = (0, 0);
        }
    }
    groups.push(current);
    let psi = psi_of_bins(&groups)?;
    Some(BinnedShift {
        psi: psi.psi,
        psi_null: psi.null,
        psi_p_value: psi.p_value,
        ks_statistic: statistic,
        ks_p_value: kolmogorov_tail(lambda),
        calibration_rows: n0,
        scored_requests: n1,
    })
}

/// Reads the input into the fold.
fn fold_input(
    input: &RecordsInput,
    config: &RouteConfig,
    window_ms: i64,
    pins: &HashMap<String, String>,
) -> anyhow::Result<(Fold, u64)> {
    let mut fold = Fold::default();
    let logical = config.table.logical_model.as_str();
    let threshold_of =
        |slice: &str| -> Option<Threshold> { config.table.policy.escalation_threshold(slice) };
    let window_of = |ms: i64| ms.div_euclid(window_ms) * window_ms;
    let see = |fold: &mut Fold, ms: i64| {
        fold.first_ms = Some(fold.first_ms.map_or(ms, |first| first.min(ms)));
        fold.last_ms = Some(fold.last_ms.map_or(ms, |last| last.max(ms)));
    };
    let rows = match input {
        RecordsInput::Records(path) => {
            let workers = std::thread::available_parallelism().map_or(1, usize::from);
            let context = TallyContext {
                logical_model: logical,
                config_version: config.version,
                window_ms,
                threshold_of: &|slice| threshold_of(slice).map(|threshold| threshold.0),
                pins,
            };
            let (tallies, rows) = fold_record_chunks(
                path,
                &FieldNames::default(),
                workers,
                || Tally::new(&context),
                Tally::visit,
            )?;
            for tally in tallies {
                fold.merge(tally.into_fold());
            }
            rows
        }
        RecordsInput::Aggregates(path) => read_aggregates(path, |row| {
            if let Some(name) = row.logical_model.as_deref()
                && name != logical
            {
                *fold.left_out.entry(name.to_owned()).or_default() += row.requests;
                return;
            }
            see(&mut fold, row.window_start_ms);
            let escalated = row.score_bin.and_then(|bin| {
                threshold_of(&row.slice).map(|threshold| threshold.escalates(bin as f64 / 100.0))
            });
            let group = Group {
                window: window_of(row.window_start_ms),
                slice: &row.slice,
                route: &row.route,
                reason: row.reason.as_deref(),
                model: row.model.as_deref(),
                score_bin: row.score_bin,
                escalated,
                ttft_bin: row.ttft_bin,
                requests: row.requests,
                failures: row.failures,
                cost_usd: row.cost_usd,
            };
            fold.add(&group, pins);
        })?,
    };
    Ok((fold, rows))
}

fn worst(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
    verdicts.into_iter().max().unwrap_or(Verdict::Ok)
}

pub fn drift_records(options: &RecordsDriftOptions) -> anyhow::Result<RecordsDriftDocument> {
    if options.window_ms <= 0 {
        anyhow::bail!("--window must be positive");
    }
    let (config, config_ref) = crate::drift::engine::load_config(&options.config)?;
    let pins: HashMap<String, String> = config
        .table
        .routes
        .iter()
        .map(|route| (route.name.clone(), route.model.clone()))
        .collect();
    let (input_path, aggregated) = match &options.input {
        RecordsInput::Records(path) => (path, false),
        RecordsInput::Aggregates(path) => (path, true),
    };
    // The digest is read beside the fold rather than after it, so neither
    // core waits for the other at the end.
    let (folded, digest) = std::thread::scope(|scope| {
        let digest = scope.spawn(|| crate::digest::sha256_path(input_path));
        let folded = fold_input(&options.input, &config, options.window_ms, &pins);
        (folded, digest.join().expect("the digest does not panic"))
    });
    let (mut fold, rows) = folded?;
    let records_left_out = std::mem::take(&mut fold.left_out);
    let records_other_versions = std::mem::take(&mut fold.other_versions);
    if fold.slices.is_empty() && !records_other_versions.is_empty() {
        let found: Vec<String> = records_other_versions
            .iter()
            .map(|(version, count)| format!("version {version} ({count})"))
            .collect();
        anyhow::bail!(
            "{}: no record was served by {} version {}, the config given (--config); the records were served by {}: give the config that served them",
            input_path.display(),
            config_ref.config_id,
            config.version,
            found.join(", ")
        );
    }
    if fold.slices.is_empty() {
        let of: Vec<String> = records_left_out
            .iter()
            .map(|(name, count)| format!("{name} ({count})"))
            .collect();
        anyhow::bail!(
            "{}: no record is of {}, the logical model the deployed config routes (the records are of {}): nothing was checked",
            input_path.display(),
            config.table.logical_model,
            of.join(", ")
        );
    }
    let input_sha256 = digest?;
    let (calibration_scores, baseline) = calibration_scores(options, &config)?;
    let (mut slices, tests) = slice_drifts(&config, &fold, &calibration_scores);
    // The run's level: the gate's confidence, 0.95 where it had none.
    let delta = 1.0 - config.provenance.confidence.unwrap_or(0.95);
    judge_as_one_family(&mut slices, &tests, delta);
    let routes = route_drifts(&fold, &pins, delta);
    let verdict = worst(
        slices
            .iter()
            .map(|slice| slice.verdict)
            .chain(routes.iter().map(|route| route.verdict)),
    );
    Ok(RecordsDriftDocument {
        schema_version: RECORDS_DRIFT_SCHEMA_VERSION,
        kind: "records".to_owned(),
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        config: config_ref,
        records: InputFile {
            path: input_path.display().to_string(),
            sha256: input_sha256,
            rows,
        },
        aggregated,
        records_left_out,
        records_other_versions,
        baseline_results: baseline,
        window_ms: options.window_ms,
        first_ms: fold.first_ms,
        last_ms: fold.last_ms,
        verdict,
        tests: tests.len() as u64,
        slices,
        routes,
    })
}

/// Per slice, rows by score bin.
type BinnedScores = BTreeMap<String, BTreeMap<i64, u64>>;

/// The calibration rows' scores per slice, binned as the records' are, and
/// the file they came from (`--baseline-results`).
fn calibration_scores(
    options: &RecordsDriftOptions,
    config: &RouteConfig,
) -> anyhow::Result<(BinnedScores, Option<InputFile>)> {
    let score_column = config.table.policy.score().unwrap_or("score").to_owned();
    let mut calibration_scores: BinnedScores = BTreeMap::new();
    let baseline = match &options.baseline_results {
        Some(path) => {
            let read = crate::schema::ReadOptions {
                names: crate::schema::ColumnNames::new(score_column.clone(), "slice"),
                ..Default::default()
            };
            let table = read_graded(path, &read)?;
            for batch in &table.batches {
                for index in 0..batch.num_rows() {
                    *calibration_scores
                        .entry(batch.slice.value(index).to_owned())
                        .or_default()
                        .entry(score_bin(batch.score.value(index)))
                        .or_default() += 1;
                }
            }
            Some(InputFile::of_file(path, table.num_rows() as u64)?)
        }
        None => None,
    };
    Ok((calibration_scores, baseline))
}

/// Each slice's escalation against calibration time, its score shift and
/// its windows, with every test of the run (slice, test, p-value).
fn slice_drifts(
    config: &RouteConfig,
    fold: &Fold,
    calibration_scores: &BinnedScores,
) -> (Vec<RecordsSliceDrift>, Vec<(usize, Test, f64)>) {
    let at_calibration: HashMap<&str, (f64, u64)> = config
        .provenance
        .metrics
        .iter()
        .map(|metrics| (metrics.slice.as_str(), (metrics.escalation_rate, metrics.n)))
        .collect();
    let routes_decide = config.table.policy.decides_by_score();
    let mut slices: Vec<RecordsSliceDrift> = Vec::new();
    let mut tests: Vec<(usize, Test, f64)> = Vec::new();
    for (
        name,
        SliceFold {
            counts,
            windows,
            scores,
        },
    ) in &fold.slices
    {
        let reasons: Vec<String> = Vec::new();
        let verdict = Verdict::Ok;
        let rate = (counts.decided > 0).then(|| counts.escalated as f64 / counts.decided as f64);
        let calibrated = at_calibration.get(name.as_str()).copied();
        let p_value = match (calibrated, routes_decide) {
            (Some((p0, n0)), true) => {
                let x0 = (p0 * n0 as f64).round() as u64;
                two_proportion_z(counts.escalated, counts.decided, x0, n0).map(|(_, p)| p)
            }
            _ => None,
        };
        let index = slices.len();
        if let Some(p) = p_value {
            tests.push((index, Test::Escalation, p));
        }
        let score_shift = calibration_scores
            .get(name)
            .and_then(|calibration| binned_shift(calibration, scores));
        if let Some(shift) = &score_shift {
            tests.push((index, Test::Psi, shift.psi_p_value));
            tests.push((index, Test::Ks, shift.ks_p_value));
        }
        let mut window_rows = Vec::new();
        for (start, window) in windows {
            let window_rate =
                (window.decided > 0).then(|| window.escalated as f64 / window.decided as f64);
            let window_p = match (calibrated, routes_decide) {
                (Some((p0, n0)), true) => {
                    let x0 = (p0 * n0 as f64).round() as u64;
                    two_proportion_z(window.escalated, window.decided, x0, n0).map(|(_, p)| p)
                }
                _ => None,
            };
            if let Some(p) = window_p {
                tests.push((index, Test::Window(window_rows.len()), p));
            }
            window_rows.push(SliceWindow {
                start_ms: *start,
                requests: window.requests,
                escalation_rate: window_rate,
                escalation_p_value: window_p,
            });
        }
        slices.push(RecordsSliceDrift {
            slice: name.clone(),
            requests: counts.requests,
            verdict,
            reasons,
            threshold: config.table.policy.escalation_threshold(name),
            decided: counts.decided,
            escalation_rate: rate,
            escalation_interval: wilson(counts.escalated, counts.decided),
            escalation_rate_at_calibration: calibrated.map(|(p0, _)| p0),
            calibration_n: calibrated.map(|(_, n0)| n0),
            escalation_p_value: p_value,
            score_shift,
            windows: window_rows,
        });
    }
    (slices, tests)
}

/// One family for the run, every slice's and window's test in it: Holm's
/// step-down decides `recalibrate` (any false one in at most δ of runs),
/// Benjamini–Hochberg `watch`; a window's escalation alone is at most
/// `watch`.
fn judge_as_one_family(slices: &mut [RecordsSliceDrift], tests: &[(usize, Test, f64)], delta: f64) {
    let p_values: Vec<f64> = tests.iter().map(|&(_, _, p)| p).collect();
    for (&(index, test, p), alarm) in tests.iter().zip(alarms(&p_values, delta)) {
        let Some(strong) = alarm else {
            continue;
        };
        let slice = &mut slices[index];
        let (level, reason) = match test {
            Test::Escalation => (
                Verdict::Recalibrate,
                format!(
                    "escalation rate {:.1}% against {:.1}% at calibration (p = {p:.2e})",
                    slice.escalation_rate.unwrap_or(0.0) * 100.0,
                    slice.escalation_rate_at_calibration.unwrap_or(0.0) * 100.0
                ),
            ),
            Test::Psi => {
                let shift = slice
                    .score_shift
                    .as_ref()
                    .expect("a score test has a shift");
                let level = if shift.psi - shift.psi_null >= PSI_RECALIBRATE {
                    Verdict::Recalibrate
                } else {
                    Verdict::Watch
                };
                (
                    level,
                    format!(
                        "score PSI {:.3} ({:.3} when nothing changes; p = {p:.2e})",
                        shift.psi, shift.psi_null
                    ),
                )
            }
            Test::Ks => (
                Verdict::Watch,
                format!(
                    "the score distribution differs (KS D = {:.3}, p = {p:.2e})",
                    slice
                        .score_shift
                        .as_ref()
                        .map_or(0.0, |shift| shift.ks_statistic)
                ),
            ),
            Test::Window(window) => {
                let window = &slice.windows[window];
                (
                    Verdict::Watch,
                    format!(
                        "the window from {} escalated {:.1}% (p = {p:.2e})",
                        crate::clock::format_rfc3339(window.start_ms.div_euclid(1000)),
                        window.escalation_rate.unwrap_or(0.0) * 100.0
                    ),
                )
            }
        };
        let level = if strong { level } else { Verdict::Watch };
        slice.verdict = slice.verdict.max(level);
        slice.reasons.push(reason);
    }
}

/// Each route's fallbacks, first tokens, cost and answers from an unpinned
/// model, overall and per window.
fn route_drifts(fold: &Fold, pins: &HashMap<String, String>, delta: f64) -> Vec<RecordsRouteDrift> {
    let mut routes = Vec::new();
    let mut tests = Vec::new();
    for (name, RouteFold { counts, windows }) in &fold.routes {
        let mut reasons = Vec::new();
        let mut verdict = Verdict::Ok;
        let other_share =
            (counts.versioned > 0).then(|| counts.other_version as f64 / counts.versioned as f64);
        if let Some(share) = other_share
            && share > OTHER_VERSION_RECALIBRATE
        {
            verdict = Verdict::Recalibrate;
            reasons.push(format!(
                "{:.1}% of answers from a model other than the pinned {}",
                share * 100.0,
                pins.get(name).map_or("", String::as_str)
            ));
        }
        let p95 = counts.ttft_quantile(0.95);
        let mut window_rows = Vec::new();
        for (index, (start, window)) in windows.iter().enumerate() {
            let fallback_share = window.fallback_total() as f64 / window.requests.max(1) as f64;
            let window_p95 = window.ttft_quantile(0.95);
            // Every window is tested, the quiet ones too, so the family is
            // the run's and not the windows that happened to look bad.
            let p = binomial_upper_tail(window.requests, FALLBACK_WATCH, window.fallback_total());
            let shown = fallback_share > FALLBACK_WATCH;
            tests.push((routes.len(), RouteTest::Fallback(index), p, shown));
            if let Some(p95) = p95 {
                // Without a change a first token is over the route's p95 one
                // time in twenty, over twice it rarer still.
                let (slow, timed) = window.ttft_over(TTFT_WATCH_RATIO * p95);
                let p = binomial_upper_tail(timed, 0.05, slow);
                let shown =
                    window_p95.is_some_and(|window_p95| window_p95 > TTFT_WATCH_RATIO * p95);
                tests.push((routes.len(), RouteTest::FirstToken(index), p, shown));
            }
            let failure_share = window.failure_share();
            if failure_share.is_some() {
                let p = binomial_upper_tail(window.failure_known, FAILURE_WATCH, window.failures);
                let shown = failure_share.is_some_and(|share| share > FAILURE_WATCH);
                tests.push((routes.len(), RouteTest::Failure(index), p, shown));
            }
            window_rows.push(RouteWindow {
                start_ms: *start,
                requests: window.requests,
                fallback_share,
                failure_share,
                ttft_p50_ms: window.ttft_quantile(0.5),
                ttft_p95_ms: window_p95,
                other_version_share: (window.versioned > 0)
                    .then(|| window.other_version as f64 / window.versioned as f64),
                cost_per_request_usd: (window.costed > 0)
                    .then(|| window.cost_usd / window.costed as f64),
            });
        }
        routes.push(RecordsRouteDrift {
            route: name.clone(),
            requests: counts.requests,
            verdict,
            reasons,
            pinned_model: pins.get(name).cloned(),
            other_version_share: other_share,
            fallback_share: counts.fallback_total() as f64 / counts.requests.max(1) as f64,
            failure_share: counts.failure_share(),
            fallbacks_by_reason: counts.fallbacks.clone(),
            ttft_p50_ms: counts.ttft_quantile(0.5),
            ttft_p95_ms: p95,
            cost_per_request_usd: (counts.costed > 0)
                .then(|| counts.cost_usd / counts.costed as f64),
            windows: window_rows,
        });
    }
    watch_windows(&mut routes, &tests, delta);
    routes
}

/// A window of a route that fell back or answered slowly beyond chance:
/// every window's tests of the run in one family, Benjamini–Hochberg at the
/// run's level δ, so that one slow request alone in a quiet hour is not a
/// brown-out and eighteen fallbacks in a row are. A test is `shown` when
/// its window also passes the share or the ratio a reader looks for.
fn watch_windows(
    routes: &mut [RecordsRouteDrift],
    tests: &[(usize, RouteTest, f64, bool)],
    delta: f64,
) {
    let p_values: Vec<f64> = tests.iter().map(|&(_, _, p, _)| p).collect();
    for (&(index, test, p, shown), rejected) in
        tests.iter().zip(benjamini_hochberg(&p_values, delta))
    {
        if !(rejected && shown) {
            continue;
        }
        let route = &mut routes[index];
        let reason = match test {
            RouteTest::Fallback(window) => {
                let window = &route.windows[window];
                format!(
                    "{:.1}% of {} fell back in the window from {} (p = {p:.2e})",
                    window.fallback_share * 100.0,
                    window.requests,
                    crate::clock::format_rfc3339(window.start_ms.div_euclid(1000))
                )
            }
            RouteTest::Failure(window) => {
                let window = &route.windows[window];
                format!(
                    "{:.1}% of {} failed (errors and timeouts) in the window from {} (p = {p:.2e})",
                    window.failure_share.unwrap_or(0.0) * 100.0,
                    window.requests,
                    crate::clock::format_rfc3339(window.start_ms.div_euclid(1000))
                )
            }
            RouteTest::FirstToken(window) => {
                let window = &route.windows[window];
                format!(
                    "first-token p95 {:.0} ms in the window from {}, against {:.0} ms overall (p = {p:.2e})",
                    window.ttft_p95_ms.unwrap_or(0.0),
                    crate::clock::format_rfc3339(window.start_ms.div_euclid(1000)),
                    route.ttft_p95_ms.unwrap_or(0.0)
                )
            }
        };
        route.verdict = route.verdict.max(Verdict::Watch);
        route.reasons.push(reason);
    }
}

/// The tests of a route's windows, in one family for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RouteTest {
    /// The fallback share of the window at this position.
    Fallback(usize),
    /// The first tokens of the window at this position.
    FirstToken(usize),
    /// The failures (errors and timeouts) of the window at this position.
    Failure(usize),
}

/// The statistical tests of a slice, in one family for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    Escalation,
    Psi,
    Ks,
    /// The escalation test of the slice's window at this position.
    Window(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binned_shift_sees_a_moved_distribution_and_not_a_copy() {
        let histogram = |centre: i64| {
            let mut bins = BTreeMap::new();
            for offset in -20..=20 {
                bins.insert(centre + offset, 100 - offset.unsigned_abs());
            }
            bins
        };
        let same = binned_shift(&histogram(50), &histogram(50)).unwrap();
        assert!(same.psi < 1e-9 && same.ks_statistic < 1e-12 && same.ks_p_value > 0.99);
        let moved = binned_shift(&histogram(50), &histogram(65)).unwrap();
        assert!(moved.psi > PSI_RECALIBRATE, "{moved:?}");
        assert!(moved.ks_p_value < 1e-6, "{moved:?}");
    }

    #[test]
    fn the_bins_floor_is_libms() {
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            -1e-300,
            99.999_999_999,
            4_503_599_627_370_495.5,
            -4_503_599_627_370_495.5,
            9.3e18,
            -9.3e18,
            1e300,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let random = std::iter::repeat_with(move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            // Any bit pattern: every sign, exponent and fraction.
            f64::from_bits(state)
        });
        for value in edges.into_iter().chain(random.take(200_000)) {
            assert_eq!(floor_to_i64(value), value.floor() as i64, "{value:e}");
        }
    }

    #[test]
    fn the_largest_first_token_has_the_last_bin() {
        assert_eq!(ttft_bin(f64::MAX), MAX_TTFT_BIN);
        assert!(ttft_of_bin(MAX_TTFT_BIN).is_finite());
    }

    #[test]
    fn bins_are_the_ones_the_sql_computes() {
        assert_eq!(score_bin(0.4999), 49);
        assert_eq!(score_bin(-0.001), -1);
        assert_eq!(ttft_bin(1.0), 0);
        assert_eq!(ttft_bin(1000.0), 694);
        assert!((ttft_of_bin(ttft_bin(1000.0)) / 1000.0 - 1.0).abs() < 0.01);
    }
}
