//! What `GET /metrics` reports, in Prometheus text format: requests by
//! route, reason and status; first-token latency per route as a
//! histogram; the served config's version; and reloads by outcome.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::resilience::BreakerReport;

/// Upper bounds of the first-token histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: BTreeMap<(String, String, String), u64>,
    first_token: BTreeMap<String, Histogram>,
    reloads: BTreeMap<&'static str, u64>,
    keys_reloads: BTreeMap<&'static str, u64>,
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

#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

impl Metrics {
    pub fn request(&self, route: &str, reason: &str, status: &str, ttft_ms: Option<f64>) {
        let mut counters = self.counters.lock().expect("unpoisoned");
        let key = (route, reason, status);
        // Found without allocating: only a new key is copied.
        match counters
            .requests
            .iter_mut()
            .find(|((route, reason, status), _)| {
                (route.as_str(), reason.as_str(), status.as_str()) == key
            }) {
            Some((_, count)) => *count += 1,
            None => {
                counters
                    .requests
                    .insert((route.to_owned(), reason.to_owned(), status.to_owned()), 1);
            }
        }
        if let Some(ms) = ttft_ms {
            let seconds = ms / 1e3;
            if !counters.first_token.contains_key(route) {
                counters
                    .first_token
                    .insert(route.to_owned(), Histogram::default());
            }
            let histogram = counters.first_token.get_mut(route).expect("inserted above");
            for (count, bound) in histogram.counts.iter_mut().zip(BUCKETS) {
                if seconds <= bound {
                    *count += 1;
                }
            }
            histogram.count += 1;
            histogram.sum += seconds;
        }
    }

    pub fn reload(&self, outcome: &'static str) {
        *self
            .counters
            .lock()
            .expect("unpoisoned")
            .reloads
            .entry(outcome)
            .or_default() += 1;
    }

    pub fn keys_reload(&self, outcome: &'static str) {
        *self
            .counters
            .lock()
            .expect("unpoisoned")
            .keys_reloads
            .entry(outcome)
            .or_default() += 1;
    }

    /// The text `GET /metrics` returns.
    pub fn render(
        &self,
        config_version: u64,
        config_id: &str,
        expired: bool,
        in_flight: usize,
        breakers: &[BreakerReport],
        records: &RecordsGauges,
    ) -> String {
        let counters = self.counters.lock().expect("unpoisoned");
        let mut text = String::new();
        let label = |value: &str| value.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str("# HELP routeval_requests_total Requests served, by route, reason and status.\n# TYPE routeval_requests_total counter\n");
        for ((route, reason, status), count) in &counters.requests {
            let _ = writeln!(
                text,
                "routeval_requests_total{{route=\"{}\",reason=\"{}\",status=\"{}\"}} {count}",
                label(route),
                label(reason),
                label(status)
            );
        }
        text.push_str("# HELP routeval_first_token_seconds Time to the first token the client received.\n# TYPE routeval_first_token_seconds histogram\n");
        for (route, histogram) in &counters.first_token {
            let route = label(route);
            for (count, bound) in histogram.counts.iter().zip(BUCKETS) {
                let _ = writeln!(
                    text,
                    "routeval_first_token_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                text,
                "routeval_first_token_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}\nrouteval_first_token_seconds_sum{{route=\"{route}\"}} {}\nrouteval_first_token_seconds_count{{route=\"{route}\"}} {}",
                histogram.count, histogram.sum, histogram.count
            );
        }
        let _ = writeln!(
            text,
            "# HELP routeval_config_version The signed route config being served.\n# TYPE routeval_config_version gauge\nrouteval_config_version{{config_id=\"{}\"}} {config_version}\n# HELP routeval_config_expired Whether the served config has expired.\n# TYPE routeval_config_expired gauge\nrouteval_config_expired {}",
            label(config_id),
            u8::from(expired)
        );
        let _ = writeln!(
            text,
            "# HELP routeval_in_flight Requests being answered now.\n# TYPE routeval_in_flight gauge\nrouteval_in_flight {in_flight}"
        );
        text.push_str("# HELP routeval_breaker_state A route's breaker: 0 closed, 1 open, 2 half-open (this replica's).\n# TYPE routeval_breaker_state gauge\n");
        for breaker in breakers {
            let _ = writeln!(
                text,
                "routeval_breaker_state{{route=\"{}\"}} {}",
                label(&breaker.route),
                breaker.state
            );
        }
        text.push_str("# HELP routeval_breaker_opens_total Times a route's breaker opened.\n# TYPE routeval_breaker_opens_total counter\n");
        for breaker in breakers {
            let _ = writeln!(
                text,
                "routeval_breaker_opens_total{{route=\"{}\"}} {}",
                label(&breaker.route),
                breaker.opens
            );
        }
        let _ = writeln!(
            text,
            "# HELP routeval_unrecorded_refusals_total Refusals for want of a valid key past the rate that is journaled, counted here only.\n# TYPE routeval_unrecorded_refusals_total counter\nrouteval_unrecorded_refusals_total {}\n# HELP routeval_records_writable Whether the last write of the records succeeded.\n# TYPE routeval_records_writable gauge\nrouteval_records_writable {}\n# HELP routeval_records_pending Records not yet written and synced.\n# TYPE routeval_records_pending gauge\nrouteval_records_pending {}\n# HELP routeval_records_write_errors_total Writes of the records that failed.\n# TYPE routeval_records_write_errors_total counter\nrouteval_records_write_errors_total {}\n# HELP routeval_records_dropped_total Records dropped: past the queue, or past what is kept while the records cannot be written.\n# TYPE routeval_records_dropped_total counter\nrouteval_records_dropped_total {}",
            records.unrecorded_refusals,
            u8::from(records.writable),
            records.pending,
            records.write_errors,
            records.dropped
        );
        text.push_str("# HELP routeval_keys_reloads_total Reloads of the keys file, by outcome.\n# TYPE routeval_keys_reloads_total counter\n");
        for (outcome, count) in &counters.keys_reloads {
            let _ = writeln!(
                text,
                "routeval_keys_reloads_total{{outcome=\"{outcome}\"}} {count}"
            );
        }
        text.push_str("# HELP routeval_config_reloads_total Reloads of the config, by outcome.\n# TYPE routeval_config_reloads_total counter\n");
        for (outcome, count) in &counters.reloads {
            let _ = writeln!(
                text,
                "routeval_config_reloads_total{{outcome=\"{outcome}\"}} {count}"
            );
        }
        text
    }
}
