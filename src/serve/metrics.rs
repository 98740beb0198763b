//! What `GET /metrics` reports, in Prometheus text format, named by its
//! conventions (units in the name, counters ending `_total`): requests by
//! route, reason and status, and by slice and tenant; first-token and whole
//! request latency per route as histograms; tokens and cost; how each
//! upstream call answered; broken streams; the retry budget; breakers; the
//! served config (its version and expiry); reloads; the records writer and
//! the log.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::resilience::BreakerReport;
use super::served::ServedRecord;
use crate::records::{Draw, Reason, Status};

/// Upper bounds of the first-token histogram, in seconds.
const FIRST_TOKEN_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds of the whole-request histogram, in seconds: an answer may
/// take up to `--total-timeout-ms` (10 minutes by default).
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The most (slice, tenant) pairs labelled one by one; requests of any
/// other pair are counted under `slice="_other",tenant="_other"`, so a
/// client that claims a new slice per request (with `--trust-slice-header`)
/// cannot grow `/metrics` without bound.
pub const MAX_SLICE_LABELS: usize = 256;
const OTHER: &str = "_other";

#[derive(Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (count, bound) in self.counts.iter_mut().zip(bounds) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum += value;
    }
}

/// Tokens and dollars of the requests a route answered.
#[derive(Debug, Default)]
struct Usage {
    input: u64,
    cached_input: u64,
    output: u64,
    cost_usd: f64,
}

/// A usage counter: its name, its help, and its value of a route's usage.
type UsageFamily = (&'static str, &'static str, fn(&Usage) -> f64);

#[derive(Debug, Default)]
struct Counters {
    requests: BTreeMap<(String, Option<Reason>, Status), u64>,
    first_token: BTreeMap<String, Histogram>,
    duration: BTreeMap<String, Histogram>,
    usage: BTreeMap<String, Usage>,
    /// By slice, then tenant.
    slices: BTreeMap<String, BTreeMap<String, SliceCounts>>,
    /// The (slice, tenant) pairs labelled one by one.
    slice_pairs: usize,
    upstream: BTreeMap<(String, &'static str), u64>,
    broken: BTreeMap<(String, &'static str), u64>,
    /// Requests an exploration draw sent, by the route it drew.
    explored: BTreeMap<String, u64>,
    reloads: BTreeMap<&'static str, u64>,
    keys_reloads: BTreeMap<&'static str, u64>,
}

/// A slice and tenant's requests by status, and their cost.
#[derive(Debug, Default)]
struct SliceCounts {
    statuses: BTreeMap<&'static str, u64>,
    cost_usd: f64,
}

/// The records writer's state, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsGauges {
    pub writable: bool,
    pub pending: u64,
    pub write_errors: u64,
    pub dropped: u64,
    pub unrecorded_refusals: u64,
}

/// The retry budget, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetGauges {
    /// Extra calls the window allows now, and those it has given.
    pub allowed: u64,
    pub used: u64,
    /// Extra calls taken and refused since start: `[fallback, hedge]`.
    pub taken: [u64; 2],
    pub refused: [u64; 2],
}

/// What `/metrics` reads from the rest of serve at the scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauges<'a> {
    pub config_version: u64,
    pub config_id: &'a str,
    pub expired: bool,
    /// When the served config expires, seconds since 1970.
    pub expires_at_s: Option<i64>,
    pub in_flight: usize,
    pub breakers: &'a [BreakerReport],
    pub records: RecordsGauges,
    pub budget: BudgetGauges,
    pub log_lines_dropped: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

/// Adds one to `map[key]`, copying the key only when it is new.
fn count<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) {
    *map.entry(key).or_default() += 1;
}

/// The upstream call's end a record's `finish_reason` names, if its stream
/// broke.
fn broken_ending(finish_reason: Option<&str>) -> Option<&'static str> {
    match finish_reason? {
        "upstream_cut" => Some("cut"),
        "upstream_malformed" => Some("malformed"),
        "stall" => Some("stall"),
        "total_deadline" => Some("total_deadline"),
        _ => None,
    }
}

