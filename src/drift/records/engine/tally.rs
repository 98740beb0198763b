//! The fold of `drift --records` as records are read: slices, routes,
//! reasons and models interned to small numbers, windows and histogram bins
//! in dense arrays, so a record costs a few array increments and a batch of
//! dictionary-encoded columns maps each distinct text once. Each reading
//! worker keeps one tally; when it is done the tally becomes the drift's
//! [`Fold`], keyed by name as the warehouse's aggregates are, and the folds
//! merge as before.

use std::collections::{BTreeMap, HashMap};

use super::fold::{Fold, RouteCounts, SliceCounts};
use super::{score_bin, ttft_bin};
use crate::records::{Reason, Record, RecordChunk, RecordColumns, Status, Texts};

/// What every worker's tally shares: the deployed config's view of a record.
pub(super) struct TallyContext<'a> {
    pub logical_model: &'a str,
    /// The config's version: a record served by another is counted apart.
    pub config_version: u64,
    pub window_ms: i64,
    /// The score at or above which a slice's request escalates.
    pub threshold_of: &'a (dyn Fn(&str) -> Option<f64> + Sync),
    pub pins: &'a HashMap<String, String>,
}

/// Names in the order first seen, each with its number.
#[derive(Debug, Default)]
struct Names {
    numbers: HashMap<String, usize>,
    names: Vec<String>,
}

impl Names {
    /// The number of `name`, and whether it is new.
    fn intern(&mut self, name: &str) -> (usize, bool) {
        if let Some(&number) = self.numbers.get(name) {
            return (number, false);
        }
        let number = self.names.len();
        self.numbers.insert(name.to_owned(), number);
        self.names.push(name.to_owned());
        (number, true)
    }
}

/// Counts by bin: a dense run of bins around the ones seen, and the rare
/// bin far outside it in a map, so an outlier cannot make the run huge.
#[derive(Debug, Default, Clone)]
struct Histogram {
    first: i64,
    dense: Vec<u64>,
    far: BTreeMap<i64, u64>,
}

/// The widest dense run, 4,096 bins (32 KiB); first tokens from 1 ms to an
/// hour span 1,518 of them.
const DENSE_BINS: i64 = 4096;

impl Histogram {
    #[inline]
    fn add(&mut self, bin: i64) {
        if self.dense.is_empty() {
            self.first = bin;
            self.dense.push(0);
        }
        let last = self.first + self.dense.len() as i64 - 1;
        if bin < self.first {
            if last - bin < DENSE_BINS {
                let grow = (self.first - bin) as usize;
                self.dense.splice(0..0, std::iter::repeat_n(0, grow));
                self.first = bin;
            } else {
                *self.far.entry(bin).or_default() += 1;
                return;
            }
        } else if bin > last {
            if bin - self.first < DENSE_BINS {
                self.dense.resize((bin - self.first + 1) as usize, 0);
            } else {
                *self.far.entry(bin).or_default() += 1;
                return;
            }
        }
        self.dense[(bin - self.first) as usize] += 1;
    }

    fn into_map(self) -> BTreeMap<i64, u64> {
        let mut map = self.far;
        for (offset, count) in self.dense.into_iter().enumerate() {
            if count > 0 {
                *map.entry(self.first + offset as i64).or_default() += count;
            }
        }
        map
    }
}

#[derive(Debug, Default, Clone)]
struct RouteTally {
    requests: u64,
    failures: u64,
    /// By reason number; only `fallback:` reasons are counted.
    fallbacks: Vec<u64>,
    other_version: u64,
    versioned: u64,
    cost_usd: f64,
    costed: u64,
    ttft: Histogram,
}

impl RouteTally {
    fn into_counts(self, reasons: &Names) -> RouteCounts {
        RouteCounts {
            requests: self.requests,
            failure_known: self.requests,
            failures: self.failures,
            fallbacks: self
                .fallbacks
                .into_iter()
                .enumerate()
                .filter(|(_, count)| *count > 0)
                .map(|(reason, count)| (reasons.names[reason].clone(), count))
                .collect(),
            other_version: self.other_version,
            versioned: self.versioned,
            cost_usd: self.cost_usd,
            costed: self.costed,
            ttft: self.ttft.into_map(),
        }
    }
}

/// One record, its texts as numbers.
#[derive(Debug, Clone, Copy)]
struct Seen {
    timestamp_ms: i64,
    slice: usize,
    route: usize,
    reason: Option<usize>,
    model: Option<usize>,
    score: Option<f64>,
    /// Answered requests' first-token bin.
    ttft_bin: Option<i64>,
    cost_usd: Option<f64>,
    /// The route failed the request ([`route_failed`]).
    failed: bool,
}

