//! The counters of [`Metrics`](super::Metrics) written as Prometheus text,
//! one function per group of families.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::counters::{
    BudgetGauges, Counters, DURATION_BUCKETS, FIRST_TOKEN_BUCKETS, Gauges, Histogram,
    MAX_SLICE_LABELS, OTHER, UsageFamily,
};
use crate::records::Reason;

/// Requests by route and by slice, their latency, tokens and cost.
pub(super) fn requests(out: &mut String, counters: &Counters) {
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
pub(super) fn upstreams(out: &mut String, counters: &Counters, budget: &BudgetGauges) {
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
pub(super) fn served(out: &mut String, gauges: &Gauges<'_>) {
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
    gauge(
        out,
        "routeval_config_reload_refused",
        "Whether the last reload of the config was refused, with none applied since (the log's config_reload_refused and /readyz say why).",
        u8::from(gauges.reload_refused),
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
pub(super) fn reloads(out: &mut String, counters: &Counters) {
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
        (
            "routeval_provider_keys_reloads_total",
            "Reloads of --provider-keys that changed a route's key, or were refused, by outcome.",
            &counters.provider_keys_reloads,
        ),
    ] {
        family(out, name, "counter", help);
        for (outcome, value) in values {
            sample(out, name, &[("outcome", outcome)], *value);
        }
    }
}

/// A label value as the exposition format escapes it.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Which build is serving, the connections it holds, and the process's
/// own resources, under the names Prometheus's process collectors use.
pub(super) fn process(out: &mut String, gauges: &Gauges<'_>) {
    family(
        out,
        "routeval_build_info",
        "gauge",
        "The routeval build serving, by version; always 1.",
    );
    sample(
        out,
        "routeval_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    gauge(
        out,
        "routeval_open_connections",
        "Client connections open now.",
        gauges.open_connections,
    );
    gauge(
        out,
        "process_start_time_seconds",
        "When the process started, seconds since 1970.",
        gauges.started_s,
    );
    let own = ProcessFigures::read();
    if let Some(seconds) = own.cpu_seconds {
        family(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, seconds.",
        );
        sample(out, "process_cpu_seconds_total", &[], seconds);
    }
    for (name, help, value) in [
        (
            "process_resident_memory_bytes",
            "Resident memory, bytes.",
            own.resident_bytes,
        ),
        ("process_open_fds", "Open file descriptors.", own.open_fds),
        (
            "process_max_fds",
            "The most file descriptors the process may open.",
            own.max_fds,
        ),
    ] {
        if let Some(value) = value {
            gauge(out, name, help, value);
        }
    }
}

/// The process's resources, from `/proc/self`; each unknown where it
/// cannot be read.
struct ProcessFigures {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

/// Linux's clock ticks per second as `/proc` counts them (USER_HZ, fixed
/// at 100 for user space).
const USER_HZ: f64 = 100.0;

impl ProcessFigures {
    fn read() -> ProcessFigures {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        // The fields after the command name, which may hold spaces:
        // utime and stime are the 14th and 15th of the line.
        let cpu_seconds = stat.as_deref().and_then(|stat| {
            let rest = &stat[stat.rfind(')')?.saturating_add(2)..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks = |index: usize| fields.get(index)?.parse::<f64>().ok();
            Some((ticks(11)? + ticks(12)?) / USER_HZ)
        });
        let resident_bytes = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib.saturating_mul(1024))
            });
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as u64);
        ProcessFigures {
            cpu_seconds,
            resident_bytes,
            open_fds,
            max_fds: super::super::connections::open_file_limit(),
        }
    }
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