impl Metrics {
    /// Counts a request by the record of its end: `tenant` is its key's
    /// (none for a request refused before its key was known).
    pub fn request(&self, record: &ServedRecord, tenant: Option<&str>) {
        let mut counters = self.counters.lock().expect("unpoisoned");
        let counters = &mut *counters;
        Self::by_route(counters, &record.route, &record.reason, record.status);
        let route = &*record.route;
        if let Some(ms) = record.ttft_ms {
            histogram(&mut counters.first_token, route).observe(FIRST_TOKEN_BUCKETS, ms / 1e3);
        }
        if let Some(ms) = record.total_ms {
            histogram(&mut counters.duration, route).observe(DURATION_BUCKETS, ms / 1e3);
        }
        if record.input_tokens.is_some() || record.cost_usd.is_some() {
            if !counters.usage.contains_key(route) {
                counters.usage.insert(route.to_owned(), Usage::default());
            }
            let usage = counters.usage.get_mut(route).expect("inserted above");
            usage.input += record.input_tokens.unwrap_or(0);
            usage.cached_input += record.cached_input_tokens.unwrap_or(0);
            usage.output += record.output_tokens.unwrap_or(0);
            usage.cost_usd += record.cost_usd.unwrap_or(0.0);
        }
        if let Some(ending) = broken_ending(record.finish_reason.as_deref()) {
            count(&mut counters.broken, (route.to_owned(), ending));
        }
        if record.draw == Some(Draw::Explore)
            && let Some(decided) = record.decided_route.as_deref()
        {
            match counters.explored.get_mut(decided) {
                Some(value) => *value += 1,
                None => {
                    counters.explored.insert(decided.to_owned(), 1);
                }
            }
        }
        // Found without allocating: only a new slice or tenant is copied.
        let tenant = tenant.unwrap_or("-");
        let known = counters
            .slices
            .get(&*record.slice)
            .is_some_and(|tenants| tenants.contains_key(tenant));
        let (slice, tenant) = if known || counters.slice_pairs < MAX_SLICE_LABELS {
            (&*record.slice, tenant)
        } else {
            (OTHER, OTHER)
        };
        if !counters.slices.contains_key(slice) {
            counters.slices.insert(slice.to_owned(), BTreeMap::new());
        }
        let tenants = counters.slices.get_mut(slice).expect("inserted above");
        if !tenants.contains_key(tenant) {
            tenants.insert(tenant.to_owned(), SliceCounts::default());
            counters.slice_pairs += 1;
        }
        let counts = tenants.get_mut(tenant).expect("inserted above");
        *counts.statuses.entry(record.status.name()).or_default() += 1;
        counts.cost_usd += record.cost_usd.unwrap_or(0.0);
    }

    /// Counts an attempt beside a request (an abandoned route, a hedge's
    /// cancelled call) by route, reason and status only.
    pub fn attempt(&self, record: &ServedRecord) {
        let mut counters = self.counters.lock().expect("unpoisoned");
        Self::by_route(&mut counters, &record.route, &record.reason, record.status);
    }

    fn by_route(counters: &mut Counters, route: &str, reason: &Option<Reason>, status: Status) {
        // Found without allocating: only a new key is copied.
        match counters
            .requests
            .iter_mut()
            .find(|((their_route, their_reason, their_status), _)| {
                their_route == route && their_reason == reason && *their_status == status
            }) {
            Some((_, count)) => *count += 1,
            None => {
                counters
                    .requests
                    .insert((route.to_owned(), reason.clone(), status), 1);
            }
        }
    }