/// Whether a record is the route's failure: an error or a timeout, but not
/// a client that went away, nor a hedge's copy serve cancelled.
pub(super) fn route_failed(
    status: Status,
    reason: Option<&Reason>,
    finish_reason: Option<&str>,
) -> bool {
    matches!(status, Status::Error | Status::Timeout)
        && finish_reason != Some("client_disconnected")
        && reason != Some(&Reason::HedgeLost)
}

/// One worker's fold.
pub(super) struct Tally<'a> {
    context: &'a TallyContext<'a>,
    slices: Names,
    thresholds: Vec<Option<f64>>,
    routes: Names,
    /// The model number each route's pinned version has.
    pins: Vec<Option<usize>>,
    models: Names,
    reasons: Names,
    /// A reason's routing decision (escalated or not), when it says one.
    decisions: Vec<Option<bool>>,
    fallback: Vec<bool>,
    window_starts: Vec<i64>,
    window_numbers: HashMap<i64, usize>,
    /// The last record's window, which the next record is almost always in.
    current: Option<(i64, usize)>,
    scores: Vec<Histogram>,
    /// By window, then slice; a slice's totals are the sum of its windows.
    slice_windows: Vec<Vec<SliceCounts>>,
    /// By window, then route; likewise.
    route_windows: Vec<Vec<RouteTally>>,
    /// Each route's cost summed in record order, as a single reader sums it
    /// (a sum of window sums would round differently).
    route_costs: Vec<f64>,
    first_ms: Option<i64>,
    last_ms: Option<i64>,
    /// Records of another logical model, by its name.
    left_out: HashMap<String, u64>,
    /// Records served by another config version, by that version.
    other_versions: HashMap<u64, u64>,
}

