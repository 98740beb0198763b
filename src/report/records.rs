//! What the gateway's records say, in the report: drift from records (each
//! route's first token and fallbacks per window, so a brown-out is a
//! window), the replayed breaker policies, and the hedging trade-off by
//! prompt length; and candidate tables estimated on the traffic
//! (`replay candidate`). Each comes from the document its command writes.

use std::fmt::Write as _;

use super::kit::{BLUE, GREY, ORANGE, table};
use super::svg::{Chart, Series, Style, bars, escape};
use crate::markdown::{code, text};
use crate::schema::CandidateReplay;
use crate::schema::FallbackDocument;
use crate::schema::HedgeDocument;
use crate::schema::RecordsDriftDocument;

const PALETTE: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

/// The records documents given to `report --records`.
#[derive(Debug, Clone, Default)]
pub struct RecordsDocuments {
    pub drift: Option<RecordsDriftDocument>,
    pub fallback: Option<FallbackDocument>,
    pub hedge: Option<HedgeDocument>,
    /// Candidates estimated on the traffic, one document each.
    pub candidates: Vec<CandidateReplay>,
}

impl RecordsDocuments {
    pub fn is_empty(&self) -> bool {
        self.drift.is_none()
            && self.fallback.is_none()
            && self.hedge.is_none()
            && self.candidates.is_empty()
    }
}

fn hours_since(start_ms: i64, first_ms: i64) -> f64 {
    (start_ms - first_ms) as f64 / 3_600_000.0
}

fn drift_section(out: &mut String, drift: &RecordsDriftDocument) {
    let _ = write!(
        out,
        "<h2>Drift from request records: {}</h2><p>{} records of <code>{}</code> against config {} version {}, in windows of {} minutes.</p>",
        drift.verdict.name(),
        drift.records.rows,
        escape(&drift.records.path),
        escape(&drift.config.config_id),
        drift.config.version,
        drift.window_ms / 60_000
    );
    // Hours count from the first window's start: the first record may come
    // after it, and no window starts before zero.
    let first = drift.first_ms.map_or(0, |ms| {
        ms.div_euclid(drift.window_ms.max(1)) * drift.window_ms.max(1)
    });
    let per_route =
        |title: &str,
         y_label: &str,
         value: &dyn Fn(&crate::schema::RecordsRouteDrift, usize) -> Option<f64>| Chart {
            title: title.to_owned(),
            x_label: "hours into the records".to_owned(),
            y_label: y_label.to_owned(),
            series: drift
                .routes
                .iter()
                .enumerate()
                .map(|(index, route)| Series {
                    name: route.route.clone(),
                    color: PALETTE[index % PALETTE.len()],
                    style: Style::Line,
                    points: route
                        .windows
                        .iter()
                        .enumerate()
                        .filter_map(|(window, row)| {
                            value(route, window).map(|y| (hours_since(row.start_ms, first), y))
                        })
                        .collect(),
                })
                .collect(),
            ..Chart::default()
        };
    out.push_str("<div class=\"charts\">");
    out.push_str(
        &per_route("First token p95 per window", "ms", &|route, window| {
            route.windows[window].ttft_p95_ms
        })
        .to_svg(),
    );
    out.push_str(
        &per_route(
            "Requests that fell back, per window",
            "% of the route's requests",
            &|route, window| Some(route.windows[window].fallback_share * 100.0),
        )
        .to_svg(),
    );
    out.push_str("</div>");
    for (header, rows) in [drift.slice_table(), drift.route_table()] {
        table(out, &header, rows.into_iter());
    }
}