    /// How a call to `route` answered, up to its first byte: `2xx`, `4xx`,
    /// `429`, `5xx`, `timeout` (no first byte by its deadline) or
    /// `unreachable` (no answer: refused, reset, a bad head).
    pub fn upstream(&self, route: &str, class: &'static str) {
        let mut counters = self.counters.lock().expect("unpoisoned");
        match counters
            .upstream
            .iter_mut()
            .find(|((their_route, their_class), _)| their_route == route && *their_class == class)
        {
            Some((_, count)) => *count += 1,
            None => {
                counters.upstream.insert((route.to_owned(), class), 1);
            }
        }
    }

    pub fn reload(&self, outcome: &'static str) {
        count(
            &mut self.counters.lock().expect("unpoisoned").reloads,
            outcome,
        );
    }

    pub fn keys_reload(&self, outcome: &'static str) {
        count(
            &mut self.counters.lock().expect("unpoisoned").keys_reloads,
            outcome,
        );
    }

    /// The text `GET /metrics` returns.
    pub fn render(&self, gauges: &Gauges<'_>) -> String {
        let counters = self.counters.lock().expect("unpoisoned");
        let mut text = String::new();
        requests(&mut text, &counters);
        upstreams(&mut text, &counters, &gauges.budget);
        served(&mut text, gauges);
        reloads(&mut text, &counters);
        text
    }
}

/// Requests by route and by slice, their latency, tokens and cost.
fn requests(out: &mut String, counters: &Counters) {
    family(
        out,
        "routeval_requests_total",
        "counter",
        "Requests served, by route, reason and status (and attempts beside them: abandoned routes, cancelled hedges).",
    );
    for ((route, reason, status), value) in &counters.requests {
        let reason = reason.as_ref().map(Reason::to_string).unwrap_or_default();
        sample(
            out,
            "routeval_requests_total",
            &[
                ("route", route),
                ("reason", &reason),
                ("status", status.name()),
            ],
            *value,
        );
    }
    family(
        out,
        "routeval_exploration_requests_total",
        "counter",
        "Requests the signed config's exploration sent to a route drawn at random, by that route.",
    );
    for (route, value) in &counters.explored {
        sample(
            out,
            "routeval_exploration_requests_total",
            &[("route", route)],
            *value,
        );
    }
    slice_requests(out, counters);
    histograms(
        out,
        "routeval_first_token_seconds",
        "Time from a request's arrival to the first byte of its answer, by the route that answered.",
        FIRST_TOKEN_BUCKETS,
        &counters.first_token,
    );
    histograms(
        out,
        "routeval_request_duration_seconds",
        "Time from a request's arrival to the last byte of its answer, by route.",
        DURATION_BUCKETS,
        &counters.duration,
    );
    let usage_families: [UsageFamily; 4] = [
        (
            "routeval_input_tokens_total",
            "Prompt tokens of the requests a route answered.",
            |usage| usage.input as f64,
        ),
        (
            "routeval_cached_input_tokens_total",
            "Prompt tokens the route's upstream served from its cache.",
            |usage| usage.cached_input as f64,
        ),
        (
            "routeval_output_tokens_total",
            "Generated tokens of the requests a route answered.",
            |usage| usage.output as f64,
        ),
        (
            "routeval_cost_usd_total",
            "What the requests a route answered cost, in dollars at the routes' prices (a cascade's earlier stages and verifier included).",
            |usage| usage.cost_usd,
        ),
    ];
    for (name, help, value) in usage_families {
        family(out, name, "counter", help);
        for (route, usage) in &counters.usage {
            sample(out, name, &[("route", route)], value(usage));
        }
    }
}

/// Requests and their cost by slice and tenant.
fn slice_requests(out: &mut String, counters: &Counters) {
    family(
        out,
        "routeval_slice_requests_total",
        "counter",
        &format!(
            "Requests by slice, tenant and status; past {MAX_SLICE_LABELS} slice and tenant pairs, under slice and tenant {OTHER}."
        ),
    );
    for (slice, tenants) in &counters.slices {
        for (tenant, counts) in tenants {
            for (status, value) in &counts.statuses {
                sample(
                    out,
                    "routeval_slice_requests_total",
                    &[("slice", slice), ("tenant", tenant), ("status", status)],
                    *value,
                );
            }
        }
    }
    family(
        out,
        "routeval_slice_cost_usd_total",
        "counter",
        "What the requests of a slice and tenant cost, in dollars at the routes' prices.",
    );
    for (slice, tenants) in &counters.slices {
        for (tenant, counts) in tenants {
            sample(
                out,
                "routeval_slice_cost_usd_total",
                &[("slice", slice), ("tenant", tenant)],
                counts.cost_usd,
            );
        }
    }
}