impl<'a> Tally<'a> {
    pub(super) fn new(context: &'a TallyContext<'a>) -> Tally<'a> {
        Tally {
            context,
            slices: Names::default(),
            thresholds: Vec::new(),
            routes: Names::default(),
            pins: Vec::new(),
            models: Names::default(),
            reasons: Names::default(),
            decisions: Vec::new(),
            fallback: Vec::new(),
            window_starts: Vec::new(),
            window_numbers: HashMap::new(),
            current: None,
            scores: Vec::new(),
            slice_windows: Vec::new(),
            route_windows: Vec::new(),
            route_costs: Vec::new(),
            first_ms: None,
            last_ms: None,
            left_out: HashMap::new(),
            other_versions: HashMap::new(),
        }
    }

    fn slice(&mut self, name: &str) -> usize {
        let (number, new) = self.slices.intern(name);
        if new {
            self.thresholds.push((self.context.threshold_of)(name));
            self.scores.push(Histogram::default());
            for window in &mut self.slice_windows {
                window.push(SliceCounts::default());
            }
        }
        number
    }

    fn route(&mut self, name: &str) -> usize {
        let (number, new) = self.routes.intern(name);
        if new {
            let pin = self
                .context
                .pins
                .get(name)
                .map(|pinned| self.models.intern(pinned).0);
            self.pins.push(pin);
            self.route_costs.push(0.0);
            for window in &mut self.route_windows {
                window.push(RouteTally::default());
            }
        }
        number
    }

    fn reason(&mut self, name: &str) -> usize {
        let (number, new) = self.reasons.intern(name);
        if new {
            let reason = Reason::from(name);
            self.decisions.push(reason.escalation());
            self.fallback.push(reason.is_fallback());
        }
        number
    }

    fn window(&mut self, timestamp_ms: i64) -> usize {
        let window_ms = self.context.window_ms;
        if let Some((start, number)) = self.current
            && timestamp_ms >= start
            && timestamp_ms
                .checked_sub(start)
                .is_some_and(|into| into < window_ms)
        {
            return number;
        }
        let start = timestamp_ms.div_euclid(window_ms) * window_ms;
        let number = match self.window_numbers.get(&start) {
            Some(&number) => number,
            None => {
                let number = self.window_starts.len();
                self.window_starts.push(start);
                self.window_numbers.insert(start, number);
                let (slices, routes) = (self.slices.names.len(), self.routes.names.len());
                self.slice_windows
                    .push(vec![SliceCounts::default(); slices]);
                self.route_windows.push(vec![RouteTally::default(); routes]);
                number
            }
        };
        self.current = Some((start, number));
        number
    }

    fn add(&mut self, seen: Seen) {
        let ms = seen.timestamp_ms;
        self.first_ms = Some(self.first_ms.map_or(ms, |first| first.min(ms)));
        self.last_ms = Some(self.last_ms.map_or(ms, |last| last.max(ms)));
        let window = self.window(ms);
        let escalated = seen
            .reason
            .and_then(|reason| self.decisions[reason])
            .or_else(|| {
                let threshold = self.thresholds[seen.slice]?;
                seen.score
                    .map(|score| crate::policy::escalates(score, threshold))
            });
        let counts = &mut self.slice_windows[window][seen.slice];
        counts.requests += 1;
        if let Some(escalated) = escalated {
            counts.decided += 1;
            counts.escalated += u64::from(escalated);
        }
        if let Some(score) = seen.score {
            self.scores[seen.slice].add(score_bin(score));
        }
        let counts = &mut self.route_windows[window][seen.route];
        counts.requests += 1;
        counts.failures += u64::from(seen.failed);
        if let Some(reason) = seen.reason.filter(|&reason| self.fallback[reason]) {
            if counts.fallbacks.len() <= reason {
                counts.fallbacks.resize(reason + 1, 0);
            }
            counts.fallbacks[reason] += 1;
        }
        if let (Some(model), Some(pinned)) = (seen.model, self.pins[seen.route]) {
            counts.versioned += 1;
            counts.other_version += u64::from(model != pinned);
        }
        if let Some(cost) = seen.cost_usd {
            counts.cost_usd += cost;
            counts.costed += 1;
            self.route_costs[seen.route] += cost;
        }
        if let Some(bin) = seen.ttft_bin {
            counts.ttft.add(bin);
        }
    }

    pub(super) fn visit(&mut self, chunk: RecordChunk<'_>) {
        match chunk {
            RecordChunk::Record(record) => self.add_record(record),
            RecordChunk::Columns(columns) => self.add_columns(columns),
        }
    }

    fn add_record(&mut self, record: &Record<'_>) {
        if let Some(name) = record.logical_model.as_deref()
            && name != self.context.logical_model
        {
            *self.left_out.entry(name.to_owned()).or_default() += 1;
            return;
        }
        if let Some(version) = record.config_version
            && version != self.context.config_version
        {
            *self.other_versions.entry(version).or_default() += 1;
            return;
        }
        let seen = Seen {
            timestamp_ms: record.timestamp_ms,
            slice: self.slice(&record.slice),
            route: self.route(&record.route),
            reason: record
                .reason
                .as_ref()
                .map(|reason| self.reason(&reason.to_string())),
            model: record
                .model
                .as_deref()
                .map(|model| self.models.intern(model).0),
            score: record.score,
            ttft_bin: record
                .ttft_ms
                .filter(|_| record.status == Status::Ok)
                .map(ttft_bin),
            cost_usd: record.cost_usd,
            failed: route_failed(
                record.status,
                record.reason.as_ref(),
                record.finish_reason.as_deref(),
            ),
        };
        self.add(seen);
    }

    /// Each column's distinct values as this tally's numbers.
    fn numbers_of(
        &mut self,
        texts: Texts<'_>,
        mut number: impl FnMut(&mut Self, &str) -> usize,
    ) -> Vec<Option<usize>> {
        texts
            .values()
            .map(|value| value.map(|value| number(self, value)))
            .collect()
    }

    fn add_columns(&mut self, columns: &RecordColumns) {
        let logical = self.context.logical_model;
        let kept: Option<(Texts<'_>, Vec<bool>)> = columns.logical_model().map(|texts| {
            let kept = texts
                .values()
                .map(|value| value.is_none_or(|name| name == logical))
                .collect();
            (texts, kept)
        });
        let (slices, routes) = (columns.slice(), columns.route());
        let slice_numbers = self.numbers_of(slices, Self::slice);
        let route_numbers = self.numbers_of(routes, Self::route);
        let reasons = columns.reason();
        let reason_numbers = reasons.map(|texts| self.numbers_of(texts, Self::reason));
        let models = columns.model();
        let model_numbers =
            models.map(|texts| self.numbers_of(texts, |tally, model| tally.models.intern(model).0));
        let status = columns.status();
        let (answered, failing) = answered_and_failing(status);
        // A failing status is the route's unless the client left or the
        // reason is a cancelled hedge copy.
        let finish = columns.finish_reason();
        let client_left: Vec<bool> = finish.map_or_else(Vec::new, |texts| {
            texts
                .values()
                .map(|value| value == Some("client_disconnected"))
                .collect()
        });
        let hedge_lost: Vec<bool> = reasons.map_or_else(Vec::new, |texts| {
            texts
                .values()
                .map(|value| value.map(Reason::from) == Some(Reason::HedgeLost))
                .collect()
        });
        let (score, ttft, cost) = (columns.score(), columns.ttft_ms(), columns.cost_usd());
        // Every slot's bin in one pass of its own, so the logarithms overlap
        // instead of each waiting at its row's counters.
        let ttft_bins: Vec<i64> = ttft.map_or_else(Vec::new, |ttft| {
            ttft.values().iter().map(|&ms| ttft_bin(ms)).collect()
        });
        let value = |array: Option<&arrow::array::Float64Array>, row: usize| {
            use arrow::array::Array;
            array.and_then(|array| array.is_valid(row).then(|| array.value(row)))
        };
        let text = |texts: Option<Texts<'_>>, numbers: &Option<Vec<Option<usize>>>, row: usize| {
            let key = texts?.key(row)?;
            numbers.as_ref()?[key]
        };
        let mut left_out = vec![0u64; kept.as_ref().map_or(0, |(_, kept)| kept.len())];
        let versions = columns.config_version();
        let this_version = self.context.config_version;
        let timestamps = columns.timestamps();
        for (row, &timestamp_ms) in timestamps.iter().enumerate() {
            if let Some((texts, kept)) = &kept
                && let Some(key) = texts.key(row)
                && !kept[key]
            {
                left_out[key] += 1;
                continue;
            }
            if let Some(versions) = versions
                && arrow::array::Array::is_valid(versions, row)
                && versions.value(row) != this_version
            {
                *self.other_versions.entry(versions.value(row)).or_default() += 1;
                continue;
            }
            // Checked: every row has a slice, a route and a status.
            let key = |texts: Texts<'_>| texts.key(row).expect("a checked required text");
            let seen = Seen {
                timestamp_ms,
                slice: slice_numbers[key(slices)].expect("a checked slice"),
                route: route_numbers[key(routes)].expect("a checked route"),
                reason: text(reasons, &reason_numbers, row),
                model: text(models, &model_numbers, row),
                score: value(score, row),
                ttft_bin: value(ttft, row)
                    .filter(|_| answered[key(status)])
                    .map(|_| ttft_bins[row]),
                cost_usd: value(cost, row),
                failed: failing[key(status)]
                    && !finish
                        .and_then(|texts| texts.key(row))
                        .is_some_and(|key| client_left[key])
                    && !reasons
                        .and_then(|texts| texts.key(row))
                        .is_some_and(|key| hedge_lost[key]),
            };
            self.add(seen);
        }
        if let Some((texts, _)) = kept {
            for (name, count) in texts.values().zip(left_out) {
                if let Some(name) = name.filter(|_| count > 0) {
                    *self.left_out.entry(name.to_owned()).or_default() += count;
                }
            }
        }
    }

    /// The tally as the drift's fold, keyed by name.
    pub(super) fn into_fold(self) -> Fold {
        let mut fold = Fold {
            first_ms: self.first_ms,
            last_ms: self.last_ms,
            left_out: self.left_out.into_iter().collect(),
            other_versions: self.other_versions.into_iter().collect(),
            ..Fold::default()
        };
        let mut slice_windows: Vec<BTreeMap<i64, SliceCounts>> =
            vec![BTreeMap::new(); self.slices.names.len()];
        let mut route_windows: Vec<BTreeMap<i64, RouteCounts>> =
            vec![BTreeMap::new(); self.routes.names.len()];
        for (window, (slices, routes)) in self
            .slice_windows
            .into_iter()
            .zip(self.route_windows)
            .enumerate()
        {
            let start = self.window_starts[window];
            for (slice, counts) in slices.into_iter().enumerate() {
                if counts.requests > 0 {
                    slice_windows[slice].insert(start, counts);
                }
            }
            for (route, counts) in routes.into_iter().enumerate() {
                if counts.requests > 0 {
                    route_windows[route].insert(start, counts.into_counts(&self.reasons));
                }
            }
        }
        for ((name, scores), windows) in self
            .slices
            .names
            .into_iter()
            .zip(self.scores)
            .zip(slice_windows)
        {
            // A slice a batch's dictionary named but no kept record had.
            if windows.is_empty() {
                continue;
            }
            let slice = fold.slices.entry(name).or_default();
            for counts in windows.values() {
                slice.counts.absorb(counts);
            }
            slice.windows = windows;
            slice.scores = scores.into_map();
        }
        for ((name, cost_usd), windows) in self
            .routes
            .names
            .into_iter()
            .zip(self.route_costs)
            .zip(route_windows)
        {
            if windows.is_empty() {
                continue;
            }
            let route = fold.routes.entry(name).or_default();
            for counts in windows.values() {
                route.counts.absorb(counts.clone());
            }
            route.counts.cost_usd = cost_usd;
            route.windows = windows;
        }
        fold
    }
}

/// Per distinct status text: whether it is an answer, and whether it is a
/// failure of the route.
fn answered_and_failing(status: Texts<'_>) -> (Vec<bool>, Vec<bool>) {
    let parsed: Vec<Option<Status>> = status
        .values()
        .map(|value| value.and_then(Status::parse))
        .collect();
    let answered = parsed
        .iter()
        .map(|status| *status == Some(Status::Ok))
        .collect();
    let failing = parsed
        .iter()
        .map(|status| status.is_some_and(|status| route_failed(status, None, None)))
        .collect();
    (answered, failing)
}