fn fallback_section(out: &mut String, fallback: &FallbackDocument) {
    let source = match (&fallback.fallback_route, fallback.fallback_ttft_ms) {
        (Some(route), _) => format!(
            "the fallback <code>{}</code> answering as its records say",
            escape(route)
        ),
        (None, Some(ms)) => format!("a fallback answering in {ms} ms"),
        (None, None) => "no fallback".to_owned(),
    };
    let _ = write!(
        out,
        "<h2>Breakers and fallback: replay of <code>{}</code></h2><p>{} requests of route <code>{}</code>, with {source}.</p><div class=\"charts\">",
        escape(&fallback.records.path),
        fallback
            .policies
            .first()
            .map_or(0, |policy| policy.requests),
        escape(&fallback.route)
    );
    let waits: Vec<(String, Vec<(f64, &'static str)>)> = fallback
        .policies
        .iter()
        .map(|policy| (policy.name.clone(), vec![(policy.total_wait_s, BLUE)]))
        .collect();
    out.push_str(&bars("Total wait for a first token", "s", &waits, &[]));
    let tails: Vec<(String, Vec<(f64, &'static str)>)> = fallback
        .policies
        .iter()
        .map(|policy| {
            (
                policy.name.clone(),
                vec![(policy.p95_wait_s, ORANGE), (policy.p50_wait_s, GREY)],
            )
        })
        .collect();
    out.push_str(&bars("Wait: p95 (orange) and p50 (grey)", "s", &tails, &[]));
    out.push_str("</div>");
    let (header, rows) = fallback.policy_table();
    table(out, &header, rows.into_iter());
    if let Some(chosen) = fallback
        .calibration
        .as_ref()
        .and_then(|calibration| calibration.chosen.as_ref())
    {
        let _ = write!(
            out,
            "<p>Calibrated breaker: first-token deadline {:.0} ms, open after {} failures: p95 wait {:.2} s, {:.1}% to the fallback.</p>",
            chosen.first_token_deadline_ms,
            chosen.open_after,
            chosen.p95_wait_s,
            chosen.fallback_share * 100.0
        );
    }
}

fn hedge_section(out: &mut String, hedge: &HedgeDocument) {
    let _ = write!(
        out,
        "<h2>Hedging: replay of <code>{}</code></h2><p>A second copy after the first has waited each delay; the chart shows, per prompt length, the p95 first token saved per thousand extra input tokens (higher pays better).</p><div class=\"charts\">",
        escape(&hedge.records.path)
    );
    let mut buckets: Vec<&str> = Vec::new();
    for row in &hedge.rows {
        if !buckets.contains(&row.bucket.as_str()) {
            buckets.push(&row.bucket);
        }
    }
    let chart = Chart {
        title: "p95 first token saved per 1k extra input tokens".to_owned(),
        x_label: "hedge delay: percentile of first tokens".to_owned(),
        y_label: "ms saved / 1k tokens".to_owned(),
        series: buckets
            .iter()
            .enumerate()
            .map(|(index, bucket)| Series {
                name: (*bucket).to_owned(),
                color: PALETTE[index % PALETTE.len()],
                style: if *bucket == "all" {
                    Style::Dashed
                } else {
                    Style::Line
                },
                points: hedge
                    .rows
                    .iter()
                    .filter(|row| row.bucket == *bucket)
                    .filter_map(|row| {
                        row.p95_ms_saved_per_k_extra_input
                            .map(|saved| (row.delay_quantile * 100.0, saved))
                    })
                    .collect(),
            })
            .collect(),
        ..Chart::default()
    };
    out.push_str(&chart.to_svg());
    out.push_str("</div>");
    let (header, rows) = hedge.table();
    table(out, &header, rows.into_iter());
}

fn candidate_section(out: &mut String, candidate: &CandidateReplay) {
    let _ = write!(
        out,
        "<h2>On production traffic: <code>{}</code></h2><p>Estimated on {} requests that config version {} (<code>{}</code>) decided, {} of them labelled; intervals at confidence {} ({}). The difference is the candidate's quality minus the running config's on the same requests.</p>",
        escape(&candidate.candidate.path),
        candidate.overall.requests,
        candidate.logged_by.version,
        escape(&candidate.logged_by.path),
        candidate.labels.rows,
        candidate.confidence,
        candidate.bound_described()
    );
    let (header, rows) = candidate.table();
    table(out, &header, rows.into_iter());
}

/// The records' sections of the HTML report.
pub fn records_section(out: &mut String, documents: &RecordsDocuments) {
    for candidate in &documents.candidates {
        candidate_section(out, candidate);
    }
    if let Some(drift) = &documents.drift {
        drift_section(out, drift);
    }
    if let Some(fallback) = &documents.fallback {
        fallback_section(out, fallback);
    }
    if let Some(hedge) = &documents.hedge {
        hedge_section(out, hedge);
    }
}

/// A report of records alone.
pub fn records_page(title: &str, documents: &RecordsDocuments) -> String {
    super::kit::page(title, |out| records_section(out, documents))
}

/// A candidate's estimate on production traffic, in one Markdown line.
pub(super) fn production_line(candidate: &crate::schema::CandidateReplay) -> String {
    let overall = &candidate.overall;
    format!(
        "**On production traffic**, {} ({} requests of config version {}, {} labelled): quality {} (doubly robust), against the running config {}, escalation {:.1}%; {}",
        code(&candidate.candidate.path),
        overall.requests,
        candidate.logged_by.version,
        candidate.labels.rows,
        overall.quality.dr,
        overall.quality_difference,
        overall.escalation_rate.estimate * 100.0,
        candidate.bound_described()
    )
}

/// The records' lines of the Markdown summary.
pub fn records_summary(out: &mut String, documents: &RecordsDocuments) {
    for candidate in &documents.candidates {
        let _ = writeln!(out, "{}\n", production_line(candidate));
    }
    if let Some(drift) = &documents.drift {
        let _ = writeln!(
            out,
            "**Drift from records** ({} records of {}): {}\n",
            drift.records.rows,
            code(&drift.records.path),
            drift.verdict.name()
        );
        let slices = drift.slices.iter().map(|slice| {
            vec![
                text(&slice.slice),
                slice.requests.to_string(),
                slice.verdict.name().to_owned(),
            ]
        });
        out.push_str(&crate::markdown::table(
            &["slice", "requests", "verdict"],
            slices,
            ..0,
        ));
        let routes = drift.routes.iter().map(|route| {
            vec![
                text(&route.route),
                format!("{:.1}%", route.fallback_share * 100.0),
                route
                    .ttft_p95_ms
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}")),
                route.verdict.name().to_owned(),
            ]
        });
        out.push('\n');
        out.push_str(&crate::markdown::table(
            &["route", "fell back", "TTFT p95 ms", "verdict"],
            routes,
            ..0,
        ));
        out.push('\n');
    }
    if let Some(fallback) = &documents.fallback {
        let _ = writeln!(
            out,
            "**Breakers replayed** on route {}:\n",
            code(&fallback.route)
        );
        let policies = fallback.policies.iter().map(|policy| {
            vec![
                text(&policy.name),
                format!("{:.1}", policy.total_wait_s),
                format!("{:.2}", policy.p95_wait_s),
                format!("{:.1}%", policy.fallback_share * 100.0),
            ]
        });
        out.push_str(&crate::markdown::table(
            &["policy", "total wait s", "p95 s", "to fallback"],
            policies,
            ..0,
        ));
        out.push('\n');
    }
    if let Some(hedge) = &documents.hedge {
        out.push_str("**Hedging** at the p95 delay:\n\n");
        let rows = hedge
            .rows
            .iter()
            .filter(|row| row.delay_quantile == 0.95)
            .map(|row| {
                vec![
                    text(&row.bucket),
                    format!("{:.0} → {:.0}", row.p95_ttft_ms[0], row.p95_ttft_ms[1]),
                    format!("{:.1}%", row.extra_input_share * 100.0),
                ]
            });
        out.push_str(&crate::markdown::table(
            &["prompt", "p95 ms", "extra input"],
            rows,
            ..0,
        ));
        out.push('\n');
    }
}