/// How each route's calls answered, broken streams, and the retry budget.
fn upstreams(out: &mut String, counters: &Counters, budget: &BudgetGauges) {
    family(
        out,
        "routeval_upstream_responses_total",
        "counter",
        "Calls to a route by how they answered up to their first byte: 2xx, 4xx, 429, 5xx, timeout, unreachable.",
    );
    for ((route, class), value) in &counters.upstream {
        sample(
            out,
            "routeval_upstream_responses_total",
            &[("route", route), ("class", class)],
            *value,
        );
    }
    family(
        out,
        "routeval_upstream_streams_broken_total",
        "counter",
        "Answers that broke after their first byte, by route and how: cut, malformed, stall, total_deadline.",
    );
    for ((route, ending), value) in &counters.broken {
        sample(
            out,
            "routeval_upstream_streams_broken_total",
            &[("route", route), ("ending", ending)],
            *value,
        );
    }
    family(
        out,
        "routeval_retry_budget_calls_total",
        "counter",
        "Extra calls (a fallback after a failed attempt, a hedge's copy) the retry budget allowed or refused.",
    );
    for (index, kind) in ["fallback", "hedge"].into_iter().enumerate() {
        for (outcome, values) in [("taken", &budget.taken), ("refused", &budget.refused)] {
            sample(
                out,
                "routeval_retry_budget_calls_total",
                &[("kind", kind), ("outcome", outcome)],
                values[index],
            );
        }
    }
    gauge(
        out,
        "routeval_retry_budget_allowed",
        "Extra calls the retry budget allows in its window now.",
        budget.allowed,
    );
    gauge(
        out,
        "routeval_retry_budget_used",
        "Extra calls made in the retry budget's window now.",
        budget.used,
    );
}

/// The served config, requests in flight and breakers; then the records
/// writer and the log.
fn served(out: &mut String, gauges: &Gauges<'_>) {
    family(
        out,
        "routeval_config_version",
        "gauge",
        "The version of the signed route config being served.",
    );
    sample(
        out,
        "routeval_config_version",
        &[("config_id", gauges.config_id)],
        gauges.config_version,
    );
    gauge(
        out,
        "routeval_config_expired",
        "Whether the served config has expired.",
        u8::from(gauges.expired),
    );
    if let Some(expires_at_s) = gauges.expires_at_s {
        gauge(
            out,
            "routeval_config_expiry_timestamp_seconds",
            "When the served config expires, in seconds since 1970.",
            expires_at_s,
        );
    }
    gauge(
        out,
        "routeval_requests_in_flight",
        "Requests being answered now.",
        gauges.in_flight,
    );
    family(
        out,
        "routeval_breaker_state",
        "gauge",
        "A route's breaker: 0 closed, 1 open, 2 half-open (this replica's).",
    );
    for breaker in gauges.breakers {
        sample(
            out,
            "routeval_breaker_state",
            &[("route", &breaker.route)],
            breaker.state,
        );
    }
    family(
        out,
        "routeval_breaker_opens_total",
        "counter",
        "Times a route's breaker opened.",
    );
    for breaker in gauges.breakers {
        sample(
            out,
            "routeval_breaker_opens_total",
            &[("route", &breaker.route)],
            breaker.opens,
        );
    }
    records_and_log(out, gauges);
}

