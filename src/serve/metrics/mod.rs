//! What `GET /metrics` reports, in Prometheus text format, named by its
//! conventions (units in the name, counters ending `_total`): requests by
//! route, reason and status, and by slice and tenant; first-token and whole
//! request latency per route as histograms; tokens and cost; how each
//! upstream call answered; broken streams; the retry budget; breakers; the
//! served config (its version and expiry); reloads; the records writer and
//! the log.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::served::ServedRecord;
use crate::records::{Draw, Reason, Status};

mod counters;
mod exposition;

pub use counters::{BudgetGauges, Gauges, MAX_SLICE_LABELS, RecordsGauges};
use counters::{
    Counters, DURATION_BUCKETS, FIRST_TOKEN_BUCKETS, Histogram, OTHER, SliceCounts, Usage,
};

use exposition::{process, reloads, requests, served, upstreams};

#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

/// Adds one to `map[key]`, copying the key only when it is new.
fn count<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) {
    let value = map.entry(key).or_default();
    *value = value.saturating_add(1);
}

/// The upstream call's end a record's `finish_reason` names, if its stream
/// broke.
fn broken_ending(finish_reason: Option<&str>) -> Option<&'static str> {
    match finish_reason? {
        "upstream_cut" => Some("cut"),
        "upstream_malformed" => Some("malformed"),
        "upstream_error" => Some("error"),
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
        Self::usage(counters, route, record);
        if let Some(ending) = broken_ending(record.finish_reason.as_deref()) {
            count(&mut counters.broken, (route.to_owned(), ending));
        }
        if record.draw == Some(Draw::Explore)
            && let Some(decided) = record.decided_route.as_deref()
        {
            match counters.explored.get_mut(decided) {
                Some(value) => *value = value.saturating_add(1),
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
            counters.slice_pairs = counters.slice_pairs.saturating_add(1);
        }
        let counts = tenants.get_mut(tenant).expect("inserted above");
        let status = counts.statuses.entry(record.status.name()).or_default();
        *status = status.saturating_add(1);
        counts.cost_usd += record.cost_usd.unwrap_or(0.0);
    }

    /// Counts an attempt beside a request (an abandoned route, a hedge's
    /// cancelled call) by route, reason and status, and what it billed.
    pub fn attempt(&self, record: &ServedRecord) {
        let mut counters = self.counters.lock().expect("unpoisoned");
        Self::by_route(&mut counters, &record.route, &record.reason, record.status);
        Self::usage(&mut counters, &record.route, record);
    }

    /// `record`'s tokens and cost, added to `route`'s.
    fn usage(counters: &mut Counters, route: &str, record: &ServedRecord) {
        if record.input_tokens.is_some() || record.cost_usd.is_some() {
            if !counters.usage.contains_key(route) {
                counters.usage.insert(route.to_owned(), Usage::default());
            }
            let usage = counters.usage.get_mut(route).expect("inserted above");
            usage.input = usage.input.saturating_add(record.input_tokens.unwrap_or(0));
            usage.cached_input = usage
                .cached_input
                .saturating_add(record.cached_input_tokens.unwrap_or(0));
            usage.output = usage
                .output
                .saturating_add(record.output_tokens.unwrap_or(0));
            usage.cost_usd += record.cost_usd.unwrap_or(0.0);
        }
    }

    fn by_route(counters: &mut Counters, route: &str, reason: &Option<Reason>, status: Status) {
        // Found without allocating: only a new key is copied.
        match counters
            .requests
            .iter_mut()
            .find(|((their_route, their_reason, their_status), _)| {
                their_route == route && their_reason == reason && *their_status == status
            }) {
            Some((_, count)) => *count = count.saturating_add(1),
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
            Some((_, count)) => *count = count.saturating_add(1),
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

    /// A reload of `--provider-keys` that changed a route's key, or was
    /// refused.
    pub fn provider_keys_reload(&self, outcome: &'static str) {
        count(
            &mut self
                .counters
                .lock()
                .expect("unpoisoned")
                .provider_keys_reloads,
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
        process(&mut text, gauges);
        text
    }
}

fn histogram<'a>(map: &'a mut BTreeMap<String, Histogram>, route: &str) -> &'a mut Histogram {
    if !map.contains_key(route) {
        map.insert(route.to_owned(), Histogram::default());
    }
    map.get_mut(route).expect("inserted above")
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
