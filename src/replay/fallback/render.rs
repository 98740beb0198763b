//! The fallback replay on the terminal.

use crate::schema::BreakerPoint;
use crate::schema::{BreakerCalibration, FallbackDocument};

/// The replay on the terminal: a row per policy, then the breaker search.
pub fn render_fallback(document: &FallbackDocument) -> String {
    let (header, rows) = document.policy_table();
    let policies = crate::terminal::table(header, rows);
    let fallback = match (&document.fallback_route, document.fallback_ttft_ms) {
        (Some(route), _) => {
            let source = document.fallback_latency.unwrap_or_default();
            format!(
                "the fallback {route} timed by its records: {} moved requests by their own (the first token less the attempt they left), {} moved requests whose attempt has no time by its record nearest in time, {} requests sent to it directly",
                source.moved_timed, source.moved_untimed, source.direct
            )
        }
        (None, Some(ms)) => format!("a fallback answering in {ms} ms"),
        (None, None) => "no fallback latency".to_owned(),
    };
    let mut out = format!(
        "{}: {} requests of {}, {fallback}\n{}\n",
        document.records.path,
        document
            .policies
            .first()
            .map_or(0, |policy| policy.requests),
        document.route,
        policies
    );
    for policy in &document.policies {
        if let Some(capacity) = document.fallback_capacity_per_s
            && policy.peak_fallback_per_s as f64 > capacity
        {
            out.push_str(&format!(
                "warning: {} sends the fallback {} requests in one second; its rpm allows {capacity:.1} per second\n",
                policy.name, policy.peak_fallback_per_s
            ));
        }
        if policy.imputed_requests > 0 {
            out.push_str(&format!(
                "note: {} sends {} requests to the primary that an open breaker had moved without a try; each goes as the nearest request in time the primary answered\n",
                policy.name, policy.imputed_requests
            ));
        }
        if policy.extra_share > document.retry_budget {
            out.push_str(&format!(
                "warning: {} sends {:.1}% extra requests, over the retry budget of {:.0}%\n",
                policy.name,
                policy.extra_share * 100.0,
                document.retry_budget * 100.0
            ));
        }
    }
    if let Some(calibration) = &document.calibration {
        out.push_str(&render_calibration(calibration));
    }
    out
}

fn render_calibration(calibration: &BreakerCalibration) -> String {
    let bounds = bounds_text(calibration);
    let Some(chosen) = &calibration.chosen else {
        return format!("\nbreaker search: no deadline and count keep within {bounds}\n");
    };
    let row = |label: &str, point: &BreakerPoint| {
        vec![
            label.to_owned(),
            format!("{:.0}", point.first_token_deadline_ms),
            point.open_after.to_string(),
            format!("{:.2}", point.p95_wait_s),
            format!("{:.1}", point.total_wait_s),
            format!("{:.1}%", point.fallback_share * 100.0),
        ]
    };
    let rows = std::iter::once(row("chosen", chosen)).chain(
        calibration
            .neighbours
            .iter()
            .map(|neighbour| row("neighbour", neighbour)),
    );
    let points = crate::terminal::table(
        [
            "",
            "deadline ms",
            "open after",
            "p95 wait s",
            "total wait s",
            "to fallback",
        ],
        rows,
    );
    format!(
        "\nbreaker search: {} points, open {:.0} ms; the chosen keeps within {bounds}\n{}\n",
        calibration.points.len(),
        calibration.open_ms,
        points
    )
}

/// The bounds a search kept within, as a sentence.
fn bounds_text(calibration: &BreakerCalibration) -> String {
    let mut bounds = vec![format!(
        "{:.0}% of the traffic to the fallback",
        calibration.max_fallback_share * 100.0
    )];
    if let Some(budget) = calibration.retry_budget {
        bounds.push(format!(
            "{:.0}% extra requests (--retry-budget)",
            budget * 100.0
        ));
    }
    if let Some(capacity) = calibration.fallback_capacity_per_s {
        bounds.push(format!(
            "{capacity:.1} requests per second to the fallback (its rpm)"
        ));
    }
    bounds.join(", ")
}