/// The records writer's state and the log's dropped lines.
fn records_and_log(out: &mut String, gauges: &Gauges<'_>) {
    let records = &gauges.records;
    for (name, kind, help, value) in [
        (
            "routeval_unrecorded_refusals_total",
            "counter",
            "Refusals for want of a valid key past the rate that is journaled, counted here only.",
            records.unrecorded_refusals,
        ),
        (
            "routeval_records_writable",
            "gauge",
            "Whether the last write of the records succeeded.",
            u64::from(records.writable),
        ),
        (
            "routeval_records_pending",
            "gauge",
            "Records not yet written and synced.",
            records.pending,
        ),
        (
            "routeval_records_write_errors_total",
            "counter",
            "Writes of the records that failed.",
            records.write_errors,
        ),
        (
            "routeval_records_dropped_total",
            "counter",
            "Records dropped: past the queue, or past what is kept while the records cannot be written.",
            records.dropped,
        ),
        (
            "routeval_log_lines_dropped_total",
            "counter",
            "Log lines dropped because stderr was not read fast enough.",
            gauges.log_lines_dropped,
        ),
    ] {
        family(out, name, kind, help);
        sample(out, name, &[], value);
    }
}

/// Reloads of the keys file and of the config, by outcome.
fn reloads(out: &mut String, counters: &Counters) {
    for (name, help, values) in [
        (
            "routeval_keys_reloads_total",
            "Reloads of the keys file, by outcome.",
            &counters.keys_reloads,
        ),
        (
            "routeval_config_reloads_total",
            "Reloads of the config, by outcome.",
            &counters.reloads,
        ),
    ] {
        family(out, name, "counter", help);
        for (outcome, value) in values {
            sample(out, name, &[("outcome", outcome)], *value);
        }
    }
}

fn histogram<'a>(map: &'a mut BTreeMap<String, Histogram>, route: &str) -> &'a mut Histogram {
    if !map.contains_key(route) {
        map.insert(route.to_owned(), Histogram::default());
    }
    map.get_mut(route).expect("inserted above")
}

/// A label value as the exposition format escapes it.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (index, (label, value)) in labels.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escaped(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    family(out, name, "gauge", help);
    sample(out, name, &[], value);
}

fn histograms(
    out: &mut String,
    name: &str,
    help: &str,
    bounds: &[f64],
    by_route: &BTreeMap<String, Histogram>,
) {
    family(out, name, "histogram", help);
    for (route, histogram) in by_route {
        let bucket = format!("{name}_bucket");
        for (count, bound) in histogram.counts.iter().zip(bounds) {
            sample(
                out,
                &bucket,
                &[("route", route), ("le", &bound.to_string())],
                count,
            );
        }
        sample(
            out,
            &bucket,
            &[("route", route), ("le", "+Inf")],
            histogram.count,
        );
        sample(
            out,
            &format!("{name}_sum"),
            &[("route", route)],
            histogram.sum,
        );
        sample(
            out,
            &format!("{name}_count"),
            &[("route", route)],
            histogram.count,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(slice: &str) -> ServedRecord {
        ServedRecord::for_test("r", slice)
    }

    #[test]
    fn slices_past_the_bound_are_counted_under_other() {
        let metrics = Metrics::default();
        let extra = 44;
        for index in 0..MAX_SLICE_LABELS + extra {
            metrics.request(&record(&format!("slice-{index}")), Some("acme"));
        }
        // A slice labelled already keeps its label past the bound.
        metrics.request(&record("slice-0"), Some("acme"));
        let counters = metrics.counters.lock().unwrap();
        let labelled = counters
            .slices
            .keys()
            .filter(|slice| slice.as_str() != OTHER)
            .count();
        assert_eq!(labelled, MAX_SLICE_LABELS);
        let other = &counters.slices[OTHER][OTHER];
        assert_eq!(other.statuses["ok"], extra as u64);
        assert_eq!(counters.slices["slice-0"]["acme"].statuses["ok"], 2);
        assert_eq!(
            counters.usage["a"].input,
            3 * (MAX_SLICE_LABELS + extra + 1) as u64
        );
    }
}
